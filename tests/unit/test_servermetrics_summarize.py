"""Server metrics over a run's window: counter increases (a restart included), gauge means and peaks, the
prefix-cache hit rate, histogram means, absent series, the printed block; and the series file's round trip."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from llmload.common.errors import DatasetError
from llmload.servermetrics import (
    Snapshot,
    build_snapshot,
    format_block,
    parse_exposition,
    read_series,
    series_path_for,
    summarize,
    write_series,
)
from llmload.servermetrics.store import FILE_RAW_LIMIT
from llmload.servermetrics.summarize import increase
from llmload.summary import WIDTH

DATA = Path(__file__).resolve().parents[1] / "data" / "prometheus"


def _snap(t: float, **series: float) -> Snapshot:
    return Snapshot(t=t, wall=1.7e9 + t, engine="vllm", series=dict(series))


def test_increase_is_reset_safe():
    assert increase([]) == 0.0 and increase([5.0]) == 0.0
    assert increase([10.0, 15.0, 30.0]) == 20.0
    # restart after 30: the counter starts again from 0 and reaches 4, then 9
    assert increase([10.0, 30.0, 4.0, 9.0]) == 20.0 + 4.0 + 5.0


def test_counters_over_the_window_with_a_reset():
    snaps = [
        _snap(0.0, prompt_tokens_total=1000.0, generation_tokens_total=50.0, preemptions_total=1.0),
        _snap(10.0, prompt_tokens_total=1600.0, generation_tokens_total=250.0, preemptions_total=1.0),
        _snap(20.0, prompt_tokens_total=200.0, generation_tokens_total=100.0, preemptions_total=0.0),  # restart
        _snap(30.0, prompt_tokens_total=500.0, generation_tokens_total=300.0, preemptions_total=2.0),
    ]
    out = summarize(snaps, start=0.0, end=30.0)
    assert out["prompt_tokens"] == 600.0 + 200.0 + 300.0
    assert out["generation_tokens"] == 200.0 + 100.0 + 200.0
    assert out["preemptions"] == 2.0
    assert out["prompt_tokens_per_s"] == pytest.approx(1100.0 / 30.0)
    assert out["generation_tokens_per_s"] == pytest.approx(500.0 / 30.0)
    assert out["scrapes"] == 4 and out["window_s"] == 30.0 and out["engine"] == "vllm"


def test_counter_span_runs_from_the_scrape_before_start_to_the_one_after_end():
    snaps = [_snap(t, prompt_tokens_total=v) for t, v in [(0.0, 0.0), (4.0, 100.0), (9.0, 300.0), (11.0, 310.0),
                                                           (16.0, 500.0), (20.0, 900.0)]]
    out = summarize(snaps, start=5.0, end=15.0)
    # from the scrape at 4 s (last at or before start) to the one at 16 s (first at or after end)
    assert out["prompt_tokens"] == 400.0
    assert out["scrapes"] == 2  # 9 s and 11 s are inside the window
    assert out["prompt_tokens_per_s"] == pytest.approx(40.0)


def test_gauges_mean_and_peak_inside_the_window_only():
    snaps = [
        _snap(0.0, running=100.0, waiting=50.0, kv_cache_usage=0.99),  # before the run: left out
        _snap(1.0, running=4.0, waiting=0.0, kv_cache_usage=0.2, kv_cache_usage_max=0.3),
        _snap(2.0, running=8.0, waiting=6.0, kv_cache_usage=0.6, kv_cache_usage_max=0.9),
        _snap(3.0, running=6.0, waiting=3.0, kv_cache_usage=0.4, kv_cache_usage_max=0.5),
        _snap(9.0, running=0.0, waiting=0.0, kv_cache_usage=0.0),  # after it
    ]
    out = summarize(snaps, start=1.0, end=3.0)
    assert out["mean_running"] == 6.0 and out["peak_running"] == 8.0
    assert out["mean_waiting"] == 3.0 and out["peak_waiting"] == 6.0
    assert out["mean_kv_cache_usage"] == pytest.approx(0.4)
    assert out["peak_kv_cache_usage"] == 0.9  # the fullest engine's peak


def test_missing_series_leave_their_keys_out():
    out = summarize([_snap(1.0, running=2.0), _snap(2.0, running=3.0)], start=0.0, end=3.0)
    assert set(out) == {"scrapes", "window_s", "engine", "mean_running", "peak_running"}
    # one scrape: no increase can be measured
    one = summarize([_snap(1.0, prompt_tokens_total=5.0)], start=0.0, end=3.0)
    assert "prompt_tokens" not in one and "prompt_tokens_per_s" not in one
    nothing = summarize([], start=0.0, end=3.0)
    assert nothing == {"scrapes": 0, "window_s": 3.0}


def test_hit_rate_from_token_counters():
    snaps = [
        _snap(0.0, prefix_cache_hits_total=100.0, prefix_cache_queries_total=1000.0, prefix_cache_hit_rate=0.9),
        _snap(5.0, prefix_cache_hits_total=400.0, prefix_cache_queries_total=2000.0, prefix_cache_hit_rate=0.9),
        _snap(10.0, prefix_cache_hits_total=700.0, prefix_cache_queries_total=3000.0, prefix_cache_hit_rate=0.9),
    ]
    out = summarize(snaps, start=0.0, end=10.0)
    assert out["prefix_cache_hit_rate"] == pytest.approx(0.3)  # 600 hits / 2000 queries during the run
    assert out["prefix_cache_hit_rate_source"] == "tokens"


def test_hit_rate_from_the_engine_gauge_when_there_are_no_counters():
    snaps = [_snap(t, prefix_cache_hit_rate=r) for t, r in [(1.0, 0.2), (2.0, 0.4), (3.0, 0.6)]]
    out = summarize(snaps, start=0.0, end=4.0)
    assert out["prefix_cache_hit_rate"] == pytest.approx(0.4)
    assert out["prefix_cache_hit_rate_source"] == "engine"
    # no queries during the run: the counters say nothing, the gauge is used
    idle = [_snap(t, prefix_cache_hits_total=5.0, prefix_cache_queries_total=9.0, prefix_cache_hit_rate=0.5)
            for t in (1.0, 2.0)]
    assert summarize(idle, 0.0, 3.0)["prefix_cache_hit_rate_source"] == "engine"


def test_histogram_means_from_sum_and_count_increases():
    snaps = [
        _snap(0.0, ttft_seconds_sum=10.0, ttft_seconds_count=100.0, queue_time_seconds_sum=1.0,
              queue_time_seconds_count=100.0),
        _snap(10.0, ttft_seconds_sum=13.0, ttft_seconds_count=120.0, queue_time_seconds_sum=1.0,
              queue_time_seconds_count=100.0),
    ]
    out = summarize(snaps, start=0.0, end=10.0)
    assert out["mean_ttft_ms"] == pytest.approx(150.0)  # 3 s over 20 requests
    assert "mean_queue_time_ms" not in out  # no request finished queueing during the run


def test_failures_and_first_error_only_when_a_scrape_failed():
    out = summarize([], 0.0, 1.0, failures={"timeout": 2, "http_404": 0}, first_error="http://h/metrics: timed out")
    assert out["failures"] == {"timeout": 2}
    assert out["first_error"] == "http://h/metrics: timed out"
    assert "failures" not in summarize([], 0.0, 1.0, failures={"timeout": 0}, first_error="x")


def test_summary_of_real_pages():
    text = (DATA / "vllm.txt").read_text()
    first = build_snapshot(parse_exposition(text), t=0.0, wall=1.7e9)
    later_text = text.replace("vllm:generation_tokens_total{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 25600.0",
                              "vllm:generation_tokens_total{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 35600.0")
    assert later_text != text
    second = build_snapshot(parse_exposition(later_text), t=10.0, wall=1.7e9 + 10)
    out = summarize([first, second], 0.0, 10.0)
    assert out["generation_tokens"] == 10000.0 and out["generation_tokens_per_s"] == 1000.0
    assert out["prompt_tokens"] == 0.0 and out["preemptions"] == 0.0
    assert out["peak_running"] == 12.0 and out["peak_kv_cache_usage"] == pytest.approx(0.4213)
    assert "mean_ttft_ms" not in out  # no request finished in between


def test_format_block_layout():
    summary = {
        "scrapes": 61, "window_s": 60.0, "engine": "vllm", "mean_running": 12.3456, "peak_running": 16.0,
        "mean_kv_cache_usage": 0.41234, "peak_kv_cache_usage": 0.77, "preemptions": 3.0,
        "prefix_cache_hit_rate": 0.35, "prefix_cache_hit_rate_source": "tokens", "mean_ttft_ms": 123.456,
        "failures": {"timeout": 2, "http_error": 1}, "first_error": "http://u:***@h:8000/metrics: timed out",
    }
    lines = format_block(summary).splitlines()
    assert lines[0] == "{s:{c}^{n}}".format(s=" Server metrics ", c="=", n=WIDTH)
    assert lines[1] == f"{'Engine:':<40} {'vllm':<10}"
    assert lines[2] == f"{'Scrapes during the run:':<40} {'61':<10}"
    assert f"{'Mean running requests:':<40} {12.3456:<10.2f}" in lines
    assert f"{'Mean KV-cache usage (%):':<40} {41.234:<10.2f}" in lines
    assert f"{'Preemptions:':<40} {'3':<10}" in lines
    assert f"{'Prefix-cache hit rate (%):':<40} {35.0:<10.2f}" in lines
    assert f"{'Server mean TTFT (ms):':<40} {123.456:<10.2f}" in lines
    assert lines.index(f"{'timeout:':<40} {'2':<10}") < lines.index(f"{'http_error:':<40} {'1':<10}")
    assert lines[-2] == "First error: http://u:***@h:8000/metrics: timed out"
    assert lines[-1] == "=" * WIDTH
    assert not [line for line in lines if "Waiting" in line or "ITL" in line]  # absent keys print nothing


def test_format_block_is_empty_without_scrapes_or_failures():
    assert format_block({"scrapes": 0, "window_s": 1.0}) == ""
    assert format_block({}) == ""


# --- the series file -----------------------------------------------------------------------------------------


def test_series_path_for():
    assert series_path_for(Path("/r/run.records.jsonl")) == Path("/r/run.server_metrics.jsonl")
    assert series_path_for(Path("/r/run.records.parquet")) == Path("/r/run.server_metrics.jsonl")
    assert series_path_for(Path("/r/run.json")) == Path("/r/run.server_metrics.jsonl")
    assert series_path_for(Path("/r/other.txt")) == Path("/r/other.server_metrics.jsonl")


def test_store_round_trip(tmp_path: Path):
    snaps = [build_snapshot(parse_exposition((DATA / f"{e}.txt").read_text()), t=100.0 + i, wall=1.7e9 + i)
             for i, e in enumerate(("vllm", "sglang", "tgi"))]
    snaps.append(Snapshot(t=104.0, wall=1.7e9 + 4, engine=None, raw={"up": 1.0, "odd": math.nan, "big": math.inf}))
    path = tmp_path / "run.server_metrics.jsonl"
    write_series(path, snaps, clock_offset=1.69e9)
    assert len(path.read_text().splitlines()) == 4
    back = read_series(path)
    for a, b in zip(snaps, back, strict=True):
        assert (b.t, b.wall, b.engine) == (a.t, a.wall, a.engine)
        assert b.series == a.series and b.histograms == a.histograms
    assert back[0].histograms["ttft_seconds"][-1] == (math.inf, 100.0)
    assert back[0].raw == snaps[0].raw  # a vLLM page's raw samples fit the file's bound
    assert math.isnan(back[3].raw["odd"]) and back[3].raw["big"] == math.inf
    # the reader's clock: 2 s behind the scraper's
    moved = read_series(path, clock_offset=1.69e9 - 2.0)
    assert [s.t for s in moved] == [s.t + 2.0 for s in snaps]


def test_store_bounds_raw_keeping_unmapped_samples_first(tmp_path: Path):
    raw = {f'vllm:num_requests_running{{engine="{i}"}}': 1.0 for i in range(10)}
    raw.update({f'other_{i:04d}': float(i) for i in range(FILE_RAW_LIMIT + 40)})
    snap = Snapshot(t=1.0, wall=2.0, engine="vllm", raw=raw, raw_dropped=3)
    path = tmp_path / "s.jsonl"
    write_series(path, [snap], clock_offset=0.0)
    (back,) = read_series(path)
    assert len(back.raw) == FILE_RAW_LIMIT
    assert all(k.startswith("other_") for k in back.raw)
    assert back.raw_dropped == 3 + 10 + 40


def test_read_series_names_the_bad_line(tmp_path: Path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"t": 1.0, "wall": 2.0, "engine": null, "series": {}}\n\nnot json\n')
    with pytest.raises(DatasetError, match=r"bad\.jsonl:3: not a server-metrics line"):
        read_series(path)
    with pytest.raises(DatasetError, match="cannot read"):
        read_series(tmp_path / "missing.jsonl")
    path.write_text('{"wall": 2.0}\n')
    with pytest.raises(DatasetError, match=":1:"):
        read_series(path)
