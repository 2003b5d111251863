"""The server's metrics during a run and the saturation verdict, against the simulator: the stored series agree
with the engine's own state (``--engine-trace``) within one scrape interval and the summary numbers come from them;
an open loop at twice the engine's capacity is flagged as saturated (and ends early with ``--stop-on-saturation``),
one at half its capacity is not; a server without metrics, or one whose endpoint breaks, never fails the run."""

from __future__ import annotations

import json
from bisect import bisect_right

import pytest

from llmload.servermetrics.store import read_series, series_path_for

#: 4 sequences at once on the default profile with 32-token outputs: ~0.9 s a request, ~4.5 requests/s
CAPACITY_SIM = ("--max-num-seqs", "4")
CAPACITY_RPS = 4.5
WORKLOAD = ("--tokenizer", "builtin", "--dataset-name", "random", "--random-input-len", "64", "--random-output-len",
            "32", "--ignore-eos", "--disable-tqdm", "--save-result", "--no-initial-test")


def engine_states(path) -> tuple[list[float], list[dict]]:
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    lines.sort(key=lambda e: e["t"])
    return [e["t"] for e in lines], lines


@pytest.mark.slow
def test_stored_series_agree_with_the_engine_and_feed_the_summary(child_runner, start_sim, tmp_path):
    engine_trace = tmp_path / "engine.jsonl"
    sim = start_sim(*CAPACITY_SIM, "--engine-trace", engine_trace)
    interval = 0.5
    run = child_runner.bench("--base-url", sim.url, *WORKLOAD, "--num-prompts", "60", "--request-rate", "8",
                             "--server-metrics-interval", str(interval), timeout=180)
    assert run.returncode == 0, run.describe()
    result = run.result()
    snapshots = read_series(series_path_for(run.records_path()))
    assert len(snapshots) >= 10, run.describe()
    times, states = engine_states(engine_trace)
    matched = 0
    for snap in snapshots:
        if "running" not in snap.series:
            continue
        # the states the engine went through in the interval before the answer arrived
        lo, hi = bisect_right(times, snap.t - interval), bisect_right(times, snap.t)
        # before the engine's first step it is idle: nothing running, nothing waiting, no KV in use
        window = states[max(0, lo - 1):hi] or [{"running": 0, "waiting": 0, "kv_usage": 0.0}]
        assert any(s["running"] == snap.series["running"] and s["waiting"] == snap.series["waiting"]
                   for s in window), (snap.t, snap.series, window[-3:])
        assert any(abs(s["kv_usage"] - snap.series["kv_cache_usage"]) < 1e-6 for s in window)
        matched += 1
    assert matched >= 10
    server = result["server_metrics"]
    inside = [s for s in snapshots if "waiting" in s.series]
    assert server["peak_waiting"] == max(s.series["waiting"] for s in inside)
    assert server["peak_waiting"] > 0  # 8 req/s against ~4.5: a queue formed
    assert server["peak_running"] == 4  # --max-num-seqs
    assert server["generation_tokens"] == 60 * 32
    assert "Server metrics" in run.stdout and "Peak waiting requests" in run.stdout


@pytest.mark.slow
def test_twice_the_capacity_is_saturated(child_runner, start_sim):
    """Robust on a busy machine: a slower engine is only more saturated."""
    sim = start_sim(*CAPACITY_SIM)
    run = child_runner.bench("--base-url", sim.url, *WORKLOAD, "--num-prompts", "100", "--request-rate",
                             str(2 * CAPACITY_RPS), "--saturation-window", "3", timeout=240)
    assert run.returncode == 0, run.describe()
    twice = run.result()["saturation"]
    assert twice["saturated"] and twice["since_s"] < 10, twice
    assert "THE SERVER WAS SATURATED" in run.stdout


@pytest.mark.serial
@pytest.mark.slow
def test_half_the_capacity_is_not_saturated(child_runner, start_sim):
    """Alone: on a busy machine the simulated engine itself slows down, and half its quiet capacity may be
    all of its loaded one."""
    sim = start_sim(*CAPACITY_SIM)
    run = child_runner.bench("--base-url", sim.url, *WORKLOAD, "--num-prompts", "22", "--request-rate",
                             str(CAPACITY_RPS / 2), "--saturation-window", "3", timeout=240)
    assert run.returncode == 0, run.describe()
    half = run.result()["saturation"]
    assert not half["saturated"], half
    assert "SATURATED" not in run.stdout


@pytest.mark.slow
def test_stop_on_saturation_ends_the_run_early(child_runner, start_sim):
    sim = start_sim(*CAPACITY_SIM)
    prompts = 300  # ~33 s of arrivals at twice the capacity; saturation is seen within ~10 s
    run = child_runner.bench("--base-url", sim.url, *WORKLOAD, "--num-prompts", str(prompts), "--request-rate",
                             str(2 * CAPACITY_RPS), "--saturation-window", "3", "--stop-on-saturation",
                             "--stop-timeout", "2", timeout=240)
    assert run.returncode == 0, run.describe()
    result = run.result()
    assert result["saturation"]["saturated"] and result["saturation"]["stopped_run"]
    assert result["completed"] + result["failed"] + result.get("cut_off", 0) < prompts
    assert result["not_sent"] > 0
    assert "Stopped on saturation" in run.stdout and "--stop-on-saturation" in run.stderr


@pytest.mark.slow
def test_no_metrics_endpoint_or_a_broken_one_never_fails_the_run(child_runner, start_sim, tmp_path):
    sim = start_sim("--ttft-ms", "5", "--itl-ms", "1")
    named = child_runner.bench("--base-url", sim.url, *WORKLOAD, "--num-prompts", "5",
                               "--server-metrics-url", f"{sim.url}/nothing-here", timeout=120)
    assert named.returncode == 0, named.describe()
    assert "warning: --server-metrics-url" in named.stderr and "404" in named.stderr
    assert "server_metrics" not in named.result()
    off = child_runner.bench("--base-url", sim.url, *WORKLOAD, "--num-prompts", "5", "--no-server-metrics",
                             timeout=120)
    assert off.returncode == 0 and "server_metrics" not in off.result()
    assert not series_path_for(off.records_path()).exists()


@pytest.mark.slow
def test_locust_headless_scrapes_and_stops_on_saturation(child_runner, start_sim, tmp_path):
    sim = start_sim(*CAPACITY_SIM)
    records = tmp_path / "records.jsonl"
    run = child_runner.locust("-f", "locustfiles/sharegpt.py", "--headless", "--host", sim.url, "--tokenizer",
                              "builtin", "--dataset-name", "random", "--random-input-len", "64",
                              "--random-output-len", "32", "--ignore-eos", "--arrival", "open", "--request-rate",
                              str(2 * CAPACITY_RPS), "--num-prompts", "300", "--saturation-window", "3",
                              "--stop-on-saturation", "-t", "120s", "--stop-timeout", "2", "--llm-records",
                              str(records), timeout=180)
    assert run.returncode == 0, run.describe()
    assert "Scraping the server's metrics" in run.stderr
    assert "THE SERVER WAS SATURATED" in run.stderr and "Stopped on saturation" in run.stderr, run.describe()
    kept = [json.loads(line) for line in records.read_text().splitlines() if line.strip()]
    assert 0 < len(kept) < 300
    snapshots = read_series(series_path_for(records))
    assert snapshots and max(s.series.get("waiting", 0) for s in snapshots) > 0
