"""Issue 37: ``llmload report`` and ``llmload compare`` read a long run's records from its file as they go, not
into memory. A real report (and compare) of a synthetic run of 5,000 and of 40,000 requests, each in a fresh
process that says its own peak RSS: the growth per request between the two must stay far below what holding the
records costs (~5 KB a request for report, ~10 KB for compare before issue 37; ~0.7 KB and ~1.3 KB after), with a
wide margin both ways. benchmarks/report_memory.py measures it up to a million requests."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

_BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "report_memory.py"
#: bytes a request the peak may grow by: below a third of what holding the records took
REPORT_BOUND = 2000
COMPARE_BOUND = 3500


def _bench_module():
    spec = importlib.util.spec_from_file_location("report_memory", _BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_report_and_compare_grow_by_a_few_numbers_a_request_not_a_record(tmp_path: Path) -> None:
    bench = _bench_module()
    peaks: dict[str, list[float]] = {"report": [], "compare": []}
    sizes = (5_000, 40_000)
    for n in sizes:
        run = bench.write_run(tmp_path / str(n), n)
        report = bench.measure(["report", str(run), "--output", str(tmp_path / f"report{n}")])
        compare = bench.measure(["compare", str(run), str(run), "--output", str(tmp_path / f"compare{n}")])
        assert report["exit_code"] == 0 and compare["exit_code"] == 0, (report, compare)
        assert (tmp_path / f"report{n}" / "report.html").exists()
        peaks["report"].append(report["peak_mib"])
        peaks["compare"].append(compare["peak_mib"])
    span = sizes[1] - sizes[0]
    growth = {kind: (p[1] - p[0]) * 2**20 / span for kind, p in peaks.items()}
    assert growth["report"] < REPORT_BOUND, (growth, peaks)
    assert growth["compare"] < COMPARE_BOUND, (growth, peaks)
