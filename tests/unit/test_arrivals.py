"""Protects the open-loop schedule: identical to vLLM's get_request for the same seed, and its checks."""

from __future__ import annotations

import numpy as np
import pytest

from llmload.common.errors import ConfigError
from llmload.core.arrivals import request_rates, share_for_worker, vllm_send_offsets


def vllm_reference(n, request_rate, burstiness, seed, strategy=None, start_rps=None, end_rps=None):
    """vLLM's reference behaviour: global np.random seeded, one np.random.gamma per request, in order."""
    np.random.seed(seed)
    delays = []
    for i in range(n):
        if strategy == "linear":
            rate = start_rps + (end_rps - start_rps) * (i / max(n - 1, 1))
        elif strategy == "exponential":
            rate = start_rps * (end_rps / start_rps) ** (i / max(n - 1, 1))
        else:
            rate = request_rate
        delays.append(
            0 if rate == float("inf") else np.random.gamma(shape=burstiness, scale=1.0 / (rate * burstiness))
        )
    for i in range(1, n):
        delays[i] += delays[i - 1]
    if strategy is None and delays[-1] != 0:
        factor = (n / request_rate) / delays[-1]
        delays = [d * factor for d in delays]
    return delays


@pytest.mark.parametrize(("rate", "burstiness"), [(4.0, 1.0), (10.0, 0.3), (2.5, 3.0)])
def test_identical_to_vllm_reference(rate, burstiness):
    ours = vllm_send_offsets(200, rate, burstiness, rng=np.random.RandomState(123))
    ref = vllm_reference(200, rate, burstiness, 123)
    assert ours.tolist() == ref  # bit for bit


@pytest.mark.parametrize("strategy", ["linear", "exponential"])
def test_ramp_up_identical_to_vllm_reference(strategy):
    ours = vllm_send_offsets(
        100,
        float("inf"),
        1.0,
        rng=np.random.RandomState(7),
        ramp_up_strategy=strategy,
        ramp_up_start_rps=1.0,
        ramp_up_end_rps=20.0,
    )
    ref = vllm_reference(100, None, 1.0, 7, strategy, 1.0, 20.0)
    assert ours.tolist() == ref


def test_last_send_lands_at_n_over_rate():
    offsets = vllm_send_offsets(500, 8.0, rng=np.random.RandomState(0))
    assert offsets[-1] == pytest.approx(500 / 8.0, rel=1e-12)
    assert offsets[0] > 0  # the first request waits d0
    assert np.all(np.diff(offsets) >= 0)


def test_mean_gap_is_one_over_rate():
    offsets = vllm_send_offsets(20000, 5.0, rng=np.random.RandomState(1))
    gaps = np.diff(np.concatenate([[0.0], offsets]))
    assert gaps.mean() == pytest.approx(0.2, rel=1e-3)  # rescaling makes the sum exact: 20000/5 s
    # Poisson: exponential gaps have CV ~ 1
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)


def test_lower_burstiness_is_burstier():
    def cv(b):
        offsets = vllm_send_offsets(20000, 5.0, b, rng=np.random.RandomState(2))
        gaps = np.diff(np.concatenate([[0.0], offsets]))
        return gaps.std() / gaps.mean()

    # Gamma(shape=b) has CV 1/sqrt(b): b=0.25 -> 2, b=1 -> 1, b=4 -> 0.5
    assert cv(0.25) == pytest.approx(2.0, rel=0.1)
    assert cv(0.25) > cv(1.0) > cv(4.0)


def test_deterministic_per_seed():
    a = vllm_send_offsets(50, 3.0, rng=np.random.RandomState(42))
    b = vllm_send_offsets(50, 3.0, rng=np.random.RandomState(42))
    c = vllm_send_offsets(50, 3.0, rng=np.random.RandomState(43))
    assert a.tolist() == b.tolist()
    assert a.tolist() != c.tolist()


def test_generator_is_accepted():
    a = vllm_send_offsets(50, 3.0, rng=np.random.default_rng(5))
    assert len(a) == 50 and a[-1] == pytest.approx(50 / 3.0)


def test_infinite_rate_sends_everything_at_once():
    rng = np.random.RandomState(0)
    offsets = vllm_send_offsets(10, float("inf"), rng=rng)
    assert offsets.tolist() == [0.0] * 10
    # no draws were consumed, as vLLM skips the gamma call
    assert rng.random_sample() == np.random.RandomState(0).random_sample()


def test_ramp_up_rates_increase():
    lin = request_rates(
        5, float("inf"), ramp_up_strategy="linear", ramp_up_start_rps=1.0, ramp_up_end_rps=5.0
    )
    assert lin.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]
    exp = request_rates(
        3, float("inf"), ramp_up_strategy="exponential", ramp_up_start_rps=1.0, ramp_up_end_rps=16.0
    )
    assert exp.tolist() == pytest.approx([1.0, 4.0, 16.0])
    # the ramp is not rescaled: later gaps are shorter on average
    offsets = vllm_send_offsets(
        4000,
        float("inf"),
        rng=np.random.RandomState(3),
        ramp_up_strategy="linear",
        ramp_up_start_rps=1.0,
        ramp_up_end_rps=50.0,
    )
    gaps = np.diff(np.concatenate([[0.0], offsets]))
    assert gaps[:400].mean() > 5 * gaps[-400:].mean()


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((10, 0.0), {}),
        ((10, -1.0), {}),
        ((10, 1.0, 0.0), {}),
        ((10, float("inf")), {"ramp_up_strategy": "linear", "ramp_up_start_rps": 1.0}),
        (
            (10, float("inf")),
            {"ramp_up_strategy": "exponential", "ramp_up_start_rps": 0.0, "ramp_up_end_rps": 5.0},
        ),
        (
            (10, float("inf")),
            {"ramp_up_strategy": "linear", "ramp_up_start_rps": 5.0, "ramp_up_end_rps": 1.0},
        ),
        ((10, float("inf")), {"ramp_up_strategy": "step", "ramp_up_start_rps": 1.0, "ramp_up_end_rps": 5.0}),
        ((10, 4.0), {"ramp_up_strategy": "linear", "ramp_up_start_rps": 1.0, "ramp_up_end_rps": 5.0}),
        ((10, 4.0), {"ramp_up_start_rps": 1.0}),
    ],
)
def test_invalid_settings_raise_config_error(args, kwargs):
    with pytest.raises(ConfigError):
        vllm_send_offsets(*args, rng=np.random.RandomState(0), **kwargs)


def test_share_for_worker_round_robin():
    offsets = np.arange(10, dtype=float)
    shares = [share_for_worker(offsets, k, 3).tolist() for k in range(3)]
    assert shares == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]
    assert sorted(i for s in shares for i in s) == list(range(10))
    with pytest.raises(ConfigError):
        share_for_worker(offsets, 3, 3)
    with pytest.raises(ConfigError):
        share_for_worker(offsets, 0, 0)
