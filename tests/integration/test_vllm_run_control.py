"""Today's ``vllm bench serve`` run control and the keys measured beside the requests, checked where they land:
warm-up copies of the first request and one-token probes reach the simulator (which records every request:
``--trace-requests``) and stay out of the records; the probe, client-queue and speculative-decoding keys and
sections; the ramp-up keys; ``--ready-check-timeout-sec`` retrying an absent server, then one line, exit 1."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from support import free_port, trace_lines

pytestmark = pytest.mark.slow

BASE = ("--tokenizer", "builtin", "--seed", "3", "--save-result", "--disable-tqdm", "--sharegpt-output-len", "8")


@pytest.fixture
def sim(start_sim, tmp_path: Path):
    trace = tmp_path / "trace.jsonl"
    return start_sim("--ttft-ms", "20", "--itl-ms", "5", "--trace-file", trace, "--trace-requests",
                     "--num-speculative-tokens", "2", "--spec-acceptance", "0.6"), trace


def test_warmups_probes_queue_and_spec_decode(child_runner, sim) -> None:
    sim, trace = sim
    run = child_runner.bench("--base-url", sim.url, *BASE, "--num-prompts", "6", "--request-rate", "30",
                             "--max-concurrency", "2", "--num-warmups", "3", "--probe-request-rate", "20",
                             "--percentile-metrics", "ttft,e2el,client_queue_time,e2el_including_client_queue",
                             timeout=120)
    assert run.returncode == 0, run.describe()
    result, records = run.result(), run.records()
    requests = [line["request"] for line in trace_lines(trace)]
    seen = [r["body"] for r in requests]
    first = next(r["body"]["prompt"] for r in requests
                 if r["headers"].get("x-request-id") == records[0]["request_id"])
    probes = [b for b in seen if b.get("prompt") == "Hi" and b.get("max_tokens") == 1]
    copies = [b for b in seen if b.get("prompt") == first]
    # the initial test and three warm-ups send the first request's prompt before the run itself does
    assert len(records) == 6 and len(copies) == 1 + 3 + 1, [b.get("prompt", "")[:30] for b in seen]
    assert len(seen) == 1 + 3 + 6 + len(probes)
    assert result["probe_completed"] + result["probe_failed"] == len(probes) >= 1
    assert 0 < result["probe_median_e2el_ms"] <= result["probe_p99_e2el_ms"] <= result["probe_max_e2el_ms"]
    # vLLM's client queue time: the wait for a --max-concurrency slot, over completed requests
    waits = sorted(r["start"] - r["intended_send"] for r in records)
    assert result["median_client_queue_time_ms"] == pytest.approx(1000 * (waits[2] + waits[3]) / 2, abs=1e-6)
    assert result["mean_e2el_including_client_queue_ms"] == pytest.approx(
        result["mean_e2el_ms"] + result["mean_client_queue_time_ms"], rel=1e-9)
    # the simulator's counter model: position i accepted with 0.6^(i+1), drafts from the tokens generated
    # the simulator's counters are whole numbers (floor(drafts * a^(i+1))): a rate over the run's drafts is exact
    # to within one accepted token in the difference of two scrapes, 2 / drafts (a short run has few drafts)
    slack = max(0.02, 2.0 / max(1, result["spec_decode_num_drafts"]))
    assert result["spec_decode_per_position_acceptance_rates"] == pytest.approx([0.6, 0.36], abs=slack)
    assert result["spec_decode_draft_tokens"] == 2 * result["spec_decode_num_drafts"] > 0
    out = run.stdout
    order = [out.index(s) for s in ("Total token throughput", "Probe Requests", "Time to First Token",
                                    "End-to-end Latency", "Client-side Queueing",
                                    "Queue-inclusive End-to-end Latency", "Speculative Decoding")]
    assert order == sorted(order), out[-4000:]
    assert "Warming up with 3 requests..." in run.stderr and "Warmup run completed." in run.stderr


def test_ramp_up_keys(child_runner, sim) -> None:
    sim, _ = sim
    run = child_runner.bench("--base-url", sim.url, *BASE, "--num-prompts", "12", "--ramp-up-strategy", "linear",
                             "--ramp-up-start-rps", "10", "--ramp-up-end-rps", "13", "--no-initial-test",
                             timeout=120)
    assert run.returncode == 0, run.describe()
    result = run.result()
    assert (result["ramp_up_strategy"], result["ramp_up_start_rps"], result["ramp_up_end_rps"]) == ("linear", 10, 13)
    events = result["rps_change_events"]
    assert [e["rps"] for e in events] == [10, 11, 12, 13]
    assert [e["timestamp"] for e in events] == sorted(e["timestamp"] for e in events)
    assert "probe_completed" not in result and "mean_client_queue_time_ms" not in result


def test_ready_check_retries_then_one_line(child_runner) -> None:
    began = time.monotonic()
    run = child_runner.bench("--base-url", f"http://127.0.0.1:{free_port()}", *BASE, "--num-prompts", "2",
                             "--model", "m", "--ready-check-timeout-sec", "3", timeout=120)
    assert run.returncode == 1, run.describe()
    assert time.monotonic() - began >= 3  # it kept trying for the whole timeout
    assert "Waiting for endpoint to become up in 3 seconds" in run.stderr and "Endpoint is not ready" in run.stderr
    errors = [line for line in run.stderr.splitlines() if ": error: " in line]
    assert len(errors) == 1 and "initial test request" in errors[0] and "Traceback" not in run.stderr
