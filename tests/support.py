"""Helpers the test files share: starting and stopping child processes, keeping them off the network.

Importable as ``support`` from any test (pytest puts ``tests/`` on ``sys.path`` for its conftest).
"""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

#: the repository's root (children run from here)
REPO = Path(__file__).resolve().parents[1]

#: Slack for any lower bound derived from the simulator's timing (a TTFT at least the simulated TTFT, no chunk
#: before the server sent it, no request before the client sent it): the client's kernel receive times
#: converted onto perf_counter differ from a direct CLOCK_MONOTONIC read by ~10-20 us; 3 ms is far above that
#: and far below any real error (a whole ITL, a counted role chunk).
CLOCK_SLACK_S = 0.003

#: never handed to a child: keys, debug switches, a hub endpoint
_CHILD_ENV_DROP = ("OPENAI_API_KEY", "LLMLOAD_DEBUG", "HF_ENDPOINT")


#: the X-Request-Id of the one request ``llmload bench`` sends before the run (its initial test)
INITIAL_TEST_ID = "llmload-initial-test"


def is_run_request(client_id: str) -> bool:
    """A request of the run itself, as the simulator's trace names it (not the initial test)."""
    return bool(client_id) and client_id != INITIAL_TEST_ID


def llmload_command() -> list[str]:
    """The installed ``llmload`` console script next to this interpreter (not a pyenv shim), else ``-c``."""
    script = Path(sys.executable).with_name("llmload")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from llmload.cli import main; sys.exit(main())"]


def locust_command() -> list[str]:
    """The installed ``locust`` console script next to this interpreter, else ``python -m locust``."""
    script = Path(sys.executable).with_name("locust")
    return [str(script)] if script.exists() else [sys.executable, "-m", "locust"]


def locust_argv(*args: str) -> list[str]:
    """``locust ARGS``; with ``--processes`` and no master port given, master and forked workers meet on a
    :func:`free_port` (Locust's default 5557 would be shared by every test that runs at the same time)."""
    argv = [*locust_command(), *(str(a) for a in args)]
    if "--processes" in argv and not any(a.startswith(("--master-bind-port", "--master-port")) for a in argv):
        port = str(free_port())
        argv += ["--master-bind-port", port, "--master-port", port]
    return argv


def offline_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a child that must never touch the network: Hugging Face offline, no API key, no
    ``LLMLOAD_*`` settings leaking in from the caller, loopback never proxied; ``extra`` on top."""
    env = {k: v for k, v in os.environ.items() if k not in _CHILD_ENV_DROP and not k.startswith("LLMLOAD_")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1", PYTHONUNBUFFERED="1",
               NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
    env.update(extra or {})
    return env


#: ports :func:`free_port` hands out: below Linux's ephemeral range (32768-60999), so neither ``bind(0)`` nor an
#: outgoing connection anywhere on the machine takes one meanwhile; each xdist worker draws from its own block
PORT_RANGE = (20000, 32000)
PORT_BLOCK = 250


class PortPool:
    """The ports one test process hands out: its worker's block, each port at most once, each checked free."""

    def __init__(self, worker: int) -> None:
        low, high = PORT_RANGE
        blocks = (high - low) // PORT_BLOCK
        self.first = low + (worker % blocks) * PORT_BLOCK
        self.next = self.first

    def take(self) -> int:
        for _ in range(PORT_BLOCK):
            port, self.next = self.next, self.first + (self.next + 1 - self.first) % PORT_BLOCK
            if _bindable(port):
                return port
        raise RuntimeError(f"no free port in {self.first}-{self.first + PORT_BLOCK - 1}")


def _bindable(port: int) -> bool:
    for host in ("127.0.0.1", "0.0.0.0"):
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                return False
    return True


@functools.cache
def _port_pool() -> PortPool:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return PortPool(int(worker[2:]) + 1 if worker[2:].isdigit() else 0)


@contextmanager
def http_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A ``ThreadingHTTPServer`` on 127.0.0.1 with ``handler``, serving on a thread: yields its URL, and is shut
    down, closed and its thread joined on the way out (also when the test fails)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def free_port() -> int:
    """A port nobody listens on, that no other test of this run is handed (xdist workers included): the
    simulators and servers tests start on ``--port 0`` get theirs from the kernel, every port a test must
    choose itself (a Locust master, a web UI) comes from here."""
    return _port_pool().take()


def end_process(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """Stop a child we started, by its PID: SIGTERM (llmload bench then stops the simulator it started), then
    SIGKILL to the process group ``start_new_session`` made for it (its workers, should they outlive it)."""
    if proc.poll() is None:
        try:
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(timeout=grace)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the group start_new_session made for this process: ours only
    except (ProcessLookupError, PermissionError):
        pass
    if proc.poll() is None:
        proc.wait(timeout=5)


def match_trace(records: list[dict], trace: list[dict]) -> list[tuple[dict, dict]]:
    """Pair each client record with the simulator's trace line for it: same X-Request-Id, the first one the
    server received after the record's send time, give or take :data:`CLOCK_SLACK_S` (the probe request and
    earlier runs reuse sample ids)."""
    by_id: dict[str, list[dict]] = {}
    for line in trace:
        by_id.setdefault(line["client_id"], []).append(line)
    pairs = []
    for rec in records:
        candidates = [t for t in by_id.get(rec["request_id"], []) if t["received"] >= rec["start"] - CLOCK_SLACK_S]
        assert candidates, f"the server has no request {rec['request_id']!r} received after {rec['start']}"
        pairs.append((rec, min(candidates, key=lambda t: t["received"])))
    return pairs


def _no_constant(name: str):
    raise AssertionError(f"{name} in a result JSON: not JSON (write_json must write 'inf' or null)")


def strict_json(text: str, where: object = "") -> dict:
    """``json.loads`` that rejects ``Infinity``, ``-Infinity`` and ``NaN``, which Python's json writes and
    accepts by default but no other JSON reader does."""
    import json

    try:
        return json.loads(text, parse_constant=_no_constant)
    except AssertionError as exc:
        raise AssertionError(f"{where}: {exc}") from None


def tail(path: Path, n: int = 3000) -> str:
    """The end of a child's output file, for an assertion message."""
    text = path.read_text(errors="replace") if path.exists() else ""
    return f"--- {path.name} ---\n{text[-n:]}"


def wait_for_text(path: Path, pattern: str, proc: subprocess.Popen, timeout: float, count: int = 1) -> str:
    """Wait until ``pattern`` (a regex) appears ``count`` times in ``path``; fails the test if ``proc`` exits or
    ``timeout`` passes first. Returns the file's text."""
    import pytest

    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = path.read_text(errors="replace") if path.exists() else ""
        if len(re.findall(pattern, text)) >= count:
            return text
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    pytest.fail(f"{pattern!r} did not appear {count}x in {path.name} within {timeout} s (exit {proc.poll()})\n"
                f"{tail(path)}")


def trace_lines(path: Path) -> list[dict]:
    """The simulator's ``--trace-file`` lines so far, one per finished request (a line being written is left out)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(errors="replace").split("\n")[:-1] if line.strip()]


def assert_sent_once_but_the_batch_window(trace: Path, prompts: int, frozen_at: float) -> list[str]:
    """Every request of the run reached the simulator, each once, but for those a frozen worker released in its
    last batch window before the freeze (not yet reported as sent, so handed over): at most 3, each first sent
    before ``frozen_at`` (``time.monotonic()``, the clock of the trace's ``received``). Returns those sent twice.
    Without the ``llm_resumed`` check a woken worker sends every request it had been given (dozens twice)."""
    received = Counter(t["client_id"] for t in trace_lines(trace) if is_run_request(t["client_id"]))
    assert len(received) == prompts, len(received)
    twice = sorted(i for i, n in received.items() if n > 1)
    assert max(received.values()) <= 2, received.most_common(5)
    assert len(twice) <= 3, f"{len(twice)} requests sent twice: {twice}"
    for i in twice:
        first = min(t["received"] for t in trace_lines(trace) if t["client_id"] == i)
        assert first < frozen_at, f"{i} was sent twice, the first time after the freeze began"
    return twice


class ChildProcesses:
    """The processes one test started: each in its own session with its output in files, all ended by PID in
    :meth:`close` (also when the test fails). Use as a context manager."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.started: list[subprocess.Popen] = []

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None, *, cwd: Path | None = None,
              preexec_fn: Callable[[], None] | None = None) -> tuple[subprocess.Popen, Path, Path]:
        """Start ``argv`` with stdout/stderr in ``tmp/NAME.stdout``/``.stderr``; returns (process, out, err)."""
        out, err = self.tmp / f"{name}.stdout", self.tmp / f"{name}.stderr"
        with open(out, "wb") as fo, open(err, "wb") as fe:
            proc = subprocess.Popen(argv, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL,
                                    env=env if env is not None else offline_env(), cwd=cwd or REPO,
                                    start_new_session=True, preexec_fn=preexec_fn)
        self.started.append(proc)
        return proc, out, err

    def close(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                try:
                    os.kill(proc.pid, signal.SIGCONT)  # a stopped process cannot act on SIGTERM
                except ProcessLookupError:
                    pass
            end_process(proc)

    def __enter__(self) -> ChildProcesses:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def json_type(value: object) -> str:
    """The JSON type of a value, lists with the types of their items: ``list[list[number]]``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        items = {json_type(v) for v in value}
        # vLLM writes TTFT 0.0 and ITL lists empty for a failed request: an empty list fits any list
        items.discard("list[]")
        if items >= {"list[number]"}:
            items.discard("list[int]")
        return f"list[{'|'.join(sorted(items))}]"
    return type(value).__name__
