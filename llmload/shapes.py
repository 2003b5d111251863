"""Load shapes over time: the open-loop request rate or the closed-loop user count as a function of time.

A shape is a small frozen value object with ``value(t)`` (requests/s or users at ``t`` seconds),
``cumulative(t)`` (the integral of ``value`` from 0 to ``t``), ``duration`` and ``spec()`` (the compact
string that parses back to an equal shape). Four kinds:

    steps   value jumps to each level at its time and holds it
    ramp    linear from one value to another, then holds the end value
    spike   a base value with one rectangular spike
    sine    a diurnal cycle: mean - amplitude * cos(2π (t + phase) / period), starting at the trough

Spec grammar (``--rate-shape`` / ``--user-shape``; spaces are ignored; TIME is seconds, or a number
with an ``s``, ``m`` or ``h`` suffix)::

    SPEC   := KIND ":" BODY ";" "duration=" TIME
    steps  :  VALUE "@" TIME ("," VALUE "@" TIME)*          the first TIME is 0, times increase
    ramp   :  FROM "->" TO ["@" TIME]                       reach TO at TIME (default: at the end)
    spike  :  "base=" B "," "peak=" P "," "at=" TIME "," "width=" TIME
    sine   :  "mean=" M "," "amplitude=" A "," "period=" TIME ["," "phase=" TIME]

    steps:10@0,20@30,40@60;duration=90
    ramp:1->50;duration=120            ramp:1->50@60;duration=5m
    spike:base=5,peak=50,at=30,width=10;duration=90
    sine:mean=10,amplitude=5,period=60;duration=300

A JSON file holds the same fields: ``{"shape": "steps", "steps": [[10, 0], [20, 30]], "duration": 90}``
(``[value, at]`` pairs or ``{"value", "at"}`` objects), ``{"shape": "ramp", "from": 1, "to": 50,
"over": 60, "duration": 120}``, ``{"shape": "spike", "base": 5, "peak": 50, "at": 30, "width": 10,
"duration": 90}``, ``{"shape": "sine", "mean": 10, "amplitude": 5, "period": 60, "phase": 0,
"duration": 300}``. :func:`parse_shape` takes either (a path to an existing file, or text starting
with ``{``). Every mistake is a :class:`~llmload.errors.ConfigError` naming the bad part.

Open loop: :func:`rate_offsets` draws send offsets whose instantaneous rate follows the shape — a
non-homogeneous Poisson process by time rescaling: unit-mean gaps ``e_i`` are summed into
``u_k = e_1 + ... + e_k`` and sent at ``t_k = Λ⁻¹(u_k)``, where ``Λ = cumulative``, for every
``u_k < Λ(duration)``. The gaps are Exp(1) for burstiness 1 and Gamma(b, 1/b) otherwise (a gamma renewal
process in rescaled time; b < 1 is burstier), like vLLM's ``--burstiness``.

Closed loop: :func:`user_shape_class` makes a Locust ``LoadTestShape`` whose user count follows the shape.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from llmload.errors import ConfigError

SHAPE_KINDS = ("steps", "ramp", "spike", "sine")

_TIME_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}
_BISECT_STEPS = 64


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


# ---------------------------------------------------------------------------------------------- parsing


def parse_time(text: str, what: str) -> float:
    """``"90"``, ``"90s"``, ``"1.5m"``, ``"2h"`` -> seconds; ConfigError naming ``what`` otherwise."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([smh]?)\s*", str(text))
    if not m:
        raise ConfigError(f"{what}: {text!r} is not a time in seconds (like 90, 90s, 5m, 1h)")
    return float(m.group(1)) * _TIME_UNITS[m.group(2)]


def _number(text: str, what: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise ConfigError(f"{what}: {text!r} is not a number") from None
    if not math.isfinite(x):
        raise ConfigError(f"{what}: {text!r} is not a finite number")
    return x


def _keyvals(
    body: str, kind: str, required: tuple[str, ...], optional: tuple[str, ...] = ()
) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in body.split(","):
        if "=" not in part:
            raise ConfigError(
                f"{kind} shape: {part!r} is not KEY=VALUE (keys: {', '.join(required + optional)})"
            )
        key, value = (s.strip() for s in part.split("=", 1))
        if key not in required + optional:
            raise ConfigError(f"{kind} shape: unknown key {key!r} (keys: {', '.join(required + optional)})")
        if key in out:
            raise ConfigError(f"{kind} shape: {key!r} given twice")
        out[key] = value
    missing = [k for k in required if k not in out]
    if missing:
        raise ConfigError(f"{kind} shape: missing {', '.join(k + '=' for k in missing)}")
    return out


def parse_spec(spec: str) -> Shape:
    """A shape from its compact string (grammar in the module docstring)."""
    text = "".join(str(spec).split())
    kind, sep, rest = text.partition(":")
    if not sep or kind not in SHAPE_KINDS:
        raise ConfigError(
            f"shape {spec!r}: expected KIND:...;duration=SECONDS with KIND one of {', '.join(SHAPE_KINDS)}"
        )
    parts = rest.split(";")
    body, options = parts[0], parts[1:]
    duration: float | None = None
    for option in options:
        key, eq, value = option.partition("=")
        if key != "duration" or not eq:
            raise ConfigError(
                f"{kind} shape: unknown option {option!r} after ';' (expected duration=SECONDS)"
            )
        duration = parse_time(value, f"{kind} shape: duration")
    if duration is None:
        raise ConfigError(f"{kind} shape: missing ';duration=SECONDS' in {spec!r}")
    if not body:
        raise ConfigError(f"{kind} shape: nothing after '{kind}:'")
    if kind == "steps":
        levels = []
        for i, step in enumerate(body.split(","), start=1):
            value, at_sign, at = step.partition("@")
            if not at_sign:
                raise ConfigError(f"steps shape: step {i} {step!r} is not VALUE@TIME")
            levels.append(
                (
                    _number(value, f"steps shape: step {i} value"),
                    parse_time(at, f"steps shape: step {i} time"),
                )
            )
        return Steps(tuple(levels), duration)
    if kind == "ramp":
        start, arrow, end = body.partition("->")
        if not arrow:
            raise ConfigError(f"ramp shape: {body!r} is not FROM->TO[@TIME]")
        end, at_sign, over = end.partition("@")
        return Ramp(
            _number(start, "ramp shape: FROM"),
            _number(end, "ramp shape: TO"),
            duration,
            parse_time(over, "ramp shape: @TIME") if at_sign else None,
        )
    if kind == "spike":
        kv = _keyvals(body, kind, ("base", "peak", "at", "width"))
        return Spike(
            _number(kv["base"], "spike shape: base"),
            _number(kv["peak"], "spike shape: peak"),
            parse_time(kv["at"], "spike shape: at"),
            parse_time(kv["width"], "spike shape: width"),
            duration,
        )
    kv = _keyvals(body, kind, ("mean", "amplitude", "period"), ("phase",))
    return Sine(
        _number(kv["mean"], "sine shape: mean"),
        _number(kv["amplitude"], "sine shape: amplitude"),
        parse_time(kv["period"], "sine shape: period"),
        duration,
        parse_time(kv["phase"], "sine shape: phase") if "phase" in kv else 0.0,
    )


def _json_number(
    obj: dict[str, Any], key: str, kind: str, where: str, *, required: bool = True
) -> float | None:
    if key not in obj:
        if required:
            raise ConfigError(f"{where}: {kind} shape needs key {key!r}")
        return None
    x = obj[key]
    if isinstance(x, str):
        return parse_time(x, f"{where}: key {key!r}")
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise ConfigError(f"{where}: key {key!r} must be a number, got {x!r}")
    return float(x)


def shape_from_dict(obj: Any, where: str = "shape") -> Shape:
    """A shape from its JSON object form (see the module docstring); ``where`` names the source in errors."""
    if not isinstance(obj, dict):
        raise ConfigError(f"{where}: expected a JSON object with a 'shape' key")
    kind = obj.get("shape")
    if kind not in SHAPE_KINDS:
        raise ConfigError(f"{where}: key 'shape' must be one of {', '.join(SHAPE_KINDS)}, got {kind!r}")
    allowed = {
        "steps": {"steps"},
        "ramp": {"from", "to", "over"},
        "spike": {"base", "peak", "at", "width"},
        "sine": {"mean", "amplitude", "period", "phase"},
    }[kind] | {"shape", "duration"}
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))} for a {kind} shape")

    def num(key: str, required: bool = True) -> Any:
        return _json_number(obj, key, kind, where, required=required)

    duration = num("duration")
    if kind == "steps":
        raw = obj.get("steps")
        if not isinstance(raw, list) or not raw:
            raise ConfigError(f"{where}: key 'steps' must be a non-empty list of [value, at] pairs")
        levels = []
        for i, step in enumerate(raw, start=1):
            if isinstance(step, dict) and set(step) == {"value", "at"}:
                pair = [step["value"], step["at"]]
            elif isinstance(step, list) and len(step) == 2:
                pair = step
            else:
                raise ConfigError(
                    f"{where}: steps[{i - 1}] must be [value, at] or {{'value', 'at'}}, got {step!r}"
                )
            v = _json_number({"value": pair[0]}, "value", kind, f"{where}: steps[{i - 1}]")
            a = _json_number({"at": pair[1]}, "at", kind, f"{where}: steps[{i - 1}]")
            levels.append((v, a))
        return Steps(tuple(levels), duration)
    if kind == "ramp":
        return Ramp(num("from"), num("to"), duration, num("over", required=False))
    if kind == "spike":
        return Spike(num("base"), num("peak"), num("at"), num("width"), duration)
    phase = num("phase", required=False)
    return Sine(num("mean"), num("amplitude"), num("period"), duration, 0.0 if phase is None else phase)


def parse_shape(text: str | Path, flag: str = "shape") -> Shape:
    """A shape from a spec string, inline JSON, or a JSON file; errors are prefixed with ``flag``."""
    raw = str(text).strip()
    try:
        if raw.startswith("{"):
            try:
                return shape_from_dict(json.loads(raw), where=f"{flag} (inline JSON)")
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{flag}: invalid JSON at column {exc.colno}: {exc.msg}") from None
        path = Path(raw).expanduser()
        if raw.endswith(".json") or (":" not in raw and path.exists()):
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except FileNotFoundError:
                raise ConfigError(f"{flag}: shape file not found: {path}") from None
            except (OSError, UnicodeDecodeError) as exc:
                raise ConfigError(f"{flag}: cannot read shape file {path}: {exc}") from None
            except json.JSONDecodeError as exc:
                raise ConfigError(
                    f"{flag}: {path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
                ) from None
            return shape_from_dict(data, where=str(path))
        return parse_spec(raw)
    except ConfigError as exc:
        message = str(exc)
        raise ConfigError(message if message.startswith(flag) else f"{flag} {raw!r}: {message}") from None


# ---------------------------------------------------------------------------------------------- open loop


def invert_cumulative(shape: Shape, u: np.ndarray) -> np.ndarray:
    """Times ``t`` in [0, duration] with ``cumulative(t) = u`` (vectorized bisection, ~1e-19 relative)."""
    u = np.asarray(u, dtype=np.float64)
    lo = np.zeros_like(u)
    hi = np.full_like(u, shape.duration)
    for _ in range(_BISECT_STEPS):
        mid = 0.5 * (lo + hi)
        below = shape.cumulative(mid) < u
        lo = np.where(below, mid, lo)
        hi = np.where(below, hi, mid)
    return hi


def rate_offsets(
    shape: Shape, rng: np.random.RandomState | np.random.Generator, burstiness: float = 1.0
) -> np.ndarray:
    """Open-loop send offsets (seconds, increasing, within the duration) whose rate follows ``shape``.

    Time rescaling (module docstring): unit-mean gaps Gamma(b, 1/b) in ``Λ``-time, mapped back through
    ``Λ⁻¹``. The count is random, with mean ``cumulative(duration)``. Deterministic for a seeded ``rng``.
    """
    if math.isnan(burstiness) or burstiness <= 0:
        raise ConfigError(f"--burstiness must be > 0, got {burstiness}")
    total = float(shape.cumulative(shape.duration))
    if total <= 0:
        return np.zeros(0)
    chunk = max(64, int(total + 6 * math.sqrt(total / min(burstiness, 1.0)) + 16))
    marks: list[np.ndarray] = []
    last = 0.0
    while True:
        gaps = rng.gamma(shape=burstiness, scale=1.0 / burstiness, size=chunk)
        u = last + np.cumsum(gaps)
        marks.append(u[u < total])
        if u[-1] >= total:
            break
        last = float(u[-1])
    u = np.concatenate(marks)
    return invert_cumulative(shape, u)


# ---------------------------------------------------------------------------------------------- closed loop


def user_shape_class(shape: Shape, spawn_rate: float | None = None) -> type:
    """A Locust ``LoadTestShape`` subclass whose user count is ``round(shape.value(run_time))``.

    ``tick()`` returns ``(users, spawn_rate)`` until ``shape.duration``, then ``None`` (the test stops).
    ``spawn_rate`` (users/s) defaults to the shape's peak per second, so any level is reached in about
    a second. Locust is imported here, not at module import (it monkey-patches with gevent).
    """
    from locust import LoadTestShape

    if spawn_rate is None:
        spawn_rate = max(1.0, shape.peak())
    if not (spawn_rate > 0 and math.isfinite(spawn_rate)):
        raise ConfigError(f"--spawn-rate must be > 0, got {spawn_rate}")
    rate = float(spawn_rate)

    class ShapeFromSpec(LoadTestShape):
        llm_shape = shape
        """The shape this class follows."""
        llm_spawn_rate = rate

        def tick(self) -> tuple[int, float] | None:
            run_time = self.get_run_time()
            if run_time >= shape.duration:
                return None
            return round(shape.value(run_time)), rate

    ShapeFromSpec.__name__ = ShapeFromSpec.__qualname__ = f"{shape.kind.capitalize()}Shape"
    ShapeFromSpec.__doc__ = f"User count following {shape.spec()}."
    return ShapeFromSpec
