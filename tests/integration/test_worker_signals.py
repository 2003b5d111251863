"""A ``llmload bench --worker`` honours signals like the master does: Ctrl-C while it connects exits 130 with one
line; SIGTERM during a job (a pod being evicted) drains, ships its records and hands back what it had not sent,
which the master gives to the other workers — every request is still sent exactly once."""

from __future__ import annotations

import collections
import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
from support import end_process, free_port, llmload_command, offline_env, trace_lines


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


def test_worker_interrupted_while_connecting_exits_130(tmp_path: Path) -> None:
    port = free_port()  # nobody listens: the worker keeps trying to reach its master
    err = tmp_path / "worker.err"
    with open(err, "wb") as f:
        worker = subprocess.Popen([*llmload_command(), "bench", "--worker", "--master-port", str(port)],
                                  stdout=f, stderr=subprocess.STDOUT, env=offline_env(), start_new_session=True)
    try:
        _wait_for(lambda: b"connecting to the master" in err.read_bytes() or worker.poll() is not None, 60,
                  "the worker to start connecting")
        worker.send_signal(signal.SIGINT)
        rc = worker.wait(timeout=30)
    finally:
        end_process(worker)
    text = err.read_text()
    assert rc == 130, text
    assert "Traceback" not in text and "interrupted while connecting" in text, text


@pytest.mark.slow
def test_sigterm_to_a_worker_hands_its_unsent_requests_to_the_others(tmp_path: Path, start_sim) -> None:
    trace = tmp_path / "sim-trace.jsonl"
    sim = start_sim("--ttft-ms", "50", "--itl-ms", "20", "--trace-file", str(trace))
    port = free_port()
    result_dir = tmp_path / "results"
    env = offline_env()
    master_err = tmp_path / "master.err"
    procs: list[subprocess.Popen] = []
    try:
        with open(master_err, "wb") as f:
            master = subprocess.Popen(
                [*llmload_command(), "bench", "--master", "--expect-workers", "2", "--master-bind-host", "127.0.0.1",
                 "--master-bind-port", str(port), "--base-url", sim.url, "--tokenizer", "builtin",
                 "--num-prompts", "120", "--request-rate", "10", "--sharegpt-output-len", "30", "--save-result",
                 "--result-dir", str(result_dir), "--disable-tqdm"],
                stdout=subprocess.PIPE, stderr=f, env=env, start_new_session=True)
        procs.append(master)
        workers = []
        for k in range(2):
            with open(tmp_path / f"worker{k}.err", "wb") as f:
                workers.append(subprocess.Popen(
                    [*llmload_command(), "bench", "--worker", "--master-port", str(port)],
                    stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True))
        procs.extend(workers)
        # wait until requests flow, then evict one worker
        _wait_for(lambda: len(trace_lines(trace)) >= 15, 120, "15 finished requests in the sim's trace")
        workers[0].send_signal(signal.SIGTERM)
        assert workers[0].wait(timeout=60) == 143
        master.communicate(timeout=180)
    finally:
        for proc in procs:
            end_process(proc)
    log = master_err.read_text()
    assert master.returncode == 0, log
    assert "stopped on its own" in log, log
    data = json.loads(next(result_dir.glob("*[0-9].json")).read_text())
    assert data["completed"] == 120 and data["not_sent"] == 0 and data["lost_with_workers"] == 0, data
    # every request reached the server exactly once (the initial test request has its own id)
    counts = collections.Counter(line["client_id"] for line in trace_lines(trace))
    assert sum(counts.values()) == 121, sum(counts.values())
    assert max(counts.values()) == 1, [k for k, v in counts.items() if v > 1]
    assert "Traceback" not in (tmp_path / "worker0.err").read_text()
