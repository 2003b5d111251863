"""Signals reach ``llmload bench`` in every phase (issue 9): real processes, real signals, 127.0.0.1 only.

- SIGINT/SIGTERM during start-up (starting the simulator, loading the tokenizer), during an initial test
  against a server that never answers, during the run and while draining: exit 130/143 promptly, one line
  about it on stderr, no traceback, and the simulator bench started is gone.
- A signal mid-run with ``--save-result`` keeps what was measured: ``"interrupted": true``, every request
  accounted for (sent = completed + failed + cut off, not_sent + sent = num_prompts), one record per request
  sent, "Interrupted by" in the summary.
- ``--stop-timeout`` is honoured with one process and with ``--processes 2``; a second signal while draining
  cuts off at once and still writes the result.
- SIGKILL of bench: the simulator and the worker processes die with it (``PR_SET_PDEATHSIG``).

Every bench run carries a unique marker in its environment, which its children (simulator, workers) inherit:
the tests find every process a run left behind by that marker, and stop each one by its PID at the end.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from support import end_process, llmload_command, match_trace, offline_env, trace_lines

MARK_VAR = "SIGTEST_MARK"
#: the generous bound for "exits promptly" on a busy 2-core machine
PROMPT_S = 20.0
_READY = re.compile(r"Simulator ready at (http://127\.0\.0\.1:\d+) \(pid (\d+)\)")
_WORKERS = re.compile(r"Started (\d+) local worker processes \(pids ([\d ]+)\)")

#: a short workload over the shipped tokenizer; open loop at 2 req/s so an uninterrupted run lasts 20 s
SLOW_RUN = ("--dataset-name", "random", "--random-input-len", "32", "--random-output-len", "8",
            "--num-prompts", "40", "--request-rate", "2", "--seed", "1", "--disable-tqdm")


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def marked_pids(mark: str) -> list[int]:
    """Live processes whose environment holds ``SIGTEST_MARK=mark``: a bench run and its descendants."""
    needle = f"{MARK_VAR}={mark}".encode() + b"\0"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ and _alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def children_of(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(x) for x in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def wait_until(condition, timeout: float, what: str, poll: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(poll)


def sim_requests(url: str) -> int:
    with urllib.request.urlopen(f"{url}/sim/stats", timeout=5) as resp:
        return int(json.loads(resp.read())["requests"])


class Bench:
    """One ``llmload bench`` child, its output in files, its descendants findable by marker."""

    def __init__(self, tmp: Path, n: int, args: tuple[str, ...]) -> None:
        self.mark = uuid.uuid4().hex
        self.argv = [*llmload_command(), "bench", *args]
        self.out_path, self.err_path = tmp / f"bench{n}.out", tmp / f"bench{n}.err"
        self._out, self._err = open(self.out_path, "w"), open(self.err_path, "w")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(self.argv, stdout=self._out, stderr=self._err, stdin=subprocess.DEVNULL,
                                     env=offline_env({MARK_VAR: self.mark}), start_new_session=True)
        self.signalled_at: float | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stdout(self) -> str:
        return self.out_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def describe(self) -> str:
        return (f"$ {' '.join(self.argv)}\nexit code {self.proc.poll()}\n--- stdout ---\n{self.stdout()[-3000:]}\n"
                f"--- stderr ---\n{self.stderr()[-3000:]}")

    def wait_stderr(self, pattern: str, timeout: float = 60.0) -> re.Match:
        """Wait for a line on stderr matching ``pattern``; fails if bench exits first."""
        regex = re.compile(pattern)

        def seen():
            m = regex.search(self.stderr())
            if m is None and self.proc.poll() is not None:
                m = regex.search(self.stderr())
                assert m is not None, f"bench exited before {pattern!r} appeared\n{self.describe()}"
            return m

        return wait_until(seen, timeout, f"{pattern!r} on stderr of bench")

    def sim(self, timeout: float = 60.0) -> tuple[str, int]:
        m = self.wait_stderr(_READY.pattern, timeout)
        return m.group(1), int(m.group(2))

    def send(self, sig: int) -> None:
        os.kill(self.pid, sig)
        if self.signalled_at is None:
            self.signalled_at = time.monotonic()

    def wait(self, timeout: float = PROMPT_S) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"bench still running {timeout} s after the signal\n{self.describe()}") from None

    def close(self) -> None:
        end_process(self.proc)
        for pid in marked_pids(self.mark):  # a simulator or worker it left behind: ours, by PID
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._out.close()
        self._err.close()


@pytest.fixture
def bench(tmp_path: Path):
    """``bench(*flags) -> Bench``: started now, every process of it ended by PID at teardown."""
    runs: list[Bench] = []

    def start(*args: str) -> Bench:
        run = Bench(tmp_path, len(runs), tuple(str(a) for a in args))
        runs.append(run)
        return run

    try:
        yield start
    finally:
        for run in runs:
            run.close()


class SilentServer:
    """Accepts connections on 127.0.0.1, reads what it is sent, never answers."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.accepted = 0
        self.conns: list[socket.socket] = []
        self._closed = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self._closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            self.accepted += 1

    def close(self) -> None:
        self._closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        for c in self.conns:
            c.close()
        self.thread.join(timeout=5)


@pytest.fixture
def silent_server():
    server = SilentServer()
    try:
        yield server
    finally:
        server.close()


def _assert_clean_exit(run: Bench, sig: int, rc: int) -> None:
    assert rc == 128 + sig, run.describe()
    err = run.stderr()
    assert "Traceback" not in err and "Traceback" not in run.stdout(), run.describe()


def _assert_gone(run: Bench, pids: list[int], timeout: float = 15.0) -> None:
    """Every given pid and every process carrying the run's marker is gone (within ``timeout``)."""
    def gone() -> bool:
        return not any(_alive(p) for p in pids) and not marked_pids(run.mark)

    try:
        wait_until(gone, timeout, "bench's children to exit")
    except AssertionError:
        left = [p for p in pids if _alive(p)] + marked_pids(run.mark)
        raise AssertionError(f"still running after bench exited: {sorted(set(left))}\n{run.describe()}") from None


def _signal_lines(run: Bench, sig: int) -> list[str]:
    name = signal.Signals(sig).name
    return [line for line in run.stderr().splitlines() if name in line]


# -- start-up -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("moment", ["starting the simulator", "loading the tokenizer"])
def test_signal_during_start_up(bench, sig: int, moment: str) -> None:
    """Old behaviour: the signal was lost and the full run completed with exit 0 (or, while the simulator
    started, the simulator was orphaned)."""
    run = bench("--sim-args", "--profile tiny", *SLOW_RUN)
    if moment == "starting the simulator":
        run.wait_stderr(r"No --base-url given: starting the built-in simulator")
    else:
        run.wait_stderr(r"Loading tokenizer")
    run.send(sig)
    rc = run.wait()
    _assert_clean_exit(run, sig, rc)
    err = run.stderr()
    # stopped before anything was measured: no summary (on a loaded machine the signal may land a moment later
    # than the line it answers, after "Starting main benchmark run" but before the run's first request)
    assert "Serving Benchmark Result" not in run.stdout(), f"the signal did not stop start-up\n{run.describe()}"
    lines = _signal_lines(run, sig)
    assert len(lines) == 1 and "start-up" in lines[0], run.describe()
    m = _READY.search(err)
    _assert_gone(run, [int(m.group(2))] if m else [])


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_during_initial_test_against_silent_server(bench, silent_server: SilentServer, sig: int) -> None:
    """Old behaviour: nothing happened until the 600 s read timeout."""
    run = bench("--base-url", silent_server.url, "--model", "m", "--tokenizer", "builtin", *SLOW_RUN)
    run.wait_stderr(r"Starting initial single prompt test run")
    wait_until(lambda: silent_server.accepted >= 1, 60, "the initial test's connection")
    run.send(sig)
    rc = run.wait()
    _assert_clean_exit(run, sig, rc)
    lines = _signal_lines(run, sig)
    assert len(lines) == 1, run.describe()
    assert "Starting main benchmark run" not in run.stderr(), run.describe()
    _assert_gone(run, [])


# -- during the run ------------------------------------------------------------------------------------------

#: requests of 0.05 + 19 * 0.02 s ~ 0.45 s, 40 of them at 10 req/s (an uninterrupted run: ~4.5 s)
SHORT_REQUESTS = ("--sim-args", "--ttft-ms 50 --itl-ms 20", "--dataset-name", "random", "--random-input-len",
                  "32", "--random-output-len", "20", "--ignore-eos", "--num-prompts", "40", "--request-rate", "10",
                  "--seed", "1", "--disable-tqdm")


def _result(tmp_path: Path, run: Bench) -> tuple[dict, list[dict]]:
    path = tmp_path / "result" / "run.json"
    assert path.exists(), f"no result JSON\n{run.describe()}"
    result = json.loads(path.read_text())
    records_path = tmp_path / "result" / "run.records.jsonl"
    assert records_path.exists(), f"no records file\n{run.describe()}"
    records = [json.loads(line) for line in records_path.read_text().splitlines() if line.strip()]
    return result, records


def _assert_accounted(result: dict, records: list[dict], num_prompts: int, sig: int, run: Bench) -> None:
    keys = ("sent", "completed", "failed", "cut_off", "not_sent", "failures_by_kind", "interrupted",
            "interrupt_signal")
    where = f"{json.dumps({k: result.get(k) for k in keys})}\n{run.describe()}"
    assert result["interrupted"] is True, where
    assert result["interrupt_signal"] == signal.Signals(sig).name, where
    cut = result["cut_off"]
    assert result["sent"] == result["completed"] + result["failed"] + cut, where
    assert sum(result["failures_by_kind"].values()) == result["failed"] + cut, where
    assert result["failures_by_kind"].get("cut_off", 0) == cut, where
    assert result["not_sent"] + result["sent"] == num_prompts, where
    assert len(records) == result["sent"], where
    assert sum(1 for r in records if r["cut_off"]) == cut, where
    assert "Interrupted by" in run.stdout(), where


@pytest.mark.parametrize(("sig", "processes"), [(signal.SIGINT, 1), (signal.SIGTERM, 2)],
                         ids=["SIGINT-1-process", "SIGTERM-2-processes"])
@pytest.mark.slow
def test_signal_mid_run_saves_partial_result(bench, tmp_path: Path, sig: int, processes: int) -> None:
    """Old behaviour: exit 0, and the result JSON did not say the run was interrupted."""
    extra = ("--processes", str(processes)) if processes > 1 else ()
    run = bench(*SHORT_REQUESTS, *extra, "--save-result", "--result-dir", str(tmp_path / "result"),
                "--result-filename", "run.json")
    url, sim_pid = run.sim()
    run.wait_stderr(r"Starting main benchmark run")
    wait_until(lambda: sim_requests(url) >= 8, 60, "8 requests at the simulator")
    run.send(sig)
    rc = run.wait()
    _assert_clean_exit(run, sig, rc)
    result, records = _result(tmp_path, run)
    _assert_accounted(result, records, 40, sig, run)
    # the records file holds them all, so the journal that held them during the run is gone
    assert not list((tmp_path / "result").glob("*.journal.jsonl")), run.describe()
    assert result["not_sent"] > 0, f"the signal came after every request was sent\n{run.describe()}"
    assert result["completed"] > 0, run.describe()
    _assert_gone(run, [sim_pid])


#: requests of 0.1 + 99 * 0.05 s ~ 5 s, 40 of them at 20 req/s
LONG_REQUESTS = ("--sim-args", "--ttft-ms 100 --itl-ms 50", "--dataset-name", "random", "--random-input-len",
                 "32", "--random-output-len", "100", "--ignore-eos", "--num-prompts", "40", "--request-rate", "20",
                 "--seed", "1", "--disable-tqdm", "--no-initial-test")


@pytest.mark.parametrize("processes", [1, 2], ids=["1-process", "2-processes"])
@pytest.mark.parametrize("stop_timeout", [3, 0])
@pytest.mark.slow
def test_stop_timeout_honoured(bench, tmp_path: Path, processes: int, stop_timeout: int) -> None:
    """SIGTERM while 5 s requests are in flight: bench waits --stop-timeout for them, then cuts them off.
    Old behaviour: ``--processes 2`` ignored the stop timeout (exited after 0.9 s); interrupted runs exited 0."""
    extra = ("--processes", str(processes)) if processes > 1 else ()
    run = bench(*LONG_REQUESTS, *extra, "--stop-timeout", str(stop_timeout), "--save-result", "--result-dir",
                str(tmp_path / "result"), "--result-filename", "run.json")
    url, sim_pid = run.sim()
    run.wait_stderr(r"Starting main benchmark run")
    wait_until(lambda: sim_requests(url) >= 6, 60, "6 requests in flight at the simulator")
    run.send(signal.SIGTERM)
    rc = run.wait(timeout=3 + 25)
    elapsed = time.monotonic() - run.signalled_at
    _assert_clean_exit(run, signal.SIGTERM, rc)
    result, records = _result(tmp_path, run)
    _assert_accounted(result, records, 40, signal.SIGTERM, run)
    assert result["cut_off"] >= 1, f"no request was cut off\n{run.describe()}"
    assert all(r["failure_kind"] == "cut_off" for r in records if r["cut_off"]), run.describe()
    if stop_timeout:
        assert 2.0 < elapsed < stop_timeout + 25, f"exited {elapsed:.1f} s after SIGTERM\n{run.describe()}"
    else:
        assert elapsed < 15, f"exited {elapsed:.1f} s after SIGTERM with --stop-timeout 0\n{run.describe()}"
    _assert_gone(run, [sim_pid])


#: requests of 0.1 + 399 * 0.05 s ~ 20 s: none can finish before the second signal's deadline
VERY_LONG_REQUESTS = tuple("400" if i == LONG_REQUESTS.index("--random-output-len") + 1 else a
                           for i, a in enumerate(LONG_REQUESTS))


@pytest.mark.parametrize(("sig", "processes"), [(signal.SIGINT, 1), (signal.SIGTERM, 2)],
                         ids=["SIGINT-1-process", "SIGTERM-2-processes"])
@pytest.mark.slow
def test_second_signal_while_draining_exits_now(bench, tmp_path: Path, sig: int, processes: int) -> None:
    """Old behaviour: a second Ctrl-C did not force an exit (bench waited the whole stop timeout)."""
    extra = ("--processes", str(processes)) if processes > 1 else ()
    run = bench(*VERY_LONG_REQUESTS, *extra, "--stop-timeout", "60", "--save-result", "--result-dir",
                str(tmp_path / "result"), "--result-filename", "run.json")
    url, sim_pid = run.sim()
    run.wait_stderr(r"Starting main benchmark run")
    wait_until(lambda: sim_requests(url) >= 6, 60, "6 requests in flight at the simulator")
    run.send(sig)
    run.wait_stderr(r"no new requests; those in flight get 60 s", timeout=PROMPT_S)
    second = time.monotonic()
    assert run.proc.poll() is None, f"bench exited after the first signal\n{run.describe()}"
    run.send(sig)
    rc = run.wait(timeout=PROMPT_S)
    assert time.monotonic() - second < PROMPT_S
    _assert_clean_exit(run, sig, rc)
    result, records = _result(tmp_path, run)
    _assert_accounted(result, records, 40, sig, run)
    assert result["cut_off"] >= 1 and result["completed"] == 0, run.describe()
    _assert_gone(run, [sim_pid])


# -- SIGKILL ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("processes", [1, 2], ids=["1-process", "2-processes"])
@pytest.mark.slow
def test_sigkill_takes_the_children_along(bench, processes: int) -> None:
    """Old behaviour: the simulator (and workers) were orphaned, still holding their ports."""
    extra = ("--processes", str(processes)) if processes > 1 else ()
    run = bench(*VERY_LONG_REQUESTS, *extra)
    url, sim_pid = run.sim()
    run.wait_stderr(r"Starting main benchmark run")
    wait_until(lambda: sim_requests(url) >= 4, 60, "requests at the simulator")
    children = children_of(run.pid)
    assert sim_pid in children, (children, run.describe())
    workers = [p for p in children if p != sim_pid]
    if processes > 1:
        m = _WORKERS.search(run.stderr())
        assert m is not None, run.describe()
        printed = [int(p) for p in m.group(2).split()]
        assert sorted(workers) == sorted(printed), (workers, printed)
        assert len(workers) == processes
    os.kill(run.pid, signal.SIGKILL)
    assert run.proc.wait(timeout=PROMPT_S) == -signal.SIGKILL
    _assert_gone(run, [sim_pid, *workers])


@pytest.mark.parametrize("processes", [1, 2], ids=["1-process", "2-processes"])
@pytest.mark.slow
def test_sigkill_leaves_every_record_received_in_the_journal(bench, tmp_path: Path, processes: int) -> None:
    """Old behaviour: the records lived only in memory until the end, and a killed run left none of them."""
    trace = tmp_path / "trace.jsonl"
    journal = tmp_path / "result" / "run.journal.jsonl"
    extra = ("--processes", str(processes)) if processes > 1 else ()
    run = bench("--sim-args", f"--ttft-ms 50 --itl-ms 20 --trace-file {trace}", "--dataset-name", "random",
                "--random-input-len", "32", "--random-output-len", "20", "--ignore-eos", "--num-prompts", "200",
                "--request-rate", "10", "--seed", "1", "--disable-tqdm", *extra, "--save-result", "--result-dir",
                str(tmp_path / "result"), "--result-filename", "run.json")
    run.wait_stderr(re.escape(f"Records are written to {journal} as they arrive"))
    wait_until(lambda: journal.exists() and journal.read_bytes().count(b"\n") >= 8, 90, "8 records in the journal")
    os.kill(run.pid, signal.SIGKILL)
    assert run.proc.wait(timeout=PROMPT_S) == -signal.SIGKILL
    assert not (tmp_path / "result" / "run.records.jsonl").exists(), run.describe()
    # every line is a whole record (a half-written one would not parse), each measured as the server sent it
    data = journal.read_bytes()
    assert data.endswith(b"\n"), data[-300:]
    records = [json.loads(line) for line in data.splitlines()]
    assert len(records) >= 8 and len({r["request_id"] for r in records}) == len(records)
    assert all(r["success"] and r["output_tokens"] == 20 and len(r["chunk_times"]) == 20 and r["generated_text"]
               for r in records), records[0]
    assert all(len(line["chunks"]) == 20 for _, line in match_trace(records, trace_lines(trace)))
    # and llmload report reads it as a run of its own
    from llmload.report.loader import load_run

    run = load_run(journal)
    assert [r.request_id for r in run.records] == [r["request_id"] for r in records] and run.duration > 0
