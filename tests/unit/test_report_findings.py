"""Protects the report's automatic findings and table arithmetic on hand-made records, numbers worked out."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llmload.client.records import RequestRecord
from llmload.report.findings import (
    client_saturated,
    compare_findings,
    failures,
    first_itl_stall,
    itl_vs_tpot,
    ttft_tail,
)
from llmload.report.loader import Run
from llmload.report.stats import RunStats
from llmload.report.tables import build_table, to_csv, to_markdown, to_terminal


def rec(start: float, ttft: float, gaps: list[float], **kw) -> RequestRecord:
    times = [start + ttft]
    for g in gaps:
        times.append(times[-1] + g)
    kw.setdefault("output_tokens", len(times))
    return RequestRecord(start=start, first_token=times[0], chunk_times=times, chunk_tokens=[1] * len(times),
                         success=True, prompt_len=10, **kw)


def stats(records, label="run", **summary) -> RunStats:
    run = Run(label=label, path=Path(f"{label}.json"), source="llmload", summary=summary, duration=10.0,
              records=records, has_timestamps=True)
    return RunStats(run)


def test_stall_fires_when_only_the_first_gap_is_long():
    # ITL₁ 300 ms, then 30 ms gaps: 10x pooled, 10x per request
    s = stats([rec(i * 0.1, 0.05, [0.3] + [0.03] * 20) for i in range(10)])
    f = first_itl_stall(s)
    assert f is not None
    assert "median ITL₁ 300.0 ms vs 30.0 ms for later ITLs (10.0x)" in f.detail


def test_slow_prefill_phase_is_not_a_stall():
    # each request's first 3 gaps are slow (150 ms: prefill of others), then 20 fast ones (30 ms):
    # median ITL₁ is 5x the pooled later median, but ITL₁ ≈ ITL₂, so no stall
    s = stats([rec(i * 0.1, 0.05, [0.15] * 3 + [0.03] * 20) for i in range(10)])
    assert s.itl1.mean() > 3 * 0.03
    assert first_itl_stall(s) is None


def test_length_weighting_explains_itl_below_tpot():
    # 5 short requests: 3 tokens, gaps 100 ms each -> TPOT 100 ms
    # 5 long requests: 41 tokens, gaps 10 ms -> TPOT 10 ms
    # mean TPOT = 55 ms; mean ITL = (5*2*100 + 5*40*10) / (5*2 + 5*40) = 3000/210 = 14.29 ms
    records = [rec(i, 0.05, [0.1] * 2) for i in range(5)] + [rec(i, 0.05, [0.01] * 40) for i in range(5)]
    s = stats(records)
    assert s.metrics.tpot.mean_ms == pytest.approx(55.0)
    assert s.metrics.itl.mean_ms == pytest.approx(3000 / 210)
    f = itl_vs_tpot(s)
    assert f is not None and "length weighting" in f.title
    assert "Token-weighted TPOT Σ(E2EL−TTFT)/Σ(out−1) = 14.29 ms" in f.detail
    assert "average TPOT 100.00 ms, longer ones 10.00 ms" in f.detail


def test_multi_token_chunks_make_itl_above_tpot():
    # 4 tokens per chunk after the first: 10 chunks, 37 tokens, gaps 40 ms -> TPOT 360/36 = 10 ms, ITL 40 ms
    s = stats([rec(i, 0.05, [0.04] * 9, output_tokens=37) for i in range(5)])
    f = itl_vs_tpot(s)
    assert f is not None and "chunks carry several tokens" in f.title
    assert "4.00 tokens" in f.detail


def test_ttft_tail_failures_and_client():
    records = [rec(i, 0.1, [0.01] * 5) for i in range(95)] + [rec(i, 2.0, [0.01] * 5) for i in range(5)]
    records.append(RequestRecord(start=1.0, success=False, error="HTTP 503: busy"))
    s = stats(records, client_health={"bottleneck": True, "reason": "client CPU averaged 97%",
                                      "cpu_percent_mean": 97.0, "loop_lag_p99_ms": 1.0})
    tail = ttft_tail(s)
    assert tail is not None and "p99 TTFT 2000.0 ms is 20.0x the median 100.0 ms" in tail.detail
    f = failures(s)
    assert f is not None and "1 of 101 requests failed (1.0%)" in f.detail and "1x HTTP 503: busy" in f.detail
    c = client_saturated(s)
    assert c is not None and "client CPU averaged 97%" in c.detail
    calm = stats([rec(i, 0.1, [0.01] * 5) for i in range(20)])
    assert ttft_tail(calm) is None and failures(calm) is None and client_saturated(calm) is None


def test_table_differences_and_tpot_gap_finding():
    base = stats([rec(i, 0.1, [0.03] * 20) for i in range(10)], label="a")
    other = stats([rec(i, 0.2, [0.33] + [0.03] * 19) for i in range(10)], label="b")
    table = build_table([base, other], baseline=0)
    row = table.row("median_ttft_ms")
    assert row.values == pytest.approx((100.0, 200.0))
    assert table.diff(row, 1) == pytest.approx(1.0)
    assert table.diff(row, 0) is None
    assert "200.00 (+100.0%)" in to_terminal(table)
    assert "| a (baseline) | b |" in to_markdown(table)
    assert "metric,key,unit,a,b,b vs a" in to_csv(table)
    # TPOT: a = 30 ms, b = (0.33 + 19*0.03)/20 = 45 ms (+50%); excl. ITL₁ both 30 ms (+0%)
    found = compare_findings([base, other], 0)
    assert len(found) == 1 and "mean TPOT +50%" in found[0].detail and "excl. 1st ITL +0%" in found[0].detail


@pytest.mark.parametrize("later", [[0.02, 0.04], [0.05, 0.01, 0.03], [0.03, 0.01, 0.02, 9.0], [0.0, 0.0, 0.0]])
def test_the_stall_ratio_is_itl1_over_the_median_of_the_next_three(later):
    """Per request: ITL₁ / median(ITL₂..ITL₄) (numpy's median of 2 or 3 values), NaN for a zero median."""
    s = stats([rec(0.0, 0.05, [0.3, *later])])
    expected = 0.3 / float(np.median(later[:3])) if np.median(later[:3]) > 0 else np.nan
    # (the gaps come back from cumulative chunk times: equal to the last bits)
    np.testing.assert_allclose(s.columns.itl1_vs_next, [expected], rtol=1e-12, equal_nan=True)
