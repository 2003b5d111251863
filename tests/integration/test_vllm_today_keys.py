"""Today's ``vllm bench serve`` result file, key for key: a fixture written from its source's key list and
types (tests/data/README.md) holds nothing our result from the same options lacks or types differently, and
``llmload report`` and ``llmload compare`` read it as they read 0.7's, its ``start_times`` putting the figures
over time back in."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from support import json_type, llmload_command, offline_env

pytestmark = pytest.mark.slow

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "vllm_bench_serve_result.json"
METRICS = "ttft,tpot,itl,e2el,client_queue_time,e2el_including_client_queue"


def theirs() -> dict:
    return json.loads(FIXTURE.read_text())


def llmload(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*llmload_command(), *map(str, args)], capture_output=True, text=True, timeout=180,
                          env=offline_env())


@pytest.fixture(scope="module")
def ours(child_runner_module, start_sim_module):
    """A run with the fixture's options: 8 prompts at 8 req/s, 4 at a time, probes, a speculating server."""
    sim = start_sim_module("--profile", "tiny", "--tokenizer", "builtin", "--num-speculative-tokens", "2")
    data = theirs()
    run = child_runner_module.bench(
        "--base-url", sim.url, "--backend", data["backend"], "--tokenizer", "builtin",
        "--num-prompts", data["num_prompts"], "--request-rate", data["request_rate"],
        "--max-concurrency", data["max_concurrency"], "--probe-request-rate", "20", "--percentile-metrics", METRICS,
        "--metric-percentiles", "90,99", "--save-result", "--save-detailed", "--disable-tqdm")
    assert run.returncode == 0, run.describe()
    return run


def test_every_key_of_today_s_vllm_with_its_type(ours) -> None:
    data, result = theirs(), ours.result()
    missing = [k for k in data if k not in result]
    assert not missing, f"today's vLLM keys missing from our result: {missing}"
    wrong = {k: (json_type(result[k]), json_type(v)) for k, v in data.items()
             if json_type(result[k]) != json_type(v) and not (v is None or result[k] is None)}
    assert not wrong, f"keys with another JSON type than vLLM's (ours, vLLM's): {wrong}"
    assert result["label"] is None and result["request_goodput"] is None
    assert len(result["start_times"]) == len(result["queue_times"]) == len(result["latencies"]) == 8


def test_report_reads_today_s_vllm_result(tmp_path: Path) -> None:
    data = theirs()
    out = tmp_path / "rep"
    proc = llmload("report", FIXTURE, "--output", out)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    stems = {p.stem for p in out.glob("*.png")}
    assert {"ttft", "tpot", "itl", "e2el", "lengths", "timeline", "throughput", "errors"} <= stems, stems
    rows = {line.split(",")[1]: line.split(",")[-1] for line in (out / "report.csv").read_text().splitlines()[1:]}
    assert float(rows["completed"]) == data["completed"] == 7
    ok = [i for i, e in enumerate(data["errors"]) if not e]
    ttfts = np.array([data["ttfts"][i] for i in ok]) * 1000
    assert float(rows["p99_ttft_ms"]) == pytest.approx(np.percentile(ttfts, 99), rel=1e-9)
    assert float(rows["p99_ttft_ms"]) == pytest.approx(data["p99_ttft_ms"], rel=1e-9)
    assert float(rows["mean_e2el_ms"]) == pytest.approx(data["mean_e2el_ms"], rel=1e-9)


def test_compare_reads_today_s_vllm_result(ours, tmp_path: Path) -> None:
    proc = llmload("compare", ours.result_path(), FIXTURE, "--output", tmp_path, "--labels", "ours,vllm",
                   "--baseline", "vllm")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    md = (tmp_path / "compare.md").read_text()
    assert "| Metric | ours | vllm (baseline) |" in md
