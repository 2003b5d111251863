"""Issue 37: a run's scrapes go to disk as they come (SnapshotLog): read back as taken, the latest held whole,
summarised without their buckets, saved as the series file, and a long run's scrapes do not stay in memory."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from llmload.servermetrics.log import SnapshotLog
from llmload.servermetrics.snapshot import Snapshot
from llmload.servermetrics.store import read_series


def _scrape(k: int, raw: int = 20) -> Snapshot:
    return Snapshot(t=100.0 + k, wall=1.7e9 + k, engine="vllm",
                    series={"running": float(k % 7), "waiting": float(k % 3), "ttft_seconds_sum": k * 0.25},
                    histograms={"ttft_seconds": [(0.1, float(k)), (float("inf"), float(2 * k))]},
                    raw={f'vllm:thing{{n="{j}"}}': float(j + k) for j in range(raw)})


def test_scrapes_read_back_as_taken_and_save_as_the_series_file(tmp_path: Path) -> None:
    log = SnapshotLog(clock_offset=5.0)
    taken = [_scrape(k) for k in range(50)]
    for s in taken:
        log.append(s)
    assert len(log) == 50 and log[-1] is taken[-1]  # the latest is held
    assert list(log) == taken and log[10:13] == taken[10:13] and log == taken
    slim = log.slim()
    assert [s.series for s in slim] == [s.series for s in taken] and not any(s.histograms or s.raw for s in slim)
    path = tmp_path / "run.server_metrics.jsonl"
    log.save(path)
    assert read_series(path) == taken
    assert read_series(path, clock_offset=5.0) == taken  # written on its own clock
    assert [s.series for s in read_series(path, slim=True)] == [s.series for s in taken]


def test_a_long_run_of_scrapes_is_not_held() -> None:
    scrapes = 3000
    tracemalloc.start()
    try:
        log = SnapshotLog()
        for k in range(scrapes):
            log.append(_scrape(k, raw=200))
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # a scrape with 200 raw samples is ~30 KB as objects: 3,000 would be ~90 MB; the log keeps 24 bytes each
    assert held < 4 * 2**20, held
    assert log[1234].raw == _scrape(1234, raw=200).raw
