"""Protects `llmload report` / `llmload compare` on real bench runs and vLLM-format results: the files they
write, the numbers in their tables, the first-ITL stall finding, and one-line errors on bad input."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llmload.bench.results import read_records
from llmload.report.findings import first_itl_stall
from llmload.report.loader import load_run
from llmload.report.stats import RunStats

pytestmark = pytest.mark.slow

#: a result written the way vLLM's benchmark_serving.py --save-result --save-detailed writes it (tests/data/README.md)
VLLM_FIXTURE = Path(__file__).resolve().parents[1] / "data" / "vllm_benchmark_serving_result.json"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "MPLBACKEND": "Agg"}
ENV.pop("LLMLOAD_DEBUG", None)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Long prompts (2000 tokens, two per prefill step) make a slow prefill phase, so without the stall ITL₁ is
# still several times the median later ITL: the finding must tell that apart from a real stall.
WORKLOAD = ["--dataset-name", "random", "--random-input-len", "2000", "--random-output-len", "32",
            "--num-prompts", "64", "--seed", "1"]
RUNS = {
    "stall": [*WORKLOAD, "--sim-args", "--profile tiny --first-decode-stall"],
    "nostall": [*WORKLOAD, "--sim-args", "--profile tiny"],
    "faulty": ["--num-prompts", "40", "--seed", "1", "--sim-args", "--profile tiny --error-rate 0.2 --seed 3"],
}


def llmload(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmload.cli", *args], env=ENV, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Three real `llmload bench` runs against the simulator (each starts and stops its own sim on 127.0.0.1)."""
    out = tmp_path_factory.mktemp("runs")

    def bench(name: str) -> Path:
        proc = llmload("bench", *RUNS[name], "--save-result", "--save-detailed", "--result-dir", str(out),
                       "--result-filename", f"{name}.json", "--label", name, "--disable-tqdm")
        assert proc.returncode == 0, proc.stderr[-2000:]
        return out / f"{name}.json"

    with ThreadPoolExecutor(3) as pool:
        paths = dict(zip(RUNS, pool.map(bench, RUNS), strict=True))
    # the no-stall run as vLLM would have written it: only the keys of a real vLLM --save-detailed result (our
    # statistics for the percentiles we ran with), no records file
    ours = json.loads(paths["nostall"].read_text())
    stat = re.compile(r"(mean|median|std|p\d+)_(ttft|tpot|itl|e2el)_ms")
    vllm_keys = [k for k in json.loads(VLLM_FIXTURE.read_text()) if not stat.fullmatch(k)]
    vllm = {k: ours[k] for k in vllm_keys}
    vllm.update({k: v for k, v in ours.items() if stat.fullmatch(k)})
    vdir = out / "vllm"
    vdir.mkdir()
    paths["vllm"] = vdir / "vllm-infqps-llmload-sim-20250101-000000.json"
    paths["vllm"].write_text(json.dumps(vllm))
    return paths


def check_png(path: Path) -> None:
    import matplotlib.image as mpimg

    assert path.read_bytes()[:8] == PNG_SIGNATURE, path
    assert path.stat().st_size > 5_000, path
    img = mpimg.imread(path)
    assert img.shape[0] > 200 and img.shape[1] > 400, (path, img.shape)
    assert float(np.std(img)) > 0.01, f"{path} looks blank"


def check_html(path: Path, expect_images: int) -> str:
    text = path.read_text(encoding="utf-8")
    assert "http://" not in text and "https://" not in text
    refs = re.findall(r'(?:src|href)\s*=\s*"([^"]*)"', text)
    assert refs and all(r.startswith("data:image/png;base64,") for r in refs), refs[:3]
    assert len(refs) == expect_images
    assert "<script" not in text.lower() and "@import" not in text and "url(" not in text
    return text


def read_csv(path: Path) -> dict[str, dict[str, str]]:
    with open(path, newline="") as f:
        return {row["key"]: row for row in csv.DictReader(f)}


def recomputed(records, duration: float) -> dict[str, float]:
    """The table's numbers, from the raw records file, with numpy only."""
    ok = [r for r in records if r.success and not r.cut_off]
    ttft = np.array([r.first_token - r.start for r in ok]) * 1000
    e2el = np.array([r.chunk_times[-1] - r.start for r in ok]) * 1000
    itl = np.concatenate([np.diff(r.chunk_times) for r in ok]) * 1000
    tpot = np.array([(r.chunk_times[-1] - r.first_token) / (r.output_tokens - 1) for r in ok
                     if r.output_tokens > 1]) * 1000
    steady = np.array([(r.chunk_times[-1] - r.chunk_times[1]) / (r.output_tokens - 2) for r in ok
                       if r.output_tokens > 2 and len(r.chunk_times) > 1]) * 1000
    return {
        "duration": duration,
        "completed": len(ok),
        "request_throughput": len(ok) / duration,
        "output_throughput": sum(r.output_tokens for r in ok) / duration,
        "mean_ttft_ms": ttft.mean(), "median_ttft_ms": np.median(ttft), "p99_ttft_ms": np.percentile(ttft, 99),
        "std_ttft_ms": ttft.std(),
        "mean_tpot_ms": tpot.mean(), "median_tpot_ms": np.median(tpot), "p99_tpot_ms": np.percentile(tpot, 99),
        "mean_tpot_steady_ms": steady.mean(), "median_tpot_steady_ms": np.median(steady),
        "mean_itl_ms": itl.mean(), "median_itl_ms": np.median(itl), "p99_itl_ms": np.percentile(itl, 99),
        "mean_e2el_ms": e2el.mean(), "median_e2el_ms": np.median(e2el), "p99_e2el_ms": np.percentile(e2el, 99),
        "failed": sum(1 for r in records if not r.success and not r.cut_off),
    }


def test_report_on_a_bench_run(runs, tmp_path):
    records = read_records(runs["stall"].with_name("stall.records.jsonl"))
    # goodput limits from the run itself (its p90 TTFT, its median TPOT), so some requests meet them and some do
    # not whatever a loaded machine did to the timing: fixed limits were met by none in a loaded CI run
    ttft_limit = float(np.percentile([r.first_token - r.start for r in records], 90))
    tpot_limit = float(np.median([(r.chunk_times[-1] - r.first_token) / (r.output_tokens - 1) for r in records]))
    out = tmp_path / "rep"
    proc = llmload("report", str(runs["stall"]), "--output", str(out),
                   "--goodput", f"ttft:{ttft_limit * 1000:.6f}", f"tpot:{tpot_limit * 1000:.6f}")
    assert proc.returncode == 0, proc.stderr
    assert "TPOT excl. 1st ITL mean (ms)" in proc.stdout
    # the report says what the finding says (that the finding fires on this run, on a quiet machine:
    # test_stall_finding_fires_only_with_the_stall; a loaded one can blur a 2 ms engine's stall)
    stall_found = first_itl_stall(RunStats(load_run(runs["stall"]))) is not None
    assert ("first-ITL stall" in proc.stdout) is stall_found
    pngs = sorted(out.glob("*.png"))
    # bench scraped the simulator's /metrics: "Server and client over time" too; and its DCGM page: the GPU figure
    assert {p.stem for p in pngs} == {"ttft", "tpot", "itl", "e2el", "timeline", "throughput", "lengths",
                                      "errors", "server", "gpu"}
    for p in pngs:
        check_png(p)
    html = check_html(out / "report.html", expect_images=len(pngs))
    assert "SIMULATED" in html and ("first-ITL stall" in html) is stall_found
    assert "| Metric |" in (out / "report.md").read_text()

    rows = read_csv(out / "report.csv")
    summary = json.loads(runs["stall"].read_text())
    expected = recomputed(read_records(runs["stall"].with_name("stall.records.jsonl")), summary["duration"])
    for key, value in expected.items():
        assert float(rows[key]["stall"]) == pytest.approx(value, rel=1e-9, abs=1e-9), key
    ttft_limit, tpot_limit = round(ttft_limit * 1000, 6) / 1000, round(tpot_limit * 1000, 6) / 1000
    good = [r for r in records if r.success and not r.cut_off and r.first_token - r.start <= ttft_limit
            and (r.chunk_times[-1] - r.first_token) / (r.output_tokens - 1) <= tpot_limit]
    assert 0 < len(good) < len(records)
    assert float(rows["request_goodput"]["stall"]) == pytest.approx(len(good) / summary["duration"])
    # and they agree with what bench itself wrote
    for key in ("mean_ttft_ms", "p99_itl_ms", "mean_tpot_steady_ms", "request_throughput"):
        assert float(rows[key]["stall"]) == pytest.approx(summary[key], rel=1e-9)


@pytest.mark.serial
def test_stall_finding_fires_only_with_the_stall(runs):
    from llmload.report.findings import run_findings

    stall, nostall = RunStats(load_run(runs["stall"])), RunStats(load_run(runs["nostall"]))
    # the simulator's stall is real: ITL₁ is many times the later ITLs in the stall run
    assert np.median(stall.itl1) > 5 * np.median(stall.itl_later)
    finding = first_itl_stall(stall)
    assert finding is not None and "median ITL₁" in finding.detail
    assert first_itl_stall(nostall) is None
    assert "first_itl_stall" not in {f.kind for f in run_findings(nostall)}
    # the vLLM-format copy of the no-stall run agrees
    assert first_itl_stall(RunStats(load_run(runs["vllm"]))) is None


def test_failures_finding_and_errors_figure(runs, tmp_path):
    proc = llmload("report", str(runs["faulty"]), "--output", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    records = read_records(runs["faulty"].with_name("faulty.records.jsonl"))
    failed = sum(1 for r in records if not r.success and not r.cut_off)
    assert failed > 0
    assert f"{failed} of {len(records)} requests failed" in proc.stdout
    assert float(read_csv(tmp_path / "report.csv")["failed"]["faulty"]) == failed
    check_png(tmp_path / "errors.png")


def test_report_on_a_vllm_result(runs, tmp_path):
    proc = llmload("report", str(runs["vllm"]), "--output", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "skipped" in proc.stdout
    pngs = sorted(tmp_path.glob("*.png"))
    assert {p.stem for p in pngs} == {"ttft", "tpot", "itl", "e2el", "lengths"}
    for p in pngs:
        check_png(p)
    check_html(tmp_path / "report.html", expect_images=len(pngs))
    data = json.loads(runs["vllm"].read_text())
    rows = read_csv(tmp_path / "report.csv")
    label = runs["vllm"].stem
    ok = [i for i, e in enumerate(data["errors"]) if not e]
    ttfts = np.array([data["ttfts"][i] for i in ok]) * 1000
    tpot = np.array([sum(data["itls"][i]) / (data["output_lens"][i] - 1) for i in ok
                     if data["output_lens"][i] > 1]) * 1000
    steady = np.array([sum(data["itls"][i][1:]) / (data["output_lens"][i] - 2) for i in ok
                       if data["output_lens"][i] > 2]) * 1000
    itl = np.concatenate([data["itls"][i] for i in ok]) * 1000
    assert float(rows["median_ttft_ms"][label]) == pytest.approx(np.median(ttfts), rel=1e-9)
    assert float(rows["p99_ttft_ms"][label]) == pytest.approx(np.percentile(ttfts, 99), rel=1e-9)
    assert float(rows["mean_tpot_ms"][label]) == pytest.approx(tpot.mean(), rel=1e-6)
    assert float(rows["mean_tpot_steady_ms"][label]) == pytest.approx(steady.mean(), rel=1e-6)
    assert float(rows["p99_itl_ms"][label]) == pytest.approx(np.percentile(itl, 99), rel=1e-9)
    # vLLM's own summary numbers agree with ours
    assert float(rows["mean_ttft_ms"][label]) == pytest.approx(data["mean_ttft_ms"], rel=1e-9)
    assert float(rows["mean_tpot_ms"][label]) == pytest.approx(data["mean_tpot_ms"], rel=1e-6)


def test_compare_with_baseline(runs, tmp_path):
    paths = [str(runs[k]) for k in ("stall", "nostall", "vllm")]
    proc = llmload("compare", *paths, "--output", str(tmp_path), "--labels", "stall,nostall,old-vllm",
                   "--baseline", "nostall")
    assert proc.returncode == 0, proc.stderr
    assert "nostall (baseline)" in proc.stdout
    # each run's finding as the finding says (that it fires on the stall run alone, on a quiet machine:
    # test_stall_finding_fires_only_with_the_stall)
    for label in ("stall", "nostall"):
        found = first_itl_stall(RunStats(load_run(runs[label]))) is not None
        assert (f"[{label}] first-ITL stall" in proc.stdout) is found, label
    assert "stall vs nostall: the TPOT gap is the first ITL" in proc.stdout or "TPOT excl. 1st ITL" in proc.stdout
    pngs = sorted(tmp_path.glob("*.png"))
    # figures over time show the two runs with timestamps; the server's queues overlaid; the GPUs' power
    assert len(pngs) == 10
    for p in pngs:
        check_png(p)
    html = check_html(tmp_path / "compare.html", expect_images=10)
    assert "old-vllm" in html and "(baseline)" in html
    md = (tmp_path / "compare.md").read_text()
    assert "| Metric | stall | nostall (baseline) | old-vllm |" in md

    rows = read_csv(tmp_path / "compare.csv")
    for key in ("duration", "request_throughput", "output_throughput", "mean_ttft_ms", "median_ttft_ms",
                "p99_ttft_ms", "std_ttft_ms", "mean_tpot_ms", "mean_tpot_steady_ms", "mean_itl_ms",
                "mean_e2el_ms", "failed"):
        row = rows[key]
        base = float(row["nostall"])
        for label in ("stall", "old-vllm"):
            if base:
                assert float(row[f"{label} vs nostall"]) == pytest.approx((float(row[label]) - base) / base)
    # each column is that run's own numbers
    stall_summary = json.loads(runs["stall"].read_text())
    expected = recomputed(read_records(runs["stall"].with_name("stall.records.jsonl")), stall_summary["duration"])
    for key, value in expected.items():
        assert float(rows[key]["stall"]) == pytest.approx(value, rel=1e-9, abs=1e-9), key
    # the vLLM copy of the no-stall run gives the same latency numbers as the original
    for key in ("mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_itl_ms", "mean_e2el_ms"):
        assert float(rows[key]["old-vllm"]) == pytest.approx(float(rows[key]["nostall"]), rel=1e-6), key


def _one_line_error(proc: Any, command: str, *words: str) -> None:  # a CompletedProcess or a CliRun
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.strip().splitlines() if not line.startswith("usage:")]
    assert len(lines) == 1 and lines[0].startswith(f"llmload {command}: error: "), proc.stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_bad_input_gives_one_line_errors(runs, tmp_path, cli):
    missing = tmp_path / "nope.json"
    _one_line_error(cli("report", str(missing), "-o", str(tmp_path / "o")), "report", "nope.json",
                    "no such file")
    neither = tmp_path / "neither.json"
    neither.write_text('{"hello": 1, "items": [1, 2]}')
    _one_line_error(cli("report", str(neither), "-o", str(tmp_path / "o")), "report", "neither")
    not_json = tmp_path / "broken.json"
    not_json.write_text("{not json")
    _one_line_error(cli("report", str(not_json), "-o", str(tmp_path / "o")), "report", "not valid JSON")
    a_list = tmp_path / "list.json"
    a_list.write_text("[1, 2, 3]")
    _one_line_error(cli("report", str(a_list), "-o", str(tmp_path / "o")), "report", "JSON object")

    data = json.loads(runs["vllm"].read_text())
    n = len(data["ttfts"])
    data.update(ttfts=[0.0] * n, itls=[[] for _ in range(n)], output_lens=[0] * n, errors=["HTTP 500"] * n)
    dead = tmp_path / "dead.json"
    dead.write_text(json.dumps(data))
    _one_line_error(cli("compare", str(runs["nostall"]), str(dead), "-o", str(tmp_path / "o")), "compare",
                    "no successful requests")

    orphan = tmp_path / "orphan.json"  # our JSON without its records file or detailed lists
    summary = {k: v for k, v in json.loads(runs["stall"].read_text()).items()
               if k not in ("ttfts", "itls", "input_lens", "output_lens", "generated_texts", "errors")}
    orphan.write_text(json.dumps(summary))
    _one_line_error(cli("report", str(orphan), "-o", str(tmp_path / "o")), "report", "records")

    proc = cli("compare", str(runs["stall"]), str(runs["nostall"]), "--baseline", "zzz", "-o",
                   str(tmp_path / "o"))
    _one_line_error(proc, "compare", "--baseline")
    assert proc.returncode == 2


# -- a result file vLLM wrote ---------------------------------------------------------------------------------

def _vllm_numbers(data: dict) -> dict[str, np.ndarray]:
    """TTFT, ITL, TPOT, E2EL (ms) of the successful requests, from vLLM's per-request lists alone."""
    ok = [i for i, e in enumerate(data["errors"]) if not e]
    return {
        "ttft": np.array([data["ttfts"][i] for i in ok]) * 1000,
        "itl": np.concatenate([data["itls"][i] for i in ok]) * 1000,
        "tpot": np.array([sum(data["itls"][i]) / (data["output_lens"][i] - 1) for i in ok
                          if data["output_lens"][i] > 1]) * 1000,
        "e2el": np.array([data["ttfts"][i] + sum(data["itls"][i]) for i in ok]) * 1000,
    }


def test_report_reads_a_real_vllm_result(tmp_path):
    data = json.loads(VLLM_FIXTURE.read_text())
    assert data["request_rate"] == "inf"  # vLLM's way of writing an infinite rate
    copy = tmp_path / VLLM_FIXTURE.name  # read from anywhere: nothing is written next to the input
    copy.write_bytes(VLLM_FIXTURE.read_bytes())
    out = tmp_path / "rep"
    proc = llmload("report", str(copy), "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "vLLM-format result" in proc.stdout and "1 of 12 requests failed" in proc.stdout, proc.stdout
    pngs = sorted(out.glob("*.png"))
    assert {p.stem for p in pngs} == {"ttft", "tpot", "itl", "e2el", "lengths"}
    for p in pngs:
        check_png(p)
    check_html(out / "report.html", expect_images=len(pngs))
    rows = read_csv(out / "report.csv")
    label = copy.stem
    want = _vllm_numbers(data)
    assert float(rows["completed"][label]) == data["completed"] == 11
    assert float(rows["failed"][label]) == 1
    assert float(rows["duration"][label]) == pytest.approx(data["duration"], rel=1e-9)
    assert float(rows["request_throughput"][label]) == pytest.approx(data["request_throughput"], rel=1e-9)
    assert float(rows["output_throughput"][label]) == pytest.approx(data["output_throughput"], rel=1e-9)
    for name in ("ttft", "itl", "tpot", "e2el"):
        assert float(rows[f"mean_{name}_ms"][label]) == pytest.approx(want[name].mean(), rel=1e-9), name
        assert float(rows[f"median_{name}_ms"][label]) == pytest.approx(np.median(want[name]), rel=1e-9), name
        assert float(rows[f"p99_{name}_ms"][label]) == pytest.approx(np.percentile(want[name], 99), rel=1e-9), name
    # vLLM's own statistics: TTFT and ITL are exactly its lists; its E2EL and TPOT also hold the end of the
    # stream after the last token, which the lists do not carry (well under 1 %)
    for key in ("mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "std_ttft_ms", "mean_itl_ms", "median_itl_ms",
                "p99_itl_ms"):
        assert float(rows[key][label]) == pytest.approx(data[key], rel=1e-9), key
    for key in ("mean_tpot_ms", "median_tpot_ms", "mean_e2el_ms", "median_e2el_ms"):
        assert float(rows[key][label]) == pytest.approx(data[key], rel=0.01), key


def test_compare_reads_a_real_vllm_result(runs, tmp_path):
    proc = llmload("compare", str(runs["nostall"]), str(VLLM_FIXTURE), "--output", str(tmp_path), "--labels",
                   "ours,vllm", "--baseline", "vllm")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "vllm (baseline)" in proc.stdout
    md = (tmp_path / "compare.md").read_text()
    assert "| Metric | ours | vllm (baseline) |" in md
    rows = read_csv(tmp_path / "compare.csv")
    want = _vllm_numbers(json.loads(VLLM_FIXTURE.read_text()))
    assert float(rows["median_ttft_ms"]["vllm"]) == pytest.approx(np.median(want["ttft"]), rel=1e-9)
    assert float(rows["p99_itl_ms"]["vllm"]) == pytest.approx(np.percentile(want["itl"], 99), rel=1e-9)
    ours = float(rows["mean_ttft_ms"]["ours"])
    base = float(rows["mean_ttft_ms"]["vllm"])
    assert float(rows["mean_ttft_ms"]["ours vs vllm"]) == pytest.approx((ours - base) / base)
    # the figures over time need timestamps (and the server's queues and the GPU figure their series): only our run
    # has them
    assert len(sorted(tmp_path.glob("*.png"))) == 10
