"""Protects the statistics of open-loop schedules (gamma/Poisson gaps, N/λ rescaling, ramp-ups, constant
rate), think times for closed loops, and that worker shares add up to exactly the global schedule."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llmload.common.errors import ConfigError
from llmload.core.arrivals import (
    constant_offsets,
    parse_think_time,
    share_for_worker,
    think_time,
    vllm_send_offsets,
)
from llmload.shapes import parse_shape, rate_offsets


def gaps_of(offsets: np.ndarray) -> np.ndarray:
    """Inter-arrival gaps, the first one measured from the start of the run (vLLM's d0)."""
    return np.diff(np.concatenate([[0.0], offsets]))


# -- gamma / Poisson schedule ------------------------------------------------------------------------


@pytest.mark.parametrize("rate", [0.5, 4.0, 50.0])
def test_mean_gap_is_one_over_rate(rate):
    gaps = gaps_of(vllm_send_offsets(20_000, rate, rng=np.random.RandomState(11)))
    assert gaps.mean() == pytest.approx(1.0 / rate, rel=1e-9)
    # the median of an exponential is ln 2 / λ: a property the rescaling does not force
    assert np.median(gaps) == pytest.approx(math.log(2) / rate, rel=0.04)


@pytest.mark.parametrize("burstiness", [0.25, 0.5, 1.0, 2.0, 4.0])
def test_cv_is_one_over_sqrt_burstiness(burstiness):
    gaps = gaps_of(vllm_send_offsets(40_000, 5.0, burstiness, rng=np.random.RandomState(5)))
    expected_cv = 1.0 / math.sqrt(burstiness)
    # the sample CV of 40k gamma draws is within a few percent (heavier tails for small b)
    assert gaps.std() / gaps.mean() == pytest.approx(expected_cv, rel=0.06)


def test_poisson_gaps_pass_ks_against_exponential():
    stats = pytest.importorskip("scipy.stats")
    rate = 8.0
    gaps = gaps_of(vllm_send_offsets(5_000, rate, 1.0, rng=np.random.RandomState(2024)))
    assert stats.kstest(gaps, "expon", args=(0, 1.0 / rate)).pvalue > 0.01


@pytest.mark.parametrize("burstiness", [0.3, 3.0])
def test_gamma_gaps_pass_ks_against_gamma_and_fail_against_exponential(burstiness):
    stats = pytest.importorskip("scipy.stats")
    rate = 8.0
    gaps = gaps_of(vllm_send_offsets(5_000, rate, burstiness, rng=np.random.RandomState(7)))
    scale = 1.0 / (rate * burstiness)
    assert stats.kstest(gaps, "gamma", args=(burstiness, 0, scale)).pvalue > 0.01
    # the same test tells a non-Poisson schedule apart: it can fail
    assert stats.kstest(gaps, "expon", args=(0, 1.0 / rate)).pvalue < 1e-6


@pytest.mark.parametrize(("n", "rate", "burstiness"), [(1, 3.0, 1.0), (10, 0.7, 0.5), (3_000, 25.0, 2.0)])
def test_last_send_is_rescaled_to_n_over_rate(n, rate, burstiness):
    offsets = vllm_send_offsets(n, rate, burstiness, rng=np.random.RandomState(n))
    assert offsets[-1] == pytest.approx(n / rate, rel=1e-12)
    assert offsets[0] > 0
    assert np.all(np.diff(offsets) >= 0)


def test_rescaling_is_a_single_factor():
    # the rescaled schedule is the raw cumulative sum of the same draws times one constant
    n, rate, b = 500, 4.0, 0.8
    rng = np.random.RandomState(99)
    raw = np.cumsum(rng.gamma(shape=b, scale=1.0 / (rate * b), size=n))
    ours = vllm_send_offsets(n, rate, b, rng=np.random.RandomState(99))
    np.testing.assert_allclose(ours, raw * (n / rate) / raw[-1], rtol=1e-12)


# -- ramp-up -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["linear", "exponential"])
def test_ramp_up_gaps_follow_the_instantaneous_rate(strategy):
    n, start, end, groups = 20_000, 2.0, 40.0, 10
    offsets = vllm_send_offsets(
        n,
        float("inf"),
        rng=np.random.RandomState(3),
        ramp_up_strategy=strategy,
        ramp_up_start_rps=start,
        ramp_up_end_rps=end,
    )
    progress = np.arange(n) / (n - 1)
    if strategy == "linear":
        expected_rate = start + (end - start) * progress
    else:
        expected_rate = start * (end / start) ** progress
    gaps = gaps_of(offsets)
    observed = np.array([g.mean() for g in np.array_split(gaps, groups)])
    expected = np.array([(1.0 / r).mean() for r in np.array_split(expected_rate, groups)])
    # 2,000 exponential gaps per group: standard error ~2.2 %
    np.testing.assert_allclose(observed, expected, rtol=0.1)
    assert np.all(np.diff(observed) < 0)  # the rate increases group after group
    # not rescaled: the run lasts the sum of the expected gaps
    assert offsets[-1] == pytest.approx((1.0 / expected_rate).sum(), rel=0.03)


def test_exponential_ramp_multiplies_the_rate_by_a_constant_per_group():
    n, start, end, groups = 30_000, 1.0, 32.0, 5
    offsets = vllm_send_offsets(
        n,
        float("inf"),
        rng=np.random.RandomState(8),
        ramp_up_strategy="exponential",
        ramp_up_start_rps=start,
        ramp_up_end_rps=end,
    )
    rates = np.array([1.0 / g.mean() for g in np.array_split(gaps_of(offsets), groups)])
    ratio = (end / start) ** (1.0 / groups)  # 32 ** (1/5) = 2
    np.testing.assert_allclose(rates[1:] / rates[:-1], ratio, rtol=0.1)


# -- constant rate -------------------------------------------------------------------------------------


def test_constant_offsets_are_evenly_spaced_from_zero():
    offsets = constant_offsets(7, 4.0)
    assert offsets.tolist() == [0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5]
    big = constant_offsets(10_001, 3.0)
    np.testing.assert_allclose(np.diff(big), 1.0 / 3.0, rtol=1e-12)
    assert big[-1] == pytest.approx(10_000 / 3.0, rel=1e-15)
    assert constant_offsets(3, float("inf")).tolist() == [0.0, 0.0, 0.0]
    assert constant_offsets(0, 2.0).tolist() == []


@pytest.mark.parametrize(("n", "rate"), [(-1, 1.0), (3, 0.0), (3, -2.0), (3, float("nan"))])
def test_constant_offsets_reject_bad_settings(n, rate):
    with pytest.raises(ConfigError):
        constant_offsets(n, rate)


# -- sharding ------------------------------------------------------------------------------------------


def _schedules() -> dict[str, np.ndarray]:
    return {
        "gamma": vllm_send_offsets(1_001, 9.0, 0.5, rng=np.random.RandomState(1)),
        "constant": constant_offsets(997, 5.0),
        "shape": rate_offsets(
            parse_shape("sine:mean=10,amplitude=8,period=20;duration=60"), np.random.RandomState(1)
        ),
    }


@pytest.mark.parametrize("worker_count", [1, 2, 3, 5, 8, 13])
@pytest.mark.parametrize("schedule", ["gamma", "constant", "shape"])
def test_worker_shares_add_up_to_the_global_schedule(schedule, worker_count):
    offsets = _schedules()[schedule]
    shares = [share_for_worker(offsets, k, worker_count) for k in range(worker_count)]
    union = np.concatenate(shares)
    assert len(union) == len(offsets)  # nothing lost
    assert len(np.unique(union)) == len(union)  # no duplicates
    assert sorted(union.tolist()) == list(range(len(offsets)))
    np.testing.assert_array_equal(np.sort(np.concatenate([offsets[s] for s in shares])), offsets)
    sizes = [len(s) for s in shares]
    assert max(sizes) - min(sizes) <= 1  # balanced
    for s in shares:
        assert np.all(np.diff(offsets[s]) >= 0)  # each worker's share is in send order


def test_every_worker_computes_the_same_schedule():
    # workers compute the global schedule independently from the seed: identical bit for bit
    a = [vllm_send_offsets(300, 6.0, 0.7, rng=np.random.RandomState(42)) for _ in range(3)]
    assert a[0].tolist() == a[1].tolist() == a[2].tolist()


# -- think time ----------------------------------------------------------------------------------------


def test_fixed_think_time():
    wait = think_time("fixed", 0.5, 0)
    assert [wait() for _ in range(3)] == [0.5, 0.5, 0.5]


def test_exponential_think_time_statistics_and_seed():
    wait = think_time("exponential", 2.0, np.random.default_rng(4))
    draws = np.array([wait() for _ in range(20_000)])
    assert draws.mean() == pytest.approx(2.0, rel=0.03)
    assert draws.std() / draws.mean() == pytest.approx(1.0, rel=0.05)
    again = think_time("exp", 2.0, np.random.default_rng(4))
    assert [again() for _ in range(5)] == draws[:5].tolist()


def test_think_time_works_as_a_locust_wait_time_method():
    class FakeUser:
        wait_time = think_time("fixed", 0.25)

    assert FakeUser().wait_time() == 0.25


@pytest.mark.parametrize(
    ("spec", "kind_mean"), [("fixed:0.5", 0.5), ("exp:2", None), ("exponential:1.5", None)]
)
def test_parse_think_time(spec, kind_mean):
    wait = parse_think_time(spec, 1)
    value = wait()
    if kind_mean is not None:
        assert value == kind_mean
    else:
        assert value >= 0


@pytest.mark.parametrize("spec", ["0.5", "gauss:1", "fixed:abc", "exp:-1", "fixed:inf"])
def test_parse_think_time_errors_name_the_flag(spec):
    with pytest.raises(ConfigError, match="--think-time"):
        parse_think_time(spec)
