"""Cancellation end to end: the client closes the connection of the drawn requests at the drawn moment, the
simulator sees each abort (its trace and its ``/metrics``), the cancelled requests are counted apart and stay
out of the latency statistics, and ``llmload bench`` and ``locust -f`` cancel the same requests for a seed.
"""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from support import trace_lines

pytestmark = pytest.mark.slow

PROMPTS = 40
OUTPUT_LEN = 50
#: fixed timing: 20 ms to the first token, 10 ms a token, so a whole answer takes ~0.5 s
SIM = ("--ttft-ms", "20", "--itl-ms", "10")
WORKLOAD = ("--tokenizer", "builtin", "--num-prompts", str(PROMPTS), "--seed", "5", "--sharegpt-output-len",
            str(OUTPUT_LEN), "--ignore-eos")
#: the server notices a closed connection at its next send (10 ms); a loaded machine delays either side
ABORT_BOUND_S = 0.5


def _running_and_aborts(url: str) -> tuple[float, float]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    running = aborts = 0.0
    for line in text.splitlines():
        if line.startswith("vllm:num_requests_running{"):
            running += float(line.rsplit(" ", 1)[1])
        elif line.startswith("vllm:request_success_total{") and 'finished_reason="abort"' in line:
            aborts += float(line.rsplit(" ", 1)[1])
    return running, aborts


def _closed(trace: Path) -> dict[str, dict]:
    return {t["client_id"]: t for t in trace_lines(trace) if t["status"] == "client_closed"}


def test_bench_cancels_after_seconds_and_the_server_sees_each_abort(child_runner, start_sim, tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    sim = start_sim(*SIM, "--trace-file", trace)
    run = child_runner.bench("--base-url", sim.url, *WORKLOAD, "--request-rate", "20", "--cancel-rate", "0.5",
                             "--cancel-after", "0.15", "--no-initial-test", "--save-result", "--disable-tqdm",
                             timeout=180)
    assert run.returncode == 0, run.describe()
    result, records = run.result(), run.records()
    cancelled = [r for r in records if r["cancelled"]]
    # counted apart: sent = completed + failed + cancelled + cut off; not a failure kind
    assert result["cancelled"] == len(cancelled) > 0 and result["completed"] == PROMPTS - len(cancelled), result
    assert result["sent"] == PROMPTS and result["failed"] == 0 and result["failures_by_kind"] == {}, result
    assert re.search(rf"^Cancelled by the client:\s+{len(cancelled)}\s*$", run.stdout, re.M), run.stdout[-2000:]
    # the server saw exactly these requests go, each soon after the client's cancel moment
    closed = _closed(trace)
    assert sorted(closed) == sorted(r["request_id"] for r in cancelled)
    for r in cancelled:
        seen = closed[r["request_id"]]["ended"] - (r["start"] + 0.15)
        assert -0.01 < seen < ABORT_BOUND_S, (r["request_id"], seen)
        assert 0 < len(r["chunk_times"]) < OUTPUT_LEN and not r["success"]
    # and let their slots go: nothing runs any more, one abort counted for each
    running, aborts = _running_and_aborts(sim.url)
    assert running == 0 and aborts == len(cancelled), (running, aborts)
    # no cancelled request in a latency statistic: the median TTFT is the completed requests' alone
    ttfts = [r["first_token"] - r["start"] for r in records if r["success"]]
    assert result["median_ttft_ms"] == pytest.approx(float(np.median(ttfts)) * 1000.0, rel=1e-9)


def test_locust_and_bench_cancel_the_same_requests_after_tokens(child_runner, start_sim, tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    sim = start_sim(*SIM, "--trace-file", trace)
    cancel = ("--cancel-rate", "0.4", "--cancel-after", "tokens:10")
    bench = child_runner.bench("--base-url", sim.url, *WORKLOAD, "--request-rate", "20", *cancel,
                               "--no-initial-test", "--save-result", "--disable-tqdm", timeout=180)
    assert bench.returncode == 0, bench.describe()
    records_path, result_path = tmp_path / "locust.jsonl", tmp_path / "locust.json"
    locust = child_runner.locust("-f", "locustfiles/sharegpt.py", "--headless", "--host", sim.url, "-t", "60s",
                                 *WORKLOAD, "--arrival", "open", "--request-rate", "20", *cancel, "--llm-records",
                                 str(records_path), "--llm-result", str(result_path), timeout=120)
    assert locust.returncode == 0, locust.describe()
    runs = {"bench": bench.records(),
            "locust": [json.loads(line) for line in records_path.read_text().splitlines() if line.strip()]}
    ids = {name: sorted(r["request_id"] for r in records if r["cancelled"]) for name, records in runs.items()}
    assert ids["bench"] == ids["locust"] and ids["bench"], ids
    assert json.loads(result_path.read_text())["cancelled"] == len(ids["locust"])
    for records in runs.values():
        for r in records:
            # the 10th stream event closes the connection (a read may bring the next one or two with it)
            assert (10 <= len(r["chunk_times"]) < 14) if r["cancelled"] else len(r["chunk_times"]) == OUTPUT_LEN
    # the server saw each of them go, in both runs
    closed = sorted(t["client_id"] for t in trace_lines(trace) if t["status"] == "client_closed")
    assert closed == sorted(ids["bench"] * 2), (closed, ids)


def test_the_initial_test_and_warm_ups_are_never_cancelled(child_runner, start_sim, tmp_path: Path) -> None:
    """--cancel-rate 1 cancels every request of the run, and none of the requests that check the server first: the
    initial test used to draw a cancellation too and fail the run ("initial test request ... failed: cancelled by
    the client"), exit 1."""
    trace = tmp_path / "trace.jsonl"
    sim = start_sim(*SIM, "--trace-file", trace)
    prompts = 8
    run = child_runner.bench("--base-url", sim.url, "--tokenizer", "builtin", "--num-prompts", str(prompts),
                             "--seed", "7", "--sharegpt-output-len", str(OUTPUT_LEN), "--ignore-eos",
                             "--request-rate", "20", "--cancel-rate", "1", "--cancel-after", "0.15",
                             "--num-warmups", "2", "--save-result", "--disable-tqdm", timeout=180)
    assert "initial test request" not in run.stderr, run.describe()
    # the exit-code contract: 0 needs a completed request; here every one of the run's was cancelled on purpose
    assert run.returncode == 1 and "no request completed" in run.stderr, run.describe()
    result, records = run.result(), run.records()
    assert result["cancelled"] == prompts and result["completed"] == 0 and result["failed"] == 0, result
    assert all(r["cancelled"] for r in records) and len(records) == prompts
    # the server saw exactly the run's requests closed by the client; the initial test and warm-ups ran to the end
    assert sorted(_closed(trace)) == sorted(r["request_id"] for r in records)
    served = [t for t in trace_lines(trace) if t["status"] == "ok"]
    assert len(served) == 3, served  # the initial test and the two warm-ups
