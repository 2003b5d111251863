"""Protects `llmload report` / `llmload compare` on runs that scraped the server (issue 12): the loader puts the
series file next to the records on the records' time axis, the report draws "Server and client over time", adds
the "Server metrics" table and the server findings, compare adds the server rows and overlays the queues, and a
run without a series file gets none of it."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from llmload.bench.results import write_json, write_records
from llmload.client.records import RequestRecord
from llmload.metrics import compute_metrics
from llmload.report.loader import load_run
from llmload.servermetrics import Snapshot, read_series, summarize, write_series

pytestmark = pytest.mark.slow
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "MPLBACKEND": "Agg"}
ENV.pop("LLMLOAD_DEBUG", None)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: perf_counter seconds of the first send (records and scrapes alike)
BASE = 5000.0
#: the scraping process's wall - perf_counter
CLOCK = 1.7e9
STANDARD = {"ttft", "tpot", "itl", "e2el", "timeline", "throughput", "lengths", "errors"}


def llmload(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmload.cli", *args], env=ENV, capture_output=True, text=True,
                          timeout=120)


def records(n: int = 20) -> list[RequestRecord]:
    """Request i sent at 2i s: first token 50 ms later, ITL₁ 300 ms, then 60 gaps of 30 ms."""
    out = []
    for i in range(n):
        times = [BASE + 2 * i + 0.05]
        for gap in [0.3] + [0.03] * 60:
            times.append(times[-1] + gap)
        out.append(RequestRecord(request_id=str(i), start=BASE + 2 * i, first_token=times[0], chunk_times=times,
                                 chunk_tokens=[1] * len(times), output_tokens=len(times), prompt_len=10,
                                 success=True))
    return out


def snapshots(n: int = 169) -> list[Snapshot]:
    """Scrapes every 0.25 s from 1 s before the first send: over (2j, 2j + 0.25] the queue drains into the batch
    (waiting 5 -> 4, running 2 -> 3), over the next interval it refills; KV usage climbs a quarter point a
    scrape from 40%; 2 preemptions over (13.75, 14]."""
    out = []
    for k in range(n):
        t = -1.0 + 0.25 * k
        admitted = k % 8 == 5
        series = {"running": 3.0 if admitted else 2.0, "waiting": 4.0 if admitted else 5.0,
                  "kv_cache_usage": 0.4 + 0.0025 * k, "preemptions_total": 0.0 if t < 14.0 else 2.0}
        out.append(Snapshot(t=BASE + t, wall=CLOCK + BASE + t, engine="vllm", series=series))
    return out


def save_run(directory: Path, name: str, *, series: bool, **extra) -> Path:
    recs = records()
    duration = max(r.chunk_times[-1] for r in recs) - BASE
    result = {"label": name, "backend": "openai-chat", **compute_metrics(recs, duration).to_result_dict(), **extra}
    if series:
        scraped = snapshots()
        write_series(directory / f"{name}.server_metrics.jsonl", scraped, CLOCK)
        result["server_metrics"] = summarize(scraped, BASE, BASE + duration)
        result["saturation"] = {"saturated": True, "since_s": 12.0, "signal": "waiting", "backlog_growth": 9.0,
                                "throughput_rps": 1.0, "stopped_run": False}
    path = directory / f"{name}.json"
    write_json(path, result)
    write_records(directory / f"{name}.records.jsonl", recs)
    return path


def check_png(path: Path) -> None:
    import matplotlib.image as mpimg

    assert path.read_bytes()[:8] == PNG_SIGNATURE, path
    img = mpimg.imread(path)
    assert img.shape[0] > 400 and img.shape[1] > 400, img.shape
    assert float(np.std(img)) > 0.01, f"{path} looks blank"


def test_the_loader_puts_the_series_on_the_records_clock(tmp_path: Path) -> None:
    run = load_run(save_run(tmp_path, "served", series=True))
    assert len(run.server) == 169 and run.server[0].t == BASE - 1.0 and not run.notes
    # a result JSON that names its records' clock moves the series by the difference to the file's own
    moved = load_run(save_run(tmp_path, "moved", series=True, clock=CLOCK - 2.0))
    assert moved.server[0].t == pytest.approx(BASE + 1.0)
    assert read_series(tmp_path / "moved.server_metrics.jsonl")[0].t == BASE - 1.0  # the file is as written
    # a series whose scrapes are nowhere near the records (another process's clock) is left out, with a note
    far = save_run(tmp_path, "far", series=False)
    write_series(tmp_path / "far.server_metrics.jsonl",
                 [Snapshot(t=s.t + 1e5, wall=s.wall, engine="vllm", series=s.series) for s in snapshots()], CLOCK)
    run = load_run(far)
    assert run.server == [] and "no scrape during the records' time span" in run.notes[0]
    (tmp_path / "far.server_metrics.jsonl").write_text("{not json\n")
    assert "server metrics not shown" in load_run(far).notes[0]
    assert load_run(save_run(tmp_path, "plain", series=False)).server == []


def test_report_shows_the_server_side(tmp_path: Path) -> None:
    out = tmp_path / "rep"
    proc = llmload("report", str(save_run(tmp_path, "served", series=True)), "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    assert {p.stem for p in out.glob("*.png")} == STANDARD | {"server"}
    check_png(out / "server.png")
    md = (out / "report.md").read_text()
    assert "## Server metrics" in md and "- served: engine vllm; scraped every 0.25 s" in md
    assert "| Running requests peak | 3.00 |" in md and "| KV-cache usage peak (%) | 81.00 |" in md
    assert "| Preemptions | 2 |" in md
    assert ("[served] the first-ITL stall is the server admitting a new batch: in 100% of the 20 requests whose "
            "ITL₁ exceeded 3x the median later ITL (30.0 ms)") in md
    assert "[served] the server was saturated: from 12.0 s on, the server's waiting queue grew by 9" in md
    assert "[served] the server preempted requests: peak KV-cache usage 81.0%" in md
    assert "first between 13.8 s and 14.0 s" in md
    assert "![Server and client over time](server.png)" in md
    html = (out / "report.html").read_text()
    assert "<h2>Server metrics</h2>" in html and 'id="server"' in html
    assert "Server metrics:" in proc.stdout and "admitting a new batch" in proc.stdout


def test_a_run_without_a_series_file_is_unchanged(tmp_path: Path) -> None:
    out = tmp_path / "rep"
    proc = llmload("report", str(save_run(tmp_path, "plain", series=False)), "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    assert {p.stem for p in out.glob("*.png")} == STANDARD
    md = (out / "report.md").read_text()
    assert "Server" not in md and "admitting" not in md and "saturated" not in md
    assert "Server metrics" not in proc.stdout
    with open(out / "report.csv", newline="") as f:
        assert not any(row["key"].startswith("server_") for row in csv.DictReader(f))


def test_compare_adds_server_rows_and_overlays_the_queues(tmp_path: Path) -> None:
    served = save_run(tmp_path, "served", series=True)
    plain = save_run(tmp_path, "plain", series=False)
    out = tmp_path / "cmp"
    proc = llmload("compare", str(served), str(plain), "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    assert {p.stem for p in out.glob("*.png")} == STANDARD | {"server_queue"}
    check_png(out / "server_queue.png")
    md = (out / "compare.md").read_text()
    headline = md.split("## Server metrics")[0]
    for row in ("| Running requests peak | 3.00 | - |", "| Waiting requests peak | 5.00 | - |",
                "| KV-cache usage peak (%) | 81.00 | - |", "| Preemptions | 2 | - |"):
        assert row in headline, row
    assert "[served] the server was saturated" in md and "[plain] the server" not in md
    with open(out / "compare.csv", newline="") as f:
        rows = {row["key"]: row for row in csv.DictReader(f)}
    assert float(rows["server_peak_waiting"]["served"]) == 5.0 and rows["server_peak_waiting"]["plain"] == ""
