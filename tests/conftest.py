"""Shared fixtures: start the real ``llmload sim`` as a subprocess on 127.0.0.1 and always stop it by PID."""

from __future__ import annotations

import os
import re
import selectors
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import end_process, llmload_command, locust_argv, offline_env, strict_json

#: the parallel phase and the serial one (phases.py); the gevent and CI-skip guards (guards.py)
pytest_plugins = ["phases", "guards"]

_LISTENING = re.compile(rb"llmload sim listening on http://127\.0\.0\.1:(\d+)")

#: the two readers (llmload.client.transport.readers); CI requires the compiled one (LLMLOAD_TEST_REQUIRE)
READERS = (pytest.param("compiled", marks=pytest.mark.needs("compiled-reader")), "python")


@pytest.fixture(params=READERS)
def reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs the test once with each reader, chosen the way a run chooses one (``LLMLOAD_READER``, which child
    processes inherit): the compiled reader and its pure-Python twin must give the same results."""
    from llmload.client.transport import readers

    name: str = request.param
    if name not in readers.available():
        pytest.skip("the compiled reader is not built here (no C compiler when llmload was installed)")
    monkeypatch.setenv(readers.READER_ENV, name)
    return name




@dataclass
class Sim:
    """A running ``llmload sim`` process."""

    proc: subprocess.Popen
    port: int
    args: tuple[str, ...]
    stderr_path: Path
    banner: str = ""

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stderr(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""


def _stop(proc: subprocess.Popen) -> None:
    """End a simulator we started (and its forked workers), then close its output pipe."""
    end_process(proc, grace=5.0)
    if proc.stdout is not None:
        proc.stdout.close()


def launch_sim(args: tuple[str, ...], stderr_path: Path, timeout: float = 20.0) -> Sim:
    cmd = [*llmload_command(), "sim", "--host", "127.0.0.1", "--port", "0", *args]
    with open(stderr_path, "wb") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    deadline = time.monotonic() + timeout
    buf = b""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        while True:
            m = _LISTENING.search(buf)
            if m and b"\n" in buf[m.end():]:
                line = buf[m.start(): buf.index(b"\n", m.end())].decode()
                return Sim(proc=proc, port=int(m.group(1)), args=args, stderr_path=stderr_path, banner=line)
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"llmload sim did not start within {timeout} s: {cmd}\n{stderr_path.read_text()}")
            if not sel.select(timeout=left):
                continue
            data = os.read(proc.stdout.fileno(), 65536)
            if not data:
                proc.wait(timeout=5)
                raise RuntimeError(
                    f"llmload sim exited with {proc.returncode} before listening: {cmd}\n{stderr_path.read_text()}"
                )
            buf += data
    except BaseException:
        _stop(proc)
        raise
    finally:
        sel.close()


class SimFactory:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.sims: list[Sim] = []

    def __call__(self, *args: str, timeout: float = 20.0) -> Sim:
        path = self.tmp / f"sim-{len(self.sims)}.stderr"
        sim = launch_sim(tuple(str(a) for a in args), path, timeout)
        self.sims.append(sim)
        return sim

    def stop(self, sim: Sim) -> None:
        _stop(sim.proc)

    def close(self) -> None:
        for sim in self.sims:
            _stop(sim.proc)


@pytest.fixture(scope="session")
def llmload_cmd() -> list[str]:
    """The argv prefix that runs ``llmload``."""
    return llmload_command()


@pytest.fixture
def start_sim(tmp_path: Path) -> Iterator[Callable[..., Sim]]:
    """``start_sim(*flags) -> Sim``: a fresh simulator for this test, stopped at teardown (also on failure)."""
    factory = SimFactory(tmp_path)
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture(scope="module")
def start_sim_module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Sim]]:
    """Like ``start_sim`` but the simulators live for the whole test module."""
    factory = SimFactory(tmp_path_factory.mktemp("sim"))
    try:
        yield factory
    finally:
        factory.close()


# -- llmload bench / locust as child processes (issue 3's integration tests) ------------------------------









@dataclass
class ChildRun:
    """A finished ``llmload bench`` / ``locust`` run: exit code, output, and what it saved."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    result_dir: Path

    def describe(self, tail: int = 3000) -> str:
        def clip(text: str) -> str:
            return text if len(text) <= 2 * tail else f"{text[:tail]}\n[...]\n{text[-tail:]}"

        return (f"$ {' '.join(self.argv)}\nexit code {self.returncode}\n--- stdout ---\n{clip(self.stdout)}\n"
                f"--- stderr ---\n{clip(self.stderr)}")

    def result_path(self) -> Path:
        """The one result JSON in ``result_dir``."""
        found = sorted(p for p in self.result_dir.glob("*.json"))
        assert len(found) == 1, f"expected one result JSON in {self.result_dir}, found {found}\n{self.describe()}"
        return found[0]

    def result(self) -> dict:
        """The result JSON, read as standard JSON: ``Infinity`` / ``NaN`` (not JSON) fail the test."""
        return strict_json(self.result_path().read_text(), self.result_path())

    def records_path(self) -> Path:
        path = self.result_path()
        return path.with_name(path.name[: -len(".json")] + ".records.jsonl")

    def records(self) -> list[dict]:
        import json

        path = self.records_path()
        assert path.exists(), f"no records file {path}\n{self.describe()}"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class ChildRunner:
    """Runs a command to completion with a timeout; the child is always ended by PID (also on timeout,
    failure or Ctrl-C) and its output kept for assertion messages."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.count = 0
        self.live: list[subprocess.Popen] = []

    def run(self, argv: list[str], *, env: dict[str, str] | None = None, timeout: float = 120.0,
            cwd: Path | str | None = None, result_dir: Path | None = None) -> ChildRun:
        self.count += 1
        result_dir = result_dir or self.tmp / f"run{self.count}"
        result_dir.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                env=env if env is not None else offline_env(), cwd=cwd, text=True,
                                errors="replace", start_new_session=True)
        self.live.append(proc)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            end_process(proc)
            out, err = proc.communicate()
            run = ChildRun(argv, proc.returncode, out, err, result_dir)
            pytest.fail(f"timed out after {timeout} s\n{run.describe()}")
        finally:
            end_process(proc)
            self.live.remove(proc)
        return ChildRun(argv, proc.returncode, out, err, result_dir)

    def bench(self, *args: str, env_extra: dict[str, str] | None = None, timeout: float = 120.0) -> ChildRun:
        """``llmload bench ARGS`` offline; ``--result-dir`` is a fresh directory unless given."""
        args = tuple(str(a) for a in args)
        self.count += 1
        result_dir = self.tmp / f"bench{self.count}"
        if "--result-dir" in args:
            result_dir = Path(args[args.index("--result-dir") + 1])
        else:
            args = (*args, "--result-dir", str(result_dir))
        return self.run([*llmload_command(), "bench", *args], env=offline_env(env_extra), timeout=timeout,
                        result_dir=result_dir)

    def locust(self, *args: str, env_extra: dict[str, str] | None = None, timeout: float = 60.0) -> ChildRun:
        """``locust ARGS`` offline, run from the repository root (so ``-f locustfiles/...`` resolves)."""
        return self.run(locust_argv(*args), env=offline_env(env_extra), timeout=timeout,
                        cwd=Path(__file__).resolve().parents[1])

    def close(self) -> None:
        for proc in list(self.live):
            end_process(proc)


@dataclass
class CliRun:
    """``llmload ARGV`` run in this process by its entry function: what a child's run would give."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str

    def describe(self) -> str:
        return f"$ llmload {' '.join(self.argv)}\nexit code {self.returncode}\n--- stdout ---\n{self.stdout[-3000:]}\n" \
               f"--- stderr ---\n{self.stderr[-3000:]}"


@pytest.fixture
def cli(capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., CliRun]:
    """``cli("report", path)``: ``llmload.cli.main`` in this process, offline, for usage errors and other runs
    that end before locust is imported (no interpreter to start, nothing to import again). A command that
    imports locust fails the test: it monkey-patches this process, so it belongs in a child (``child_runner``).
    One subprocess per command (``child_runner``) is enough to prove the console script itself."""

    def run(*args: object) -> CliRun:
        for name in list(os.environ):
            if name.startswith("LLMLOAD_") or name in ("OPENAI_API_KEY", "HF_ENDPOINT"):
                monkeypatch.delenv(name)
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
        from llmload.cli import main

        argv = [str(a) for a in args]
        capfd.readouterr()
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse: --help, usage errors
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        out, err = capfd.readouterr()
        if "locust" in sys.modules:
            pytest.fail(f"llmload {' '.join(argv)} imported locust in the test process: run it in a child")
        return CliRun(argv, code, out, err)

    return run


@pytest.fixture
def child_runner(tmp_path: Path) -> Iterator[ChildRunner]:
    """Runs ``llmload bench`` / ``locust`` to completion (``.bench(*flags)``, ``.run(argv)``); ended by PID."""
    runner = ChildRunner(tmp_path)
    try:
        yield runner
    finally:
        runner.close()


@pytest.fixture(scope="module")
def child_runner_module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChildRunner]:
    """Like ``child_runner``, for runs shared by a whole test module."""
    runner = ChildRunner(tmp_path_factory.mktemp("runs"))
    try:
        yield runner
    finally:
        runner.close()
