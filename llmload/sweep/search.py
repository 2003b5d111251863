"""The search for the highest load that meets an SLO: bracket, then bisect (docs/sweep.md, "The search").

Pure bookkeeping, no I/O: the runner asks :meth:`Bisection.next_load`, runs that point, and tells
:meth:`Bisection.record` whether it met the goodput target. Goodput is taken to fall as load rises; a noisy
point that passes above a miss is kept in the table but never moves the bracket (``lower`` is always the
highest pass *below* the lowest miss).

Bracketing starts at ``start``: a pass doubles the load until a miss (or ``cap``), a miss halves it until a
pass (or below ``floor``: no load meets the SLO). Bisection then halves the bracket until its width is at most
the precision (absolute, or relative to the bracket's upper end). A point the client limited, or one the
server was saturated at, counts as a miss: a sweep never takes it as the answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

#: why a point counts as a miss
MISS_SLO, MISS_SATURATION, MISS_CLIENT = "slo", "saturation", "client"


@dataclass(frozen=True)
class Precision:
    """``--precision``: ``0.5`` (absolute, in req/s or users) or ``10%`` (of the bracket's upper end)."""

    value: float
    relative: bool

    @classmethod
    def parse(cls, text: str) -> Precision:
        text = text.strip()
        relative = text.endswith("%")
        try:
            value = float(text[:-1] if relative else text)
        except ValueError:
            raise ValueError(f"expected a number or a percentage such as 10%, got {text!r}") from None
        if not value > 0 or math.isinf(value) or (relative and value >= 100):
            raise ValueError(f"must be > 0 (and a percentage below 100%), got {text!r}")
        return cls(value / 100 if relative else value, relative)

    def width_at(self, upper: float) -> float:
        """The widest bracket accepted when its upper end is ``upper``."""
        return self.value * upper if self.relative else self.value

    def __str__(self) -> str:
        return f"{self.value * 100:g}%" if self.relative else f"{self.value:g}"


@dataclass(frozen=True)
class Trial:
    """One point's verdict: its load, whether it met the target, and why not."""

    load: float
    met: bool
    index: int
    why_missed: str = ""


@dataclass(frozen=True)
class Answer:
    """The highest load that met the target (``value``; None when none did) and its bracket."""

    dimension: str
    value: float | None
    lower: float | None
    upper: float | None
    lower_point: int | None
    upper_point: int | None
    precision: str | None
    #: what ended the bracket above: a missed SLO, saturation, the client, or the highest load allowed
    limited_by: str | None
    reason: str = ""

    @property
    def met(self) -> bool:
        return self.value is not None

    def to_dict(self) -> dict[str, Any]:
        return {"dimension": self.dimension, "value": self.value, "met": self.met, "lower": self.lower,
                "upper": self.upper, "lower_point": self.lower_point, "upper_point": self.upper_point,
                "precision": self.precision, "limited_by": self.limited_by, "reason": self.reason}


def bracket(trials: list[Trial]) -> tuple[Trial | None, Trial | None]:
    """``(highest pass below the lowest miss, lowest miss)``; either may be None."""
    misses = [t for t in trials if not t.met]
    upper = min(misses, key=lambda t: t.load) if misses else None
    passes = [t for t in trials if t.met and (upper is None or t.load < upper.load)]
    lower = max(passes, key=lambda t: t.load) if passes else None
    return lower, upper


def answer_from(trials: list[Trial], dimension: str, precision: Precision | None = None,
                capped: bool = False) -> Answer:
    """The answer the trials so far give (a list sweep's, or a search's when it stops)."""
    lower, upper = bracket(trials)
    limited_by = upper.why_missed if upper is not None else ("max_load" if capped else None)
    return Answer(dimension, lower.load if lower else None, lower.load if lower else None,
                  upper.load if upper else None, lower.index if lower else None, upper.index if upper else None,
                  str(precision) if precision is not None else None, limited_by)


@dataclass
class Bisection:
    """The search's state (module docstring). ``integer``: concurrencies (whole users, width 1 at best)."""

    start: float
    precision: Precision
    floor: float
    cap: float
    max_points: int
    integer: bool = False
    trials: list[Trial] = field(default_factory=list)
    #: why the search stopped (set when :meth:`next_load` returns None)
    stopped: str = ""

    def record(self, trial: Trial) -> None:
        self.trials.append(trial)

    def next_load(self) -> float | None:
        """The next load to run, or None when the search is over (``stopped`` says why)."""
        if not self.trials:
            return self._tidy(self.start)
        if len(self.trials) >= self.max_points:
            return self._stop(f"reached --max-points {self.max_points}")
        lower, upper = bracket(self.trials)
        if upper is None:
            assert lower is not None
            doubled = lower.load * 2 if lower.load > 0 else 1.0
            # within the precision of the cap is the cap: never two points a rounding apart
            near_cap = self.cap - doubled <= self.precision.width_at(self.cap)
            up = self._tidy(self.cap if near_cap else doubled)
            if up <= lower.load:  # the cap, tidied, is where the last pass already was
                return self._stop(f"even the highest load allowed ({self._tidy(self.cap):g}) met the target")
            return up
        if lower is None:
            down = math.floor(upper.load / 2) if self.integer else upper.load / 2
            if down < self.floor or down <= 0:
                return self._stop(f"no load met the target (the lowest tried, {upper.load:g}, missed)")
            return self._tidy(down)
        width = upper.load - lower.load
        if width <= self.precision.width_at(upper.load) or (self.integer and width <= 1):
            return self._stop(f"the bracket {lower.load:g}..{upper.load:g} is within the precision {self.precision}")
        mid = (lower.load + upper.load) / 2
        return self._tidy(math.floor(mid) if self.integer else mid)

    def answer(self, dimension: str) -> Answer:
        # limited by the highest load allowed only when the search got there (not when --max-points ended it)
        lower, upper = bracket(self.trials)
        capped = upper is None and lower is not None and lower.load >= self._tidy(self.cap)
        found = answer_from(self.trials, dimension, self.precision, capped=capped)
        return Answer(**{**found.__dict__, "reason": self.stopped})

    def _stop(self, why: str) -> None:
        self.stopped = why
        return None

    def _tidy(self, load: float) -> float:
        """Integers for concurrencies; rates to 4 significant digits (readable file names, no 3.3333333)."""
        if self.integer:
            return float(max(1, round(load)))
        return float(f"{load:.4g}")
