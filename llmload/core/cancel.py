"""Client-side cancellation (``--cancel-rate P --cancel-after SPEC``): real users close the tab mid-answer.

Each request is drawn from ``--seed`` and its request id alone — the same draw on every worker and in every way
in — to be cancelled with probability ``P``; a cancelled request's client closes the connection after the
drawn amount: seconds from when the request went out, or ``tokens:N`` stream events. Specs:

    2.5                fixed: 2.5 s after the request went out
    exp:2              exponential, mean 2 s
    uniform:0.5:3      uniform between 0.5 and 3 s
    tokens:50          after the 50th stream event (about the 50th token)
    tokens:uniform:10:200

The initial test, the warm-ups and the probes are never cancelled: they are not the run's requests.
A cancelled request is its own outcome: neither completed nor failed, left out of every latency statistic, and
``sent = completed + failed + cancelled + cut off``. docs/arrivals.md, "Cancellation".
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from llmload.common.errors import ConfigError
from llmload.core.schedule import is_measured
from llmload.options import option_value

#: the distributions a spec may name, and how many numbers each takes
_DISTRIBUTIONS = {"fixed": 1, "exp": 1, "uniform": 2}


@dataclass(frozen=True)
class CancelAfter:
    """When a cancelled request is cancelled: seconds (``tokens`` False) or stream events, from a distribution."""

    distribution: str
    args: tuple[float, ...]
    tokens: bool = False

    @classmethod
    def parse(cls, text: str, flag: str = "--cancel-after", tokens_allowed: bool = True) -> CancelAfter:
        """A spec (module docstring); :class:`ConfigError`, naming ``flag``, says what a bad one should look like.
        ``tokens_allowed`` False: seconds only (``--tool-latency``)."""
        spec = text.strip()
        tokens = tokens_allowed and spec.startswith("tokens:")
        if tokens:
            spec = spec[len("tokens:"):]
        parts = spec.split(":")
        name, numbers = ("fixed", parts) if len(parts) == 1 else (parts[0], parts[1:])
        try:
            args = tuple(float(n) for n in numbers)
        except ValueError:
            args = ()
        if (name not in _DISTRIBUTIONS or len(args) != _DISTRIBUTIONS[name] or any(a < 0 for a in args)
                or (name == "uniform" and args[0] > args[1]) or (name == "exp" and args[0] <= 0)):
            if not tokens_allowed:
                raise ConfigError(f"{flag} {text!r}: expected SECONDS, exp:MEAN or uniform:LOW:HIGH")
            raise ConfigError(f"{flag} {text!r}: expected SECONDS, exp:MEAN, uniform:LOW:HIGH, or tokens: "
                              "before any of them (tokens:50, tokens:uniform:10:200)")
        return cls(name, args, tokens)

    def sample(self, rng: random.Random) -> float:
        if self.distribution == "exp":
            return rng.expovariate(1.0 / self.args[0])
        if self.distribution == "uniform":
            return rng.uniform(*self.args)
        return self.args[0]


@dataclass(frozen=True)
class CancelPlan:
    """Which requests are cancelled, and when: :meth:`draw` per request id."""

    rate: float
    after: CancelAfter
    seed: int = 0

    def draw(self, request_id: str) -> tuple[float | None, int | None]:
        """``(seconds, None)`` or ``(None, stream events)`` for a request to cancel, ``(None, None)`` for one
        that runs to its end."""
        if not is_measured(request_id):
            return None, None  # the initial test, warm-ups and probes check the server: never cancelled
        rng = random.Random(f"llmload-cancel:{self.seed}:{request_id}")
        if rng.random() >= self.rate:
            return None, None
        value = self.after.sample(rng)
        return (None, max(1, round(value))) if self.after.tokens else (value, None)


def cancel_plan(rate: float | None, after: str | None, seed: int) -> CancelPlan | None:
    """The run's plan from ``--cancel-rate`` and ``--cancel-after`` (None: nothing is cancelled)."""
    if not rate:
        if after:
            raise ConfigError("--cancel-after needs --cancel-rate P (the share of requests to cancel)")
        return None
    if not 0.0 < rate <= 1.0:
        raise ConfigError(f"--cancel-rate must be in (0, 1], got {rate:g}")
    if not after:
        raise ConfigError("--cancel-rate needs --cancel-after SECONDS|tokens:N (when to cancel)")
    return CancelPlan(float(rate), CancelAfter.parse(after), int(seed))


def cancel_plan_from(options: Any) -> CancelPlan | None:
    """:func:`cancel_plan` of a run's parsed options (bench's or Locust's: the same table)."""
    return cancel_plan(option_value(options, "cancel_rate"), option_value(options, "cancel_after"),
                       int(option_value(options, "seed")))
