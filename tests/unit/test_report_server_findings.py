"""Protects the report's findings that read the server's metrics (first-ITL stall = batch admission, saturation,
KV-cache pressure and preemptions) and the series arithmetic under them, on hand-made records and scrapes whose
numbers are worked out: each finding fires where the data says so and stays silent where it does not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llmload.client.records import RequestRecord
from llmload.report.loader import Run
from llmload.report.server_figures import binned_median
from llmload.report.server_findings import kv_pressure, server_findings, server_saturated, stall_is_admission
from llmload.report.server_tables import server_table, with_server_rows
from llmload.report.stats import RunStats
from llmload.report.tables import build_table
from llmload.servermetrics import Snapshot

#: the records' perf_counter origin: every time below is BASE + seconds since the first send
BASE = 1000.0


def rec(start: float, ttft: float, gaps: list[float]) -> RequestRecord:
    times = [BASE + start + ttft]
    for g in gaps:
        times.append(times[-1] + g)
    return RequestRecord(start=BASE + start, first_token=times[0], chunk_times=times, chunk_tokens=[1] * len(times),
                         output_tokens=len(times), success=True, prompt_len=10)


def stalled(n: int = 20, first: float = 0.3) -> list[RequestRecord]:
    """Request i sent at 2i s, first token 50 ms later, ITL₁ ``first``, then 60 gaps of 30 ms: the stall window
    is [2i + 0.05, 2i + 0.05 + first]; the control window starts at chunk 31 (2i + 1.25 for 0.3)."""
    return [rec(2.0 * i, 0.05, [first] + [0.03] * 60) for i in range(n)]


def scrapes(times, **columns) -> list[Snapshot]:
    """Snapshots at BASE + ``times``; each column a list of values (None: the scrape lacks the series)."""
    out = []
    for k, t in enumerate(times):
        series = {name: float(v[k]) for name, v in columns.items() if v[k] is not None}
        out.append(Snapshot(t=BASE + t, wall=1.7e9 + t, engine="vllm", series=series))
    return out


def admitting(end: float, phase: float) -> list[Snapshot]:
    """Scrapes every 0.25 s from -1 s to ``end``; over the interval (2j + phase - 0.25, 2j + phase] of every
    2 s the queue drains into the batch (waiting 5 -> 4, running 2 -> 3), over the next one it refills."""
    times = [-1.0 + 0.25 * k for k in range(int((end + 1.0) / 0.25) + 1)]
    admitted = [round(t - phase, 6) % 2.0 == 0.0 for t in times]
    return scrapes(times, running=[3 if a else 2 for a in admitted], waiting=[4 if a else 5 for a in admitted])


def stats(records, server=(), label="run", duration=20.0, **summary) -> RunStats:
    run = Run(label=label, path=Path(f"{label}.json"), source="llmload", summary=summary, duration=duration,
              records=records, has_timestamps=True, server=list(server))
    return RunStats(run)


# -- the series on the report's axis -------------------------------------------------------------------------

def queue(running: list[float], waiting: list[float], **more) -> RunStats:
    """A run whose scrapes, every 0.5 s from the first send, hold these gauges."""
    times = [0.5 * k for k in range(len(running))]
    return stats(stalled(3), scrapes(times, running=running, waiting=waiting, **more))


def test_series_times_are_seconds_since_the_first_send():
    s = queue([2, 3, 2, 3, 2, 3], [5, 4, 5, 4, 5, 4])
    assert s.server is not None
    assert s.server.t.tolist() == [0.0, 0.5, 1.0, 1.5, 2.0, 2.5]
    assert s.server.interval_s == 0.5
    assert s.server.admissions().tolist() == [False, True, False, True, False, True]
    assert not s.server.has("kv")


def test_what_counts_as_queued_requests_entering_the_batch():
    # a full batch (13 seats) replaces finished requests with queued ones: running holds, waiting drains
    assert queue([13, 13, 13], [51, 38, 25]).server.admissions().tolist() == [False, True, True]
    # arrivals only (waiting and running both rise), a batch shrinking with the queue unchanged, requests
    # leaving the batch while the queue drains and nothing is known of finished requests: no
    assert not queue([0, 13, 10, 8], [0, 51, 51, 50]).server.admissions()[1:].any()
    # ... unless the finished counter shows more finished than the batch shrank by: 12 finished, 11 left the queue
    s = queue([12, 11], [13, 2], requests_finished_total=[40, 52])
    assert s.server.admissions().tolist() == [False, True]
    assert not queue([12, 11], [13, 2], requests_finished_total=[40, 40]).server.admissions()[1]


def test_overlapping_windows_and_coverage():
    s = queue([2, 3, 2, 3, 2, 3], [5, 4, 5, 4, 5, 4]).server
    flags = s.admissions()  # admissions over (0, 0.5], (1, 1.5], (2, 2.5]
    covered, hit = s.overlapping(flags, np.array([0.1, 0.6, 0.9, -0.1, 2.4]), np.array([0.4, 0.9, 1.2, 0.2, 2.6]))
    assert covered.tolist() == [True, True, True, False, False]
    assert hit.tolist() == [True, False, True, False, False]


def test_binned_median():
    edges = np.arange(0.0, 4.0, 1.0)
    out = binned_median(np.array([0.1, 0.5, 0.9, 2.2, 5.0, -1.0]), np.array([1.0, 3.0, 2.0, 7.0, 9.0, 9.0]), edges)
    assert out[0] == 2.0 and np.isnan(out[1]) and out[2] == 7.0


def test_a_run_without_series_has_no_server_parts():
    s = stats(stalled(), saturation={"saturated": False, "since_s": None})
    assert s.server is None and s.server_summary is None
    assert server_findings(s) == []
    assert server_table([s]) is None


# -- the first-ITL stall and the batch admission ---------------------------------------------------------------

def test_stall_coinciding_with_admissions_fires():
    # every stall window [2i+0.05, 2i+0.35] (from one scrape interval before: 2i-0.2) meets (2i, 2i+0.25], an
    # admission interval; every control window [2i+1.0, 2i+1.55] lies in (2i+1, 2i+1.75], none
    s = stats(stalled(), admitting(41.0, 0.25))
    f = stall_is_admission(s)
    assert f is not None
    assert ("in 100% of the 20 requests whose ITL₁ exceeded 3x the median later ITL (30.0 ms), the server's "
            "waiting queue dropped by ≥1 and running rose or held in the same or the preceding scrape "
            "interval") in f.detail
    assert "scrapes every 0.25 s; 21 such intervals in 168" in f.detail
    assert "in an equally long window later in the same requests, 0%" in f.detail


def test_stall_between_admissions_does_not_fire():
    # the same stalls, admissions over (2j+1, 2j+1.25] instead: no stall window meets one (the control ones do)
    assert stall_is_admission(stats(stalled(), admitting(41.0, 1.25))) is None


def test_admissions_everywhere_say_nothing():
    # waiting drops and running rises in every interval: the stalls coincide (100%), but so do the
    # control windows (100%), so the coincidence is no evidence
    times = [-1.0 + 0.25 * k for k in range(169)]
    s = stats(stalled(), scrapes(times, running=list(range(169)), waiting=list(range(200, 31, -1))))
    assert s.server.admissions()[1:].all()
    assert stall_is_admission(s) is None


def test_no_stall_no_finding():
    s = stats([rec(2.0 * i, 0.05, [0.03] * 61) for i in range(20)], admitting(41.0, 0.25))
    assert stall_is_admission(s) is None


def test_too_few_stalls_inside_the_scraped_span():
    # scrapes up to 6.5 s cover the stalls of requests 0..3 only, up to 8.5 s those of 0..4
    assert stall_is_admission(stats(stalled(), admitting(6.5, 0.25))) is None
    f = stall_is_admission(stats(stalled(), admitting(8.5, 0.25)))
    assert f is not None and "of the 5 requests" in f.detail


def test_a_server_without_queue_gauges():
    times = [-1.0 + 0.25 * k for k in range(169)]
    assert stall_is_admission(stats(stalled(), scrapes(times, kv_cache_usage=[0.5] * 169))) is None


# -- saturation -------------------------------------------------------------------------------------------------

def saturating_records() -> list[RequestRecord]:
    """20 requests, one a second: TTFT 100 ms before 10 s, 2 s from then on."""
    return [rec(float(i), 0.1 if i < 10 else 2.0, [0.02] * 5) for i in range(20)]


def verdict(saturated: bool, **kw) -> dict:
    return {"saturated": saturated, "since_s": 10.0 if saturated else None, "signal": "waiting",
            "backlog_growth": 12.0, "throughput_rps": 4.5, "stopped_run": False, **kw}


def test_saturation_fires_with_its_numbers():
    waiting = [0] * 21 + [2 * k for k in range(21)]  # scrapes every 0.5 s; from 10.5 s on the queue grows to 40
    server = scrapes([0.5 * k for k in range(42)], running=[4] * 42, waiting=waiting)
    f = server_saturated(stats(saturating_records(), server, saturation=verdict(True)))
    assert f is not None and f.title == "the server was saturated"
    assert ("from 10.0 s on, the server's waiting queue grew by 12 requests over the test's windows while "
            "completions stayed at 4.50 req/s") in f.detail
    assert "waiting queue rose from 0 at the onset to 40" in f.detail
    assert "median TTFT 2000.0 ms for the 10 requests sent after it vs 100.0 ms before (20.0x)" in f.detail
    assert "lower the request rate" in f.detail


def test_saturation_that_stopped_the_run_says_so():
    f = server_saturated(stats(saturating_records(), saturation=verdict(True, stopped_run=True, signal="in_flight")))
    assert f is not None
    assert "the requests in flight at the client grew" in f.detail
    assert "stopped there (--stop-on-saturation)" in f.detail


def test_no_saturation_no_finding():
    assert server_saturated(stats(saturating_records(), saturation=verdict(False))) is None
    assert server_saturated(stats(saturating_records())) is None
    assert server_saturated(stats(saturating_records(), saturation="yes")) is None


# -- KV cache and preemptions -----------------------------------------------------------------------------------

def kv_run(kv: list[float], preemptions: list[float], slow_from: int | None = None) -> RunStats:
    """Scrapes every second for 20 s; requests i = 0..19 with 10 gaps of 20 ms, or 200 ms for i >= slow_from."""
    n = len(kv)
    records = [rec(float(i), 0.05, [0.2 if slow_from is not None and i >= slow_from else 0.02] * 10)
               for i in range(20)]
    return stats(records, scrapes([float(k) for k in range(n)], running=[4] * n, waiting=[0] * n,
                                  kv_cache_usage=kv, preemptions_total=preemptions))


def test_preemptions_fire_with_when_and_the_itls_they_cost():
    # the counter rises from 0 to 3 over (15, 16]: the gaps of request 15 (sent at 15 s, 200 ms each) end in it
    kv = [0.5 + 0.025 * k for k in range(21)]  # 50% .. 100%: above 90% from 17 s (92.5%)
    pre = [0] * 16 + [3] * 5
    f = kv_pressure(kv_run(kv, pre, slow_from=15))
    assert f is not None and f.title == "the server preempted requests"
    assert "peak KV-cache usage 100.0% (mean 75.0%)" in f.detail
    assert "above 90% in 4 scrapes from 17.0 s to 20.0 s" in f.detail
    assert "the server preempted 3 requests, first between 15.0 s and 16.0 s" in f.detail
    assert "ITLs ending in those scrape intervals: median 200.0 ms vs 20.0 ms elsewhere" in f.detail


def test_a_nearly_full_kv_cache_fires_without_preemptions():
    f = kv_pressure(kv_run([0.5] * 10 + [0.95] * 11, [0] * 21))
    assert f is not None and f.title == "the KV cache ran nearly full"
    assert "peak KV-cache usage 95.0%" in f.detail and "above 90% in 11 scrapes from 10.0 s to 20.0 s" in f.detail
    assert "No preemptions yet" in f.detail


def test_kv_below_the_threshold_and_no_preemptions_is_silent():
    assert kv_pressure(kv_run([0.5] * 10 + [0.9] * 11, [7] * 21)) is None  # 90% is not above 90%; 7 all along


def test_preemptions_from_the_result_json_alone():
    # no series file, but bench's summary says 2 preemptions
    f = kv_pressure(stats(stalled(), server_metrics={"scrapes": 20, "preemptions": 2, "peak_kv_cache_usage": 0.4}))
    assert f is not None and "peak KV-cache usage 40.0%; the server preempted 2 requests." in f.detail
    assert kv_pressure(stats(stalled(), server_metrics={"scrapes": 20, "preemptions": 0})) is None


# -- the table --------------------------------------------------------------------------------------------------

def test_server_table_and_compare_rows():
    a = stats(stalled(), label="a", server_metrics={"scrapes": 20, "peak_running": 8.0, "preemptions": 0,
                                                    "peak_kv_cache_usage": 0.5, "engine": "vllm"})
    b = stats(stalled(), label="b", server_metrics={"scrapes": 20, "peak_running": 12.0, "preemptions": 4,
                                                    "peak_kv_cache_usage": 0.75, "prefix_cache_hit_rate": 0.25})
    table = server_table([a, b])
    assert table is not None
    assert table.row("server_peak_running").values == (8.0, 12.0)
    assert table.diff(table.row("server_peak_running"), 1) == pytest.approx(0.5)
    assert table.row("server_peak_kv_cache_usage").values == (50.0, 75.0)  # shown in %
    assert table.row("server_prefix_cache_hit_rate").values == (None, 25.0)
    with pytest.raises(KeyError):
        table.row("server_mean_waiting")  # no run has it
    headline = with_server_rows(build_table([a, b]), [a, b])
    keys = [row.key for row in headline.rows]
    assert keys[-4:] == ["server_peak_running", "server_peak_kv_cache_usage", "server_preemptions",
                         "server_prefix_cache_hit_rate"]
    assert with_server_rows(build_table([a]), [stats(stalled())]).rows == build_table([a]).rows


def test_summary_from_the_series_when_the_json_has_none():
    s = kv_run([0.5] * 10 + [0.7] * 11, [0] * 16 + [3] * 5)
    summary = s.server_summary
    assert summary is not None and summary["scrapes"] == 21
    assert summary["peak_kv_cache_usage"] == pytest.approx(0.7)
    assert summary["preemptions"] == 3.0
