"""Protects the numbers in the result JSON: vLLM's definitions, key names, and our extra keys."""

from __future__ import annotations

import numpy as np
import pytest

from llmload.client.records import RequestRecord
from llmload.common.errors import ConfigError
from llmload.metrics import (
    DETAILED_KEYS,
    Distribution,
    compute_metrics,
    detailed_lists,
    percentile_label,
    tpot_s,
    tpot_steady_s,
)
from llmload.summary import format_summary


def rec(start: float, chunks: list[float], out: int, **kw) -> RequestRecord:
    kw.setdefault("success", True)
    kw.setdefault("prompt_len", 10)
    return RequestRecord(
        start=start,
        first_token=chunks[0] if chunks else None,
        chunk_times=list(chunks),
        chunk_tokens=[1] * len(chunks),
        output_tokens=out,
        **kw,
    )


# A: st=0, chunks at 0.1, 0.15, 0.25, 3 tokens
#    TTFT 100 ms; ITLs 50, 100 ms; E2EL 250 ms; TPOT (250-100)/2 = 75 ms; steady (250-100-50)/1 = 100 ms
A = dict(start=0.0, chunks=[0.1, 0.15, 0.25], out=3)
# B: st=1, chunks at 1.3, 1.4, 1.5, 1.6, 5 tokens (the last chunk holds 2)
#    TTFT 300 ms; ITLs 100, 100, 100 ms; E2EL 600 ms; TPOT (600-300)/4 = 75 ms; steady (600-300-100)/3 = 66.67 ms
B = dict(start=1.0, chunks=[1.3, 1.4, 1.5, 1.6], out=5)


def test_single_request_arithmetic():
    r = rec(**A)
    assert r.ttft == pytest.approx(0.1)
    assert tpot_s(r) == pytest.approx(0.075)
    assert tpot_steady_s(r) == pytest.approx(0.1)
    m = compute_metrics([r], duration_s=1.0, selected_metrics=["ttft", "tpot", "itl", "e2el"])
    assert m.ttft.mean_ms == pytest.approx(100)
    assert m.tpot.mean_ms == pytest.approx(75)
    assert m.tpot_steady.mean_ms == pytest.approx(100)
    assert m.e2el.mean_ms == pytest.approx(250)
    # ITLs 50 and 100: mean 75, median 75, population std 25, p99 = 50 + 0.99*50 = 99.5
    assert m.itl.mean_ms == pytest.approx(75)
    assert m.itl.median_ms == pytest.approx(75)
    assert m.itl.std_ms == pytest.approx(25)
    assert dict(m.itl.percentiles_ms)[99.0] == pytest.approx(99.5)


def test_pooled_itls_and_totals():
    m = compute_metrics([rec(**A), rec(**B)], duration_s=2.0)
    # ITLs pooled: 50, 100, 100, 100, 100 -> mean 90, median 100; per-request mean would be (75+100)/2 = 87.5
    assert m.itl.count == 5
    assert m.itl.mean_ms == pytest.approx(90)
    assert m.itl.median_ms == pytest.approx(100)
    # TTFTs 100, 300 -> mean 200, population std 100 (sample std would be 141.4)
    assert m.ttft.mean_ms == pytest.approx(200)
    assert m.ttft.std_ms == pytest.approx(100)
    # tokens: in 10+10 = 20, out 3+5 = 8; throughput over 2 s
    assert m.completed == 2
    assert m.total_input == 20
    assert m.total_output == 8
    assert m.request_throughput == pytest.approx(1.0)
    assert m.output_throughput == pytest.approx(4.0)
    assert m.total_token_throughput == pytest.approx(14.0)
    # steady TPOT: 100 and 66.67 -> mean 83.33
    assert m.tpot_steady.mean_ms == pytest.approx((100 + 200 / 3) / 2)


def test_failed_and_cut_off_are_excluded():
    failed = rec(start=0.0, chunks=[5.0, 6.0], out=7, success=False, error="HTTP 500", prompt_len=99)
    cut = rec(start=0.0, chunks=[0.5, 9.0], out=4, success=False, cut_off=True, prompt_len=99)
    m = compute_metrics([rec(**A), failed, cut], duration_s=1.0)
    assert m.completed == 1
    assert m.failed == 1
    assert m.cut_off == 1
    assert m.total_requests == 3
    assert m.total_output == 3  # failed/cut-off count 0 output tokens
    assert m.total_input == 10  # and no input tokens, as vLLM
    assert m.ttft.count == 1 and m.ttft.mean_ms == pytest.approx(100)
    assert m.itl.count == 2
    assert list(m.output_lens) == [3, 0, 0]
    d = m.to_result_dict()
    assert (d["failed"], d["cut_off"], d["completed"]) == (1, 1, 1)
    assert d["sent"] == 3 and d["failures_by_kind"] == {"cut_off": 1, "http_5xx": 1}


def test_tpot_needs_more_than_one_token_and_steady_more_than_two():
    one = rec(start=0.0, chunks=[0.2], out=1)
    two = rec(start=0.0, chunks=[0.1, 0.3], out=2)  # TPOT (300-100)/1 = 200; no steady value
    m = compute_metrics([one, two], duration_s=1.0)
    assert m.tpot.count == 1 and m.tpot.mean_ms == pytest.approx(200)
    assert m.tpot_steady.count == 0 and m.tpot_steady.mean_ms == 0.0


def test_empty_lists_give_zero():
    m = compute_metrics([], duration_s=1.0, selected_metrics=["ttft", "tpot", "itl", "e2el"])
    d = m.to_result_dict()
    for k in ("mean_ttft_ms", "median_tpot_ms", "std_itl_ms", "p99_e2el_ms", "mean_tpot_steady_ms"):
        assert d[k] == 0.0
    assert d["completed"] == 0 and d["max_concurrent_requests"] == 0


def test_goodput_every_slo_must_hold():
    # A: TTFT 100, TPOT 75, E2EL 250; B: TTFT 300, TPOT 75, E2EL 600
    recs = [rec(**A), rec(**B)]
    assert compute_metrics(recs, 2.0, goodput_slos={"ttft": 200}).request_goodput == pytest.approx(0.5)
    assert compute_metrics(recs, 2.0, goodput_slos={"ttft": 400}).request_goodput == pytest.approx(1.0)
    assert compute_metrics(recs, 2.0, goodput_slos={"tpot": 74}).request_goodput == 0.0
    assert compute_metrics(
        recs, 2.0, goodput_slos={"ttft": 1000, "e2el": 500}
    ).request_goodput == pytest.approx(0.5)
    # no SLOs -> null, as vLLM
    assert compute_metrics(recs, 2.0).to_result_dict()["request_goodput"] is None


def test_goodput_boundary_is_inclusive():
    # TTFT exactly 250 ms (0.25 is exact in binary): good at SLO 250, not at 249.9
    r = rec(start=0.0, chunks=[0.25, 0.5], out=2)
    assert compute_metrics([r], 1.0, goodput_slos={"ttft": 250}).request_goodput == pytest.approx(1.0)
    assert compute_metrics([r], 1.0, goodput_slos={"ttft": 249.9}).request_goodput == 0.0


def test_goodput_tpot_counts_zero_for_single_token():
    # vLLM appends tpot 0 for out <= 1, so a one-token request passes any TPOT SLO
    m = compute_metrics([rec(start=0.0, chunks=[0.2], out=1)], 1.0, goodput_slos={"tpot": 1})
    assert m.request_goodput == pytest.approx(1.0)


def test_percentile_labels_and_result_keys():
    assert percentile_label(99.0) == "99"
    assert percentile_label(99.9) == "99.9"
    assert percentile_label(50) == "50"
    m = compute_metrics([rec(**A)], 1.0, selected_percentiles=[50, 99.9], selected_metrics=["ttft", "e2el"])
    d = m.to_result_dict()
    assert "p50_ttft_ms" in d and "p99.9_ttft_ms" in d and "p99.9_e2el_ms" in d
    assert "p99_ttft_ms" not in d
    # only the selected metrics get vLLM keys
    assert "mean_tpot_ms" not in d and "mean_itl_ms" not in d
    vllm_head = [
        "duration",
        "completed",
        "total_input_tokens",
        "total_output_tokens",
        "request_throughput",
        "request_goodput",
        "output_throughput",
        "total_token_throughput",
    ]
    assert list(d)[: len(vllm_head)] == vllm_head
    ttft_keys = [k for k in d if k.endswith("_ttft_ms")]
    assert ttft_keys == ["mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p50_ttft_ms", "p99.9_ttft_ms"]


def test_default_selection_is_ttft_tpot_itl():
    d = compute_metrics([rec(**A)], 1.0).to_result_dict()
    assert {"p99_ttft_ms", "p99_tpot_ms", "p99_itl_ms"} <= set(d)
    assert "mean_e2el_ms" not in d


def test_percentiles_are_linear_over_raw_values():
    # TTFTs 1..100 ms -> np.percentile linear interpolation
    recs = [rec(start=0.0, chunks=[i / 1000], out=1) for i in range(1, 101)]
    m = compute_metrics(recs, 1.0, selected_percentiles=[90, 99.9])
    p = dict(m.ttft.percentiles_ms)
    assert p[90.0] == pytest.approx(90.1)
    assert p[99.9] == pytest.approx(99.901)


def test_input_tokens_are_the_servers_today_and_the_datasets_under_0_7():
    # today's vllm bench serve sums the server's usage.prompt_tokens; vLLM 0.7 summed the dataset's lengths
    r1 = rec(**A, server_prompt_tokens=12)  # dataset said 10
    r2 = rec(**B, server_prompt_tokens=10)
    m = compute_metrics([r1, r2], 1.0)
    assert m.total_input == 22 and m.total_token_throughput == pytest.approx(22 + 8)
    d = m.to_result_dict()
    assert d["total_input_tokens"] == d["total_input_tokens_server"] == 22
    assert d["total_input_tokens_dataset"] == 20
    assert d["prompt_tokens_mismatch"] == 1
    assert d["prompt_tokens_server_minus_dataset"] == 2
    old = compute_metrics([r1, r2], 1.0, vllm_compat="0.7").to_result_dict()
    assert old["total_input_tokens"] == old["total_input_tokens_dataset"] == 20
    assert old["total_token_throughput"] == pytest.approx(20 + 8)
    # no server count at all: both meanings are the dataset's
    plain = compute_metrics([rec(**A), rec(**B)], 1.0).to_result_dict()
    assert plain["total_input_tokens"] == plain["total_input_tokens_dataset"] == 20


def test_server_input_tokens_null_when_no_request_reported_them():
    d = compute_metrics([rec(**A), rec(**B)], 1.0).to_result_dict()
    assert d["total_input_tokens_server"] is None
    assert d["prompt_tokens_mismatch"] == 0


def test_own_keys_present():
    r = rec(**A, output_tokens_source="usage")
    d = compute_metrics([r, rec(**B)], 1.0, ttft_rule="vllm").to_result_dict()
    assert d["ttft_rule"] == "vllm"
    assert d["output_tokens_source"] == {"usage": 1, "chunks": 1}
    assert "p99_tpot_steady_ms" in d and "p99_queue_time_ms" in d and "p99_schedule_lag_ms" in d


def test_queue_time_and_schedule_lag():
    # intended 0, sent 0.002 -> 2 ms; intended 1.0, sent 1.02 -> 20 ms (late over the 10 ms threshold)
    r1 = rec(start=0.002, chunks=[0.1], out=1, intended_send=0.0)
    r2 = rec(start=1.02, chunks=[1.1], out=1, intended_send=1.0)
    m = compute_metrics([r1, r2], 2.0)
    assert m.queue_time.mean_ms == pytest.approx(11)
    assert m.queue_time.max_ms == pytest.approx(20)
    assert m.schedule_lag.mean_ms == pytest.approx(11)  # defaults to queue times
    assert m.late_sends == 1
    m2 = compute_metrics([r1, r2], 2.0, schedule_lags_s=[0.0, 0.001])
    assert m2.schedule_lag.max_ms == pytest.approx(1) and m2.late_sends == 0


def test_peak_tokens_and_concurrency_buckets():
    # A runs in second 0 (3 tokens there); B starts at 1.0 and emits 4 events in second 1
    recs = [rec(**A), rec(**B)]
    m = compute_metrics(recs, 2.0)
    assert m.max_output_tokens_per_s == 4.0
    assert m.max_concurrent_requests == 1
    # overlapping: both active in second 0
    m2 = compute_metrics([rec(**A), rec(start=0.05, chunks=[0.2, 0.3], out=2)], 1.0)
    assert m2.max_output_tokens_per_s == 5.0
    assert m2.max_concurrent_requests == 2


def test_max_concurrent_requests_today_exact_and_0_7_per_second():
    # A runs 0.0-0.25 s, C 0.5-0.8 s: never at once (today's exact peak 1), but in one second (0.7's count 2)
    recs = [rec(**A), rec(start=0.5, chunks=[0.6, 0.8], out=2)]
    today = compute_metrics(recs, 1.0)
    assert today.max_concurrent_requests == 1 and today.max_concurrent_requests_per_second == 2
    assert today.to_result_dict()["max_concurrent_requests"] == 1
    old = compute_metrics(recs, 1.0, vllm_compat="0.7")
    assert old.to_result_dict()["max_concurrent_requests"] == 2
    assert "Peak concurrent requests:                2.00" in format_summary(old)
    assert "Peak concurrent requests:                1.00" in format_summary(today)
    # one that ends exactly when another starts is not concurrent with it (an end before a start)
    back_to_back = [rec(start=0.0, chunks=[0.5], out=1), rec(start=0.5, chunks=[0.7], out=1)]
    assert compute_metrics(back_to_back, 1.0).max_concurrent_requests == 1


def test_detailed_lists():
    failed = rec(start=0.0, chunks=[], out=0, success=False, error="boom", prompt_len=7)
    ok = rec(**A, generated_text="hi")
    m = compute_metrics([ok, failed], 1.0)
    d = detailed_lists([ok, failed], m)
    assert tuple(d) == DETAILED_KEYS
    assert d["input_lens"] == [10, 7]
    assert d["output_lens"] == [3, 0]
    assert d["ttfts"][0] == pytest.approx(0.1) and d["ttfts"][1] == 0.0
    assert d["itls"][0] == pytest.approx([0.05, 0.1]) and d["itls"][1] == []
    assert d["generated_texts"] == ["hi", ""]
    assert d["errors"] == ["", "boom"]


def test_distribution_matches_numpy_directly():
    values = [0.003, 0.001, 0.010, 0.004, 0.002]
    dist = Distribution.of(values, [25, 99])
    ms = np.array(values) * 1000
    assert dist.std_ms == pytest.approx(float(np.std(ms)))
    assert dict(dist.percentiles_ms)[25.0] == pytest.approx(float(np.percentile(ms, 25)))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"goodput_slos": {"itl": 5}},
        {"goodput_slos": {"ttft": -1}},
        {"selected_metrics": ["ttft", "bogus"]},
        {"selected_percentiles": [101]},
        {"ttft_rule": "first"},
    ],
)
def test_bad_settings_raise_config_error(kwargs):
    with pytest.raises(ConfigError):
        compute_metrics([rec(**A)], 1.0, **kwargs)


def test_zero_duration_is_rejected():
    with pytest.raises(ConfigError):
        compute_metrics([rec(**A)], 0.0)
