"""The four shape kinds as frozen value objects: ``value``, ``cumulative``, ``peak``, ``spec``.

Each validates itself on construction (a :class:`~llmload.common.errors.ConfigError` naming the bad field), so a
shape built from a spec, a JSON file or Python code is always usable. The grammar is in :mod:`llmload.shapes`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from llmload.common.errors import ConfigError

SHAPE_KINDS = ("steps", "ramp", "spike", "sine")


def _fmt(x: float) -> str:
    """Shortest text that parses back to the same float."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else repr(float(x))


class Shape:
    """Base of the shapes: ``value``, ``cumulative``, ``duration``, ``spec``."""

    kind: ClassVar[str] = ""
    duration: float

    def value(self, t: float) -> float:
        """The rate (requests/s) or user count at ``t`` seconds."""
        return float(self.values(np.asarray([t], dtype=np.float64))[0])

    def values(self, t: np.ndarray) -> np.ndarray:
        """``value`` at each of the times in ``t`` (vectorized)."""
        raise NotImplementedError

    def cumulative(self, t: np.ndarray | float) -> np.ndarray:
        """∫₀ᵗ value(s) ds, vectorized: the expected number of requests by ``t`` for a rate shape."""
        raise NotImplementedError

    def peak(self) -> float:
        """The largest value the shape takes."""
        raise NotImplementedError

    def spec(self) -> str:
        """The compact string form; ``parse_shape(shape.spec()) == shape``."""
        raise NotImplementedError

    def _check_duration(self) -> None:
        if not (math.isfinite(self.duration) and self.duration > 0):
            raise ConfigError(f"{self.kind} shape: duration must be > 0 seconds, got {self.duration}")


def _check_value(kind: str, name: str, x: float) -> None:
    if not (math.isfinite(x) and x >= 0):
        raise ConfigError(f"{kind} shape: {name} must be a finite number >= 0, got {x}")


@dataclass(frozen=True)
class Steps(Shape):
    """Piecewise constant: ``levels[i][0]`` from ``levels[i][1]`` seconds until the next step."""

    kind: ClassVar[str] = "steps"
    levels: tuple[tuple[float, float], ...]
    """``(value, at)`` pairs, ``at`` strictly increasing from 0."""
    duration: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "levels", tuple((float(v), float(a)) for v, a in self.levels))
        self._check_duration()
        if not self.levels:
            raise ConfigError("steps shape: needs at least one VALUE@TIME step")
        if self.levels[0][1] != 0:
            raise ConfigError(f"steps shape: the first step must be at 0, got @{_fmt(self.levels[0][1])}")
        for i, (v, a) in enumerate(self.levels):
            _check_value("steps", f"step {i + 1} value", v)
            if i and not a > self.levels[i - 1][1]:
                raise ConfigError(f"steps shape: step {i + 1} time {_fmt(a)} must be after the previous one")
            if a >= self.duration:
                raise ConfigError(
                    f"steps shape: step {i + 1} at {_fmt(a)} s is not before duration {_fmt(self.duration)}"
                )

    def values(self, t: np.ndarray) -> np.ndarray:
        at = np.asarray([a for _, a in self.levels])
        level = np.asarray([v for v, _ in self.levels])
        idx = np.searchsorted(at, np.asarray(t, dtype=np.float64), side="right") - 1
        return level[np.clip(idx, 0, len(at) - 1)]

    def _knots(self) -> tuple[np.ndarray, np.ndarray]:
        at = [a for _, a in self.levels] + [self.duration]
        area = [0.0]
        for (v, a), end in zip(self.levels, at[1:], strict=True):
            area.append(area[-1] + v * (end - a))
        return np.asarray(at), np.asarray(area)

    def cumulative(self, t: np.ndarray | float) -> np.ndarray:
        x, y = self._knots()
        t = np.asarray(t, dtype=np.float64)
        # beyond the duration the last level holds
        return np.interp(t, x, y) + np.maximum(t - self.duration, 0.0) * self.levels[-1][0]

    def peak(self) -> float:
        return max(v for v, _ in self.levels)

    def spec(self) -> str:
        body = ",".join(f"{_fmt(v)}@{_fmt(a)}" for v, a in self.levels)
        return f"steps:{body};duration={_fmt(self.duration)}"


@dataclass(frozen=True)
class Ramp(Shape):
    """Linear from ``start`` at 0 to ``end`` at ``over`` seconds (default: the duration), then ``end``."""

    kind: ClassVar[str] = "ramp"
    start: float
    end: float
    duration: float
    over: float | None = None

    def __post_init__(self) -> None:
        self._check_duration()
        _check_value("ramp", "FROM", self.start)
        _check_value("ramp", "TO", self.end)
        if self.over is not None and not (0 < self.over <= self.duration):
            raise ConfigError(
                f"ramp shape: @TIME (ramp length) must be in (0, duration={_fmt(self.duration)}], got {self.over}"
            )

    @property
    def ramp_s(self) -> float:
        return self.duration if self.over is None else self.over

    def values(self, t: np.ndarray) -> np.ndarray:
        frac = np.clip(np.asarray(t, dtype=np.float64) / self.ramp_s, 0.0, 1.0)
        return self.start + (self.end - self.start) * frac

    def cumulative(self, t: np.ndarray | float) -> np.ndarray:
        t = np.asarray(t, dtype=np.float64)
        r = np.clip(t, 0.0, self.ramp_s)
        slope = (self.end - self.start) / self.ramp_s
        return self.start * r + 0.5 * slope * r * r + self.end * np.maximum(t - self.ramp_s, 0.0)

    def peak(self) -> float:
        return max(self.start, self.end)

    def spec(self) -> str:
        over = "" if self.over is None else f"@{_fmt(self.over)}"
        return f"ramp:{_fmt(self.start)}->{_fmt(self.end)}{over};duration={_fmt(self.duration)}"


@dataclass(frozen=True)
class Spike(Shape):
    """``base``, except ``peak`` during ``[at, at + width)``."""

    kind: ClassVar[str] = "spike"
    base: float
    peak_value: float
    at: float
    width: float
    duration: float

    def __post_init__(self) -> None:
        self._check_duration()
        _check_value("spike", "base", self.base)
        _check_value("spike", "peak", self.peak_value)
        if not (0 <= self.at < self.duration):
            raise ConfigError(f"spike shape: at={self.at} must be in [0, duration={_fmt(self.duration)})")
        if not (self.width > 0 and math.isfinite(self.width)):
            raise ConfigError(f"spike shape: width must be > 0 seconds, got {self.width}")

    def values(self, t: np.ndarray) -> np.ndarray:
        t = np.asarray(t, dtype=np.float64)
        inside = (t >= self.at) & (t < self.at + self.width)
        return np.where(inside, self.peak_value, self.base)

    def cumulative(self, t: np.ndarray | float) -> np.ndarray:
        t = np.asarray(t, dtype=np.float64)
        in_spike = np.clip(t, self.at, self.at + self.width) - self.at
        return self.base * t + (self.peak_value - self.base) * in_spike

    def peak(self) -> float:
        return max(self.base, self.peak_value)

    def spec(self) -> str:
        return (
            f"spike:base={_fmt(self.base)},peak={_fmt(self.peak_value)},at={_fmt(self.at)},"
            f"width={_fmt(self.width)};duration={_fmt(self.duration)}"
        )


@dataclass(frozen=True)
class Sine(Shape):
    """``mean - amplitude * cos(2π (t + phase) / period)``: a day-night cycle starting at the trough."""

    kind: ClassVar[str] = "sine"
    mean: float
    amplitude: float
    period: float
    duration: float
    phase: float = 0.0

    def __post_init__(self) -> None:
        self._check_duration()
        _check_value("sine", "mean", self.mean)
        _check_value("sine", "amplitude", self.amplitude)
        if self.amplitude > self.mean:
            raise ConfigError(
                f"sine shape: amplitude={_fmt(self.amplitude)} must not exceed mean={_fmt(self.mean)} "
                "(the value would go negative)"
            )
        if not (self.period > 0 and math.isfinite(self.period)):
            raise ConfigError(f"sine shape: period must be > 0 seconds, got {self.period}")
        if not math.isfinite(self.phase):
            raise ConfigError(f"sine shape: phase must be a number of seconds, got {self.phase}")

    def values(self, t: np.ndarray) -> np.ndarray:
        w = 2 * math.pi / self.period
        return self.mean - self.amplitude * np.cos(w * (np.asarray(t, dtype=np.float64) + self.phase))

    def cumulative(self, t: np.ndarray | float) -> np.ndarray:
        w = 2 * math.pi / self.period
        t = np.asarray(t, dtype=np.float64)
        return self.mean * t - (self.amplitude / w) * (
            np.sin(w * (t + self.phase)) - math.sin(w * self.phase)
        )

    def peak(self) -> float:
        return self.mean + self.amplitude

    def spec(self) -> str:
        phase = f",phase={_fmt(self.phase)}" if self.phase else ""
        return (
            f"sine:mean={_fmt(self.mean)},amplitude={_fmt(self.amplitude)},period={_fmt(self.period)}"
            f"{phase};duration={_fmt(self.duration)}"
        )
