"""Stopped mid-run, open loop with a concurrency cap, in each way in: every request of the schedule is exactly
one of completed, failed, cut off (in flight or queued at the stop) or not sent — in the summary and in the
records. Nothing is lost and nothing counted twice."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from support import (
    end_process,
    is_run_request,
    llmload_command,
    offline_env,
    tail,
    trace_lines,
)

LOCUSTFILE = "locustfiles/sharegpt.py"
REPO = Path(__file__).resolve().parents[2]
#: 15 s of arrivals: whatever a busy machine's start-up takes of a run cut at 8 s, some are left unsent
PROMPTS = 150
#: 10 requests/s, each streaming 150 tokens 10 ms apart (1.5 s), at most 4 at once: a queue builds up
WORKLOAD = ("--num-prompts", str(PROMPTS), "--seed", "3", "--tokenizer", "builtin", "--sharegpt-output-len", "150",
            "--ignore-eos", "--request-rate", "10", "--max-concurrency", "4")


def summary_count(text: str, label: str) -> int:
    m = re.search(rf"^{re.escape(label)}:?\s+(\d+)", text, re.M)
    assert m, f"no {label!r} line in the summary:\n{text[-3000:]}"
    return int(m.group(1))


def wait_for_finished(trace: Path, n: int, proc: subprocess.Popen, err: Path, timeout: float = 120.0) -> None:
    """Wait (on the simulator's trace, not a sleep) until ``n`` requests of the run were answered."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sum(1 for t in trace_lines(trace) if is_run_request(t["client_id"]) and t["status"] == "ok") >= n:
            return
        assert proc.poll() is None, f"the run ended before it was stopped\n{tail(err)}"
        time.sleep(0.1)
    pytest.fail(f"{n} requests were not answered within {timeout} s\n{tail(err)}")


def check(text: str, records: list[dict], sent_to_server: set[str]) -> None:
    completed = summary_count(text, "Successful requests")
    failed = summary_count(text, "Failed requests")
    cut = summary_count(text, "Cut off by end of run")
    not_sent_match = re.search(r"^Not sent \(run stopped early\):\s+(\d+)", text, re.M)
    not_sent = int(not_sent_match.group(1)) if not_sent_match else 0
    assert completed > 0 and cut > 0 and not_sent > 0, (completed, cut, not_sent)
    assert completed + failed + cut + not_sent == PROMPTS, (completed, failed, cut, not_sent)
    ids = [r["request_id"] for r in records]
    assert len(ids) == len(set(ids)) == completed + failed + cut, (len(ids), completed, failed, cut)
    assert sum(r["success"] for r in records) == completed
    assert sum(r["cut_off"] for r in records) == cut
    # a queued request that was cut off never reached the server; every one that did is in the records
    assert sent_to_server <= set(ids), sorted(sent_to_server - set(ids))[:5]


@pytest.mark.parametrize("processes", [0, 2])
@pytest.mark.slow
def test_bench_stopped_by_sigint(start_sim, tmp_path: Path, processes: int) -> None:
    trace = tmp_path / "trace.jsonl"
    sim = start_sim("--ttft-ms", "20", "--itl-ms", "10", "--trace-file", str(trace))
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    argv = [*llmload_command(), "bench", "--base-url", sim.url, *WORKLOAD, "--save-result", "--disable-tqdm",
            "--result-dir", str(tmp_path / "res"), "--result-filename", "run.json"]
    if processes:
        argv += ["--processes", str(processes)]
    with out.open("w") as o, err.open("w") as e:
        proc = subprocess.Popen(argv, stdout=o, stderr=e, env=offline_env(), start_new_session=True)
        try:
            wait_for_finished(trace, 6, proc, err)
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=120) == 130, tail(err)
        finally:
            end_process(proc)
    result = json.loads((tmp_path / "res" / "run.json").read_text())
    records = [json.loads(line) for line in (tmp_path / "res" / "run.records.jsonl").read_text().splitlines()]
    sent = {t["client_id"] for t in trace_lines(trace) if is_run_request(t["client_id"])}
    check(out.read_text(), records, sent)
    assert result["completed"] + result["failed"] + result["cut_off"] + result["not_sent"] == PROMPTS, result


@pytest.mark.parametrize("processes", [0, 2])
@pytest.mark.slow
def test_locust_stopped_by_run_time(child_runner, start_sim, tmp_path: Path, processes: int) -> None:
    trace = tmp_path / "trace.jsonl"
    sim = start_sim("--ttft-ms", "20", "--itl-ms", "10", "--trace-file", str(trace))
    records_path = tmp_path / "records.jsonl"
    extra = ("--processes", str(processes)) if processes else ()
    run = child_runner.locust("-f", LOCUSTFILE, "--headless", "--host", sim.url, "-t", "8s", "--arrival", "open",
                              *WORKLOAD, *extra, "--llm-records", str(records_path), timeout=180)
    assert run.returncode == 0, run.describe()
    records = [json.loads(line) for line in records_path.read_text().splitlines() if line.strip()]
    sent = {t["client_id"] for t in trace_lines(trace) if is_run_request(t["client_id"])}
    check(run.stderr, records, sent)
    assert summary_count(run.stderr, "Requests in the schedule") == PROMPTS
