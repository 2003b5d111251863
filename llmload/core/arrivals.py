"""Open-loop arrival schedules: absolute send offsets computed in advance.

vLLM-exact schedule (``benchmark_serving.py::get_request``), for request ``i`` of ``n``:

    rate_i  = start + (end - start) * i / (n - 1)          ramp-up "linear"
            = start * (end / start) ** (i / (n - 1))       ramp-up "exponential"
            = request_rate                                 otherwise
    d_i     ~ Gamma(shape=b, scale=1 / (rate_i * b))       (0 when rate_i is inf; b = burstiness, 1 = Poisson)
    t_i     = d_0 + d_1 + ... + d_i                        (the first request waits d_0)
    t_i    *= (n / request_rate) / t_{n-1}                 only without ramp-up and when t_{n-1} != 0

One ``rng.gamma`` draw per request, in order, so ``numpy.random.RandomState(seed)`` reproduces vLLM's
``np.random.seed(seed)`` schedule exactly. Every worker computes the same schedule from the seed and takes
its share with :func:`share_for_worker`.

Also: :func:`constant_offsets` (evenly spaced sends), :func:`think_time` / :func:`parse_think_time`
(closed-loop pauses). Time-varying rates are in :mod:`llmload.shapes` (``rate_offsets``) and trace
replay in :mod:`llmload.datasets.traces`; any of their offsets are sharded with :func:`share_for_worker`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from llmload.common.choices import RAMP_UP_STRATEGIES
from llmload.common.errors import ConfigError


def validate_arrivals(
    request_rate: float,
    burstiness: float = 1.0,
    ramp_up_strategy: str | None = None,
    ramp_up_start_rps: float | None = None,
    ramp_up_end_rps: float | None = None,
) -> None:
    """Raise :class:`ConfigError` for settings vLLM rejects (or would crash on)."""
    if math.isnan(request_rate) or request_rate <= 0:
        raise ConfigError(f"--request-rate must be > 0 (or inf), got {request_rate}")
    if math.isnan(burstiness) or burstiness <= 0:
        raise ConfigError(f"--burstiness must be > 0, got {burstiness}")
    if ramp_up_strategy is None:
        if ramp_up_start_rps is not None or ramp_up_end_rps is not None:
            raise ConfigError(
                "--ramp-up-start-rps/--ramp-up-end-rps need --ramp-up-strategy linear|exponential"
            )
        return
    if ramp_up_strategy not in RAMP_UP_STRATEGIES:
        raise ConfigError(f"--ramp-up-strategy must be linear or exponential, got {ramp_up_strategy!r}")
    if not math.isinf(request_rate):
        raise ConfigError("--request-rate cannot be combined with --ramp-up-strategy; the ramp sets the rate")
    if ramp_up_start_rps is None or ramp_up_end_rps is None:
        raise ConfigError("--ramp-up-strategy needs both --ramp-up-start-rps and --ramp-up-end-rps")
    if ramp_up_start_rps < 0 or ramp_up_end_rps < 0:
        raise ConfigError("--ramp-up-start-rps and --ramp-up-end-rps must be non-negative")
    if ramp_up_start_rps > ramp_up_end_rps:
        raise ConfigError("--ramp-up-start-rps must not exceed --ramp-up-end-rps")
    if ramp_up_start_rps == 0:
        # exponential: vLLM's own check; linear: the first request would get rate 0 (vLLM divides by zero)
        raise ConfigError(f"--ramp-up-start-rps must be > 0 for a {ramp_up_strategy} ramp-up")


def request_rates(
    n: int,
    request_rate: float,
    *,
    ramp_up_strategy: str | None = None,
    ramp_up_start_rps: float | None = None,
    ramp_up_end_rps: float | None = None,
) -> np.ndarray:
    """The rate in force for each of the ``n`` requests (see the module docstring)."""
    if ramp_up_strategy is None or ramp_up_start_rps is None or ramp_up_end_rps is None:
        return np.full(n, float(request_rate))
    rates = np.empty(n)
    for i in range(n):
        progress = i / max(n - 1, 1)
        if ramp_up_strategy == "linear":
            rates[i] = ramp_up_start_rps + (ramp_up_end_rps - ramp_up_start_rps) * progress
        else:
            rates[i] = ramp_up_start_rps * (ramp_up_end_rps / ramp_up_start_rps) ** progress
    return rates


def vllm_send_offsets(
    n: int,
    request_rate: float,
    burstiness: float = 1.0,
    *,
    rng: np.random.RandomState | np.random.Generator,
    ramp_up_strategy: str | None = None,
    ramp_up_start_rps: float | None = None,
    ramp_up_end_rps: float | None = None,
) -> np.ndarray:
    """Send offsets in seconds from the start of the run, one per request, as vLLM computes them."""
    if n < 0:
        raise ConfigError(f"--num-prompts must be >= 0, got {n}")
    validate_arrivals(request_rate, burstiness, ramp_up_strategy, ramp_up_start_rps, ramp_up_end_rps)
    rates = request_rates(
        n,
        request_rate,
        ramp_up_strategy=ramp_up_strategy,
        ramp_up_start_rps=ramp_up_start_rps,
        ramp_up_end_rps=ramp_up_end_rps,
    )
    delays = np.zeros(n)
    for i, rate in enumerate(rates):
        if not math.isinf(rate):
            delays[i] = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness))
    offsets = np.cumsum(delays)
    if ramp_up_strategy is None and n and offsets[-1] != 0:
        offsets = offsets * ((n / request_rate) / offsets[-1])
    return offsets


def share_for_worker(offsets: np.ndarray | list[float], worker_index: int, worker_count: int) -> np.ndarray:
    """Indices into ``offsets`` that worker ``worker_index`` of ``worker_count`` sends (round robin)."""
    if worker_count < 1:
        raise ConfigError(f"worker count must be >= 1, got {worker_count}")
    if not 0 <= worker_index < worker_count:
        raise ConfigError(f"worker index must be in [0, {worker_count}), got {worker_index}")
    return np.arange(worker_index, len(offsets), worker_count)


def constant_offsets(n: int, rate: float) -> np.ndarray:
    """``n`` sends exactly ``1 / rate`` apart, the first at 0 (all at 0 when ``rate`` is inf)."""
    if n < 0:
        raise ConfigError(f"--num-prompts must be >= 0, got {n}")
    if math.isnan(rate) or rate <= 0:
        raise ConfigError(f"--request-rate must be > 0 (or inf), got {rate}")
    if math.isinf(rate):
        return np.zeros(n)
    return np.arange(n, dtype=np.float64) / rate


THINK_TIME_KINDS = ("fixed", "exponential")


def think_time(
    kind: str, mean_s: float, rng: np.random.RandomState | np.random.Generator | int | None = None
) -> Callable[..., float]:
    """A closed-loop pause: a callable returning seconds to wait before a user's next request.

    ``fixed`` always returns ``mean_s``; ``exponential`` (alias ``exp``) draws Exp(mean ``mean_s``)
    from ``rng`` (a numpy generator, or a seed). The callable ignores its arguments, so it can be set
    directly as a Locust user's ``wait_time`` (which Locust calls as a method).
    """
    if kind == "exp":
        kind = "exponential"
    if kind not in THINK_TIME_KINDS:
        raise ConfigError(f"--think-time kind must be fixed or exp(onential), got {kind!r}")
    if not (math.isfinite(mean_s) and mean_s >= 0):
        raise ConfigError(f"--think-time seconds must be a finite number >= 0, got {mean_s}")
    mean = float(mean_s)
    if kind == "fixed" or mean == 0:

        def fixed(*_args: object) -> float:
            return mean

        return fixed
    gen = rng if isinstance(rng, (np.random.RandomState, np.random.Generator)) else np.random.default_rng(rng)

    def exponential(*_args: object) -> float:
        return float(gen.exponential(mean))

    return exponential


def parse_think_time(
    spec: str, rng: np.random.RandomState | np.random.Generator | int | None = None, option: str = "--think-time"
) -> Callable[..., float]:
    """A pause spec (``--think-time``, ``--turn-think-time``) -> a callable returning seconds:
    ``fixed:S``, ``exp:MEAN`` (``exponential:``), ``uniform:LOW,HIGH`` or ``lognormal:MEDIAN,SIGMA``."""
    kind, sep, value = str(spec).strip().partition(":")
    kind = kind.strip().lower()
    expected = "fixed:SECONDS, exp:MEAN, uniform:LOW,HIGH or lognormal:MEDIAN,SIGMA"
    if not sep:
        raise ConfigError(f"{option} {spec!r}: expected {expected}")
    try:
        numbers = [float(v) for v in value.split(",")]
    except ValueError:
        raise ConfigError(f"{option} {spec!r}: {value!r} is not a number of seconds") from None
    if kind in ("uniform", "lognormal"):
        return _two_parameter_pause(kind, numbers, spec, option, rng)
    if len(numbers) != 1:
        raise ConfigError(f"{option} {spec!r}: {kind} takes one number of seconds")
    try:
        return think_time(kind, numbers[0], rng)
    except ConfigError as exc:
        message = str(exc).removeprefix("--think-time ").replace("fixed or exp(onential)", expected)
        raise ConfigError(f"{option} {spec!r}: {message}") from None


def _two_parameter_pause(kind: str, numbers: list[float], spec: str, option: str,
                         rng: np.random.RandomState | np.random.Generator | int | None) -> Callable[..., float]:
    if len(numbers) != 2 or not all(math.isfinite(x) and x >= 0 for x in numbers):
        raise ConfigError(f"{option} {spec!r}: {kind} takes two finite numbers >= 0")
    a, b = numbers
    if kind == "uniform" and b < a:
        raise ConfigError(f"{option} {spec!r}: uniform's HIGH must be >= LOW")
    if kind == "lognormal" and a <= 0:
        raise ConfigError(f"{option} {spec!r}: lognormal's MEDIAN must be > 0")
    gen = rng if isinstance(rng, (np.random.RandomState, np.random.Generator)) else np.random.default_rng(rng)
    if kind == "uniform":

        def uniform(*_args: object) -> float:
            return float(gen.uniform(a, b))

        return uniform
    mu = math.log(a)

    def lognormal(*_args: object) -> float:
        return float(gen.lognormal(mu, b))

    return lognormal
