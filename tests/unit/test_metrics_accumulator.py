"""MetricsAccumulator: fed one record at a time it gives exactly compute_metrics' numbers, and the live numbers
agree with numpy over the raw values. Expected values are derived here from the hand-built times, never from
llmload's own functions."""

from __future__ import annotations

import math
import random
from itertools import pairwise

import numpy as np
import pytest

from llmload.client.records import RequestRecord
from llmload.metrics import (
    LogHistogram,
    MetricsAccumulator,
    compute_metrics,
    is_good,
    linear_percentiles,
    parse_goodput,
    rank_bucket,
)

PCTS = (50.0, 90.0, 99.0)


def make(start: float, ttft: float, gaps: list[float], *, out: int | None = None, ok: bool = True,
         cut: bool = False, prompt: int = 10, server_prompt: int | None = None, intended: float | None = None,
         dispatched: float | None = None, user_class: str = "") -> RequestRecord:
    """A request sent at ``start``, first token after ``ttft``, then one counted event after each gap."""
    times = [start + ttft]
    for g in gaps:
        times.append(times[-1] + g)
    return RequestRecord(
        start=start, first_token=times[0], chunk_times=times, chunk_tokens=[1] * len(times),
        output_tokens=len(times) if out is None else out, success=ok, cut_off=cut, prompt_len=prompt,
        server_prompt_tokens=server_prompt, intended_send=intended, dispatched_at=dispatched,
        error="" if ok else "HTTP 500", failure_kind="" if ok else "http_5xx", user_class=user_class,
    )


def workload(seed: int = 7, n: int = 60) -> list[RequestRecord]:
    """Random but reproducible requests: some failed, some cut off, some open loop, lengths 1 to 30."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        start = i * 0.05
        gaps = [rnd.uniform(0.005, 0.03) for _ in range(rnd.randint(0, 29))]
        intended = start - rnd.uniform(0, 0.01) if i % 3 == 0 else None
        out.append(make(start, rnd.uniform(0.05, 0.4), gaps, ok=i % 11 != 5, cut=i % 13 == 7,
                        prompt=rnd.randint(5, 500), server_prompt=rnd.choice([None, rnd.randint(5, 500)]),
                        intended=intended, dispatched=None if intended is None else intended + 0.001))
    return out


def raw(records: list[RequestRecord]) -> dict[str, list[float]]:
    """Every latency list (seconds) straight from the timestamps, by the textbook definitions."""
    done = [r for r in records if r.success and not r.cut_off]
    lists: dict[str, list[float]] = {"ttft": [], "itl": [], "tpot": [], "tpot_steady": [], "e2el": []}
    for r in done:
        t = list(r.chunk_times)
        ttft, e2el = t[0] - r.start, t[-1] - r.start
        lists["ttft"].append(ttft)
        lists["e2el"].append(e2el)
        lists["itl"] += [b - a for a, b in pairwise(t)]
        if r.output_tokens > 1:
            lists["tpot"].append((e2el - ttft) / (r.output_tokens - 1))
        if r.output_tokens > 2 and len(t) > 1:
            lists["tpot_steady"].append((e2el - ttft - (t[1] - t[0])) / (r.output_tokens - 2))
    lists["queue_time"] = [r.start - r.intended_send for r in records if r.intended_send is not None]
    lists["schedule_lag"] = [max(0.0, r.dispatched_at - r.intended_send) for r in records
                             if r.intended_send is not None and r.dispatched_at is not None]
    return lists


def test_accumulator_result_equals_compute_metrics() -> None:
    records = workload()
    acc = MetricsAccumulator()
    for r in records:
        acc.add(r)
    kwargs = {"goodput_slos": {"ttft": 250.0, "tpot": 20.0}, "selected_percentiles": (50, 99.9),
              "selected_metrics": ("ttft", "tpot", "itl", "e2el")}
    assert acc.result(3.0, **kwargs).to_result_dict() == compute_metrics(records, 3.0, **kwargs).to_result_dict()


def test_result_matches_numpy_over_raw_values() -> None:
    records = workload()
    d = compute_metrics(records, 3.0, selected_percentiles=(50, 90, 99),
                        selected_metrics=("ttft", "tpot", "itl", "e2el")).to_result_dict()
    lists = raw(records)
    for name in ("ttft", "tpot", "itl", "e2el", "tpot_steady", "queue_time"):
        ms = np.asarray(lists[name]) * 1000.0
        assert d[f"mean_{name}_ms"] == pytest.approx(float(np.mean(ms)), rel=1e-12), name
        assert d[f"std_{name}_ms"] == pytest.approx(float(np.std(ms)), rel=1e-9), name
        for p in (50, 90, 99):
            assert d[f"p{p}_{name}_ms"] == pytest.approx(float(np.percentile(ms, p)), rel=1e-12), (name, p)
    done = [r for r in records if r.success and not r.cut_off]
    assert d["completed"] == len(done)
    assert d["failed"] == sum(1 for r in records if not r.success and not r.cut_off)
    assert d["sent"] == len(records)
    assert d["total_input_tokens_dataset"] == sum(r.prompt_len for r in done)
    server = sum(r.prompt_len if r.server_prompt_tokens is None else r.server_prompt_tokens for r in done)
    assert d["total_input_tokens"] == d["total_input_tokens_server"] == server  # today's vLLM: the server's
    assert d["prompt_tokens_server_minus_dataset"] == server - d["total_input_tokens_dataset"]
    total_out = sum(r.output_tokens for r in done)
    assert d["total_token_throughput"] == pytest.approx((d["total_input_tokens"] + total_out) / 3.0)


def test_goodput_counts_requests_meeting_every_slo() -> None:
    records = workload()
    slos = {"ttft": 250.0, "e2el": 600.0}
    done = [r for r in records if r.success and not r.cut_off]
    good = sum(1 for r in done if (r.chunk_times[0] - r.start) * 1000 <= 250 and (r.chunk_times[-1] - r.start)
               * 1000 <= 600)
    assert 0 < good < len(done)
    assert compute_metrics(records, 2.0, goodput_slos=slos).request_goodput == pytest.approx(good / 2.0)
    acc = MetricsAccumulator()
    acc.extend(records)
    live = acc.live(2.0, slos=slos)
    assert live["good"] == good and live["goodput_per_s"] == pytest.approx(good / 2.0)


@pytest.mark.parametrize("slos", [{"ttft": 200.0}, {"tpot": 15.0}, {"tpot": 0.0}, {"e2el": 500.0, "tpot": 25.0}])
def test_vectorised_goodput_is_the_per_request_rule(slos) -> None:
    records = [*workload(seed=11, n=120), make(9.0, 0.1, [], out=1)]  # one token: TPOT counts as 0
    done = [r for r in records if r.success and not r.cut_off]
    acc = MetricsAccumulator()
    acc.extend(records)
    assert acc.live(1.0, slos=slos)["good"] == sum(is_good(r, slos) for r in done)


def test_live_numbers_match_numpy_and_rates_use_the_span() -> None:
    records = workload()
    acc = MetricsAccumulator()
    acc.extend(records)
    live = acc.live(4.0)
    lists = raw(records)
    for name, values in lists.items():
        ms = np.asarray(values) * 1000.0
        summary = live[f"{name}_ms"]
        assert summary["count"] == len(values), name
        assert summary["mean"] == pytest.approx(float(np.mean(ms)), rel=1e-12), name
        for p in PCTS:
            assert summary[f"p{int(p)}"] == pytest.approx(float(np.percentile(ms, p)), rel=1e-12), (name, p)
    done = [r for r in records if r.success and not r.cut_off]
    assert live["requests"] == len(records) and live["completed"] == len(done)
    assert live["requests_per_s"] == pytest.approx(len(done) / 4.0)
    assert live["output_tokens_per_s"] == pytest.approx(sum(r.output_tokens for r in done) / 4.0)
    assert live["good"] is None and live["goodput_per_s"] is None
    assert live["itl_exact"] is True
    assert sum(live["errors"].values()) == live["failed"] + live["cut_off"]


def test_empty_accumulator_gives_zeros() -> None:
    live = MetricsAccumulator().live(0.0)
    assert live["completed"] == 0 and live["requests_per_s"] == 0.0
    assert live["ttft_ms"] == {"count": 0, "mean": None, "p50": None, "p90": None, "p99": None}


def test_itl_limit_switches_to_the_histogram() -> None:
    rnd = random.Random(3)
    records = [make(i * 0.1, 0.05, [rnd.uniform(0.001, 0.05) for _ in range(50)]) for i in range(40)]
    itls = np.asarray(raw(records)["itl"]) * 1000.0
    acc = MetricsAccumulator(itl_exact_limit=1000)
    acc.extend(records)
    live = acc.live(4.0)
    assert live["itl_exact"] is False and live["itl_ms"]["count"] == itls.size == 2000
    assert live["itl_ms"]["mean"] == pytest.approx(float(itls.mean()), rel=1e-9)
    for p in PCTS:  # 1 % buckets: within 1 % of the exact value
        assert live["itl_ms"][f"p{int(p)}"] == pytest.approx(float(np.percentile(itls, p)), rel=0.01)
    with pytest.raises(ValueError, match="itl_exact_limit"):
        acc.result(4.0)


def test_log_histogram_merges_losslessly() -> None:
    rnd = np.random.default_rng(5)
    a, b = rnd.uniform(1e-4, 0.2, 500), rnd.uniform(1e-3, 2.0, 700)
    merged = LogHistogram.of(a)
    merged.merge(LogHistogram.of(b))
    whole = LogHistogram.of(np.concatenate([a, b]))
    assert merged.total == whole.total == 1200
    assert np.array_equal(merged.counts, whole.counts)
    ordered = np.sort(np.concatenate([a, b]))
    for p in (1, 50, 99, 100):
        assert merged.percentile(p) == whole.percentile(p)
        # the value of rank floor(p/100 * (n-1)), to within half a 1 % bucket
        assert merged.percentile(p) == pytest.approx(float(ordered[math.floor(p / 100 * 1199)]), rel=0.006)


def test_percentile_rules() -> None:
    values = [0.004, 0.001, 0.003, 0.010]
    assert linear_percentiles(values, (25, 90)) == [float(np.percentile(values, 25)),
                                                    float(np.percentile(values, 90))]
    assert linear_percentiles([], (50,)) == [0.0]
    # counts of values 0,0,1,3,3,3 (bucket = value): rank floor(p/100 * 5)
    counts = [2, 1, 0, 3]
    assert [rank_bucket(counts, p) for p in (0, 40, 50, 60, 100)] == [0, 1, 1, 3, 3]
    assert rank_bucket([0, 0], 50) is None


def test_parse_goodput_plain_form_is_unchanged_and_rejects_nonsense() -> None:
    assert parse_goodput(["ttft:500", "tpot:50"]) == {"ttft": 500.0, "tpot": 50.0}
    assert parse_goodput(None) is None and parse_goodput([]) is None
    from llmload.common.errors import ConfigError

    for bad in ("ttft", "itl:5", "ttft:-1", "ttft:x", "ttft:nan", ":ttft:5", "ttft:tpot:5"):
        with pytest.raises(ConfigError):
            parse_goodput([bad])
    assert math.isclose(parse_goodput(["e2el:0.5"])["e2el"], 0.5)


def test_record_properties_are_the_definitions() -> None:
    r = make(1.0, 0.25, [0.125, 0.5], intended=0.75, dispatched=0.875)
    assert (r.ttft, r.e2el, r.itls) == (0.25, 0.875, [0.125, 0.5])
    assert (r.queue_time, r.schedule_lag) == (0.25, 0.125)
    back = RequestRecord.from_dict({k: v for k, v in r.to_dict().items() if k != "user_class"})
    assert back.user_class == "" and back.ttft == 0.25
