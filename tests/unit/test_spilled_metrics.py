"""Statistics from columns on disk equal those from memory: a run whose value columns spilled (issue 37) reports
numpy's percentiles, medians and maxima bit for bit, and the same peaks, counts and goodput.

The spill threshold is lowered to a few hundred values so that a few thousand real records spill."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llmload.client.records import RequestRecord
from llmload.metrics import compute_metrics, spill
from llmload.metrics.peaks import (
    PeakColumns,
    overlap_of_columns,
    peak_overlap,
    peak_per_second,
    peaks_of_columns,
)
from llmload.metrics.spill import Chunked


def _records(n: int, seed: int = 3) -> list[RequestRecord]:
    rng = np.random.default_rng(seed)
    out = []
    t = 1000.0
    for k in range(n):
        t += float(rng.exponential(0.01))
        tokens = int(rng.integers(1, 30))
        gaps = np.round(rng.lognormal(-5, 0.5, tokens), 4)  # rounded: ties among the ITLs
        times = (t + 0.05 + np.cumsum(gaps)).tolist()
        ok = rng.random() > 0.05
        out.append(RequestRecord(
            request_id=f"r{k}", backend="vllm", prompt_len=int(rng.integers(5, 50)), expected_output_len=tokens,
            intended_send=t - 0.001, dispatched_at=t - 0.0005, start=t, first_token=times[0] if ok else None,
            chunk_times=times if ok else [], chunk_tokens=[1] * tokens if ok else [], output_tokens=tokens if ok else 0,
            success=ok, error="" if ok else "boom", failure_kind="" if ok else "http_5xx",
            status_code=200 if ok else 500, user_class="a" if k % 3 else "b"))
    return out


def _result(records: list[RequestRecord]) -> dict:
    m = compute_metrics(records, 60.0, goodput_slos={"ttft": 80.0, "e2el": 200.0},
                        selected_percentiles=(1.0, 25.0, 50.0, 90.0, 99.0, 99.9, 100.0),
                        selected_metrics=("ttft", "tpot", "itl", "e2el"))
    return m.to_result_dict()


def test_a_spilled_run_reports_what_an_in_memory_one_does(monkeypatch: pytest.MonkeyPatch) -> None:
    records = _records(3000)
    in_memory = _result(records)
    monkeypatch.setattr(spill, "SPILL_AFTER", 300)
    spilled = _result(records)
    assert "by_class" in in_memory
    _same(spilled, in_memory, "")


def _same(got: object, want: object, where: str) -> None:
    """Equal, but means and standard deviations to 1e-12 (correctly rounded sums against numpy's pairwise)."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), where
        for key, value in want.items():
            _same(got[key], value, f"{where}.{key}")
    elif where.rsplit(".", 1)[-1].startswith(("mean_", "std_")):
        assert math.isclose(got, want, rel_tol=1e-12, abs_tol=1e-12), where  # type: ignore[arg-type]
    else:
        assert got == want, where  # percentiles, medians, maxima, counts, peaks: exactly


def test_column_peaks_equal_the_per_record_ones() -> None:
    records = [r for r in _records(2000, seed=5) if r.success]
    part = PeakColumns()
    for r in records:
        part.add(r)
    tokens, buckets, overlap = peaks_of_columns([part])
    assert (tokens, buckets) == peak_per_second(records)
    assert overlap == peak_overlap(records)
    # a run too large to sort at once goes in windows of time: the same peak
    starts, ends = Chunked([part.starts]), Chunked([part.ends])
    lo, hi = min(r.start for r in records), max(part.ends.array())
    for gather in (10, 100, 1000):
        assert overlap_of_columns(starts, ends, lo, hi, max_gather=gather) == overlap


def test_equal_times_end_before_start_in_every_window() -> None:
    part = PeakColumns()
    for k in range(200):  # back to back: each ends exactly when the next starts
        times = [float(k + 1)]
        part.add(RequestRecord(start=float(k), first_token=times[0], chunk_times=times, chunk_tokens=[1],
                               output_tokens=1, success=True))
    assert overlap_of_columns(Chunked([part.starts]), Chunked([part.ends]), 0.0, 200.0, max_gather=8) == 1
