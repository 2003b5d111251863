"""Time slices on a server that slows down halfway: ``llmload sim --degrade-after`` makes every time ten times as
long two seconds into the run, and ``llmload bench --slice-duration 1`` shows it in the later slices' TTFT
(the overall median would not say when); ``llmload report`` draws the slices and saves their series."""

from __future__ import annotations

import csv
import json

import pytest
from support import llmload_command

pytestmark = pytest.mark.slow


def test_a_slowdown_shows_in_the_later_slices(child_runner, start_sim, tmp_path) -> None:
    sim = start_sim("--ttft-ms", "20", "--itl-ms", "2", "--degrade-after", "2", "--degrade-factor", "10")
    run = child_runner.bench("--base-url", sim.url, "--tokenizer", "builtin", "--num-prompts", "50",
                             "--request-rate", "10", "--seed", "4", "--sharegpt-output-len", "6", "--ignore-eos",
                             "--no-initial-test", "--slice-duration", "1", "--gpus", "2", "--gpu-hour-cost", "1.5",
                             "--save-result", "--disable-tqdm",
                             "--result-dir", str(tmp_path / "run"), timeout=180)
    assert run.returncode == 0, run.describe()
    result = run.result()
    slices = result["slices"]
    assert sum(s["requests"] for s in slices) == 50 and slices[-1]["end_s"] == pytest.approx(result["duration"])
    sent = [s for s in slices if s["requests"]]  # the run's tail, after the last send, has only answers
    first, last = sent[0]["ttft_ms"]["p50"], sent[-1]["ttft_ms"]["p50"]
    # 20 ms before the slowdown, 200 ms after it: 100 ms between them leaves room for a loaded machine
    assert first < 100.0 < last, [s["ttft_ms"].get("p50") for s in slices]
    report = child_runner.run([*llmload_command(), "report", str(run.result_path()), "--output",
                               str(tmp_path / "report")], timeout=180)
    assert report.returncode == 0, report.describe()
    assert (tmp_path / "report" / "slices.png").exists()
    # the report's table prices the run as its result JSON does (recomputed from the records)
    rows = {r[1]: r for r in csv.reader((tmp_path / "report" / "report.csv").read_text().splitlines())}
    assert float(rows["cost_per_million_output_tokens"][3]) == pytest.approx(result["cost_per_million_output_tokens"])
    assert float(rows["output_throughput_per_gpu"][3]) == pytest.approx(result["output_throughput_per_gpu"])
    series = json.loads((tmp_path / "report" / "slices.json").read_text())
    ((_label, drawn),) = series.items()
    assert [s["requests"] for s in drawn] == [s["requests"] for s in slices]
    assert [s["ttft_ms"].get("p50") for s in drawn] == pytest.approx([s["ttft_ms"].get("p50") for s in slices])
