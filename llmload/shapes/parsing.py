"""Shapes from text: the compact spec grammar, the JSON object form, and files holding either.

The grammar and the JSON fields are in :mod:`llmload.shapes`. Every mistake is a
:class:`~llmload.common.errors.ConfigError` naming the bad part, prefixed with the flag it came from.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from llmload.common.errors import ConfigError
from llmload.shapes.kinds import SHAPE_KINDS, Ramp, Shape, Sine, Spike, Steps

_TIME_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}


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


# ---------------------------------------------------------------------------------------------- spec strings


def parse_spec(spec: str) -> Shape:
    """A shape from its compact string (grammar in :mod:`llmload.shapes`)."""
    text = "".join(str(spec).split())
    kind, sep, rest = text.partition(":")
    if not sep or kind not in SHAPE_KINDS:
        raise ConfigError(
            f"shape {spec!r}: expected KIND:...;duration=SECONDS with KIND one of {', '.join(SHAPE_KINDS)}"
        )
    body, duration = _body_and_duration(spec, kind, rest)
    if kind == "steps":
        return _steps_spec(body, duration)
    if kind == "ramp":
        return _ramp_spec(body, duration)
    if kind == "spike":
        return _spike_spec(body, duration)
    return _sine_spec(body, duration)


def _body_and_duration(spec: str, kind: str, rest: str) -> tuple[str, float]:
    """Split ``BODY;duration=TIME`` (the text after ``KIND:``) into the body and the duration in seconds."""
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
    return body, duration


def _steps_spec(body: str, duration: float) -> Steps:
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


def _ramp_spec(body: str, duration: float) -> Ramp:
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


def _spike_spec(body: str, duration: float) -> Spike:
    kv = _keyvals(body, "spike", ("base", "peak", "at", "width"))
    return Spike(
        _number(kv["base"], "spike shape: base"),
        _number(kv["peak"], "spike shape: peak"),
        parse_time(kv["at"], "spike shape: at"),
        parse_time(kv["width"], "spike shape: width"),
        duration,
    )


def _sine_spec(body: str, duration: float) -> Sine:
    kv = _keyvals(body, "sine", ("mean", "amplitude", "period"), ("phase",))
    return Sine(
        _number(kv["mean"], "sine shape: mean"),
        _number(kv["amplitude"], "sine shape: amplitude"),
        parse_time(kv["period"], "sine shape: period"),
        duration,
        parse_time(kv["phase"], "sine shape: phase") if "phase" in kv else 0.0,
    )


# ---------------------------------------------------------------------------------------------- JSON


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


def _json_levels(raw: Any, kind: str, where: str) -> tuple[tuple[Any, Any], ...]:
    """The ``steps`` list of a JSON steps shape: ``[value, at]`` pairs or ``{"value", "at"}`` objects."""
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
    return tuple(levels)


def shape_from_dict(obj: Any, where: str = "shape") -> Shape:
    """A shape from its JSON object form (see :mod:`llmload.shapes`); ``where`` names the source in errors."""
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
        return Steps(_json_levels(obj.get("steps"), kind, where), duration)
    if kind == "ramp":
        return Ramp(num("from"), num("to"), duration, num("over", required=False))
    if kind == "spike":
        return Spike(num("base"), num("peak"), num("at"), num("width"), duration)
    phase = num("phase", required=False)
    return Sine(num("mean"), num("amplitude"), num("period"), duration, 0.0 if phase is None else phase)


# ---------------------------------------------------------------------------------------------- entry


def _read_shape_file(path: Path, flag: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{flag}: shape file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{flag}: cannot read shape file {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{flag}: {path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None


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
            return shape_from_dict(_read_shape_file(path, flag), where=str(path))
        return parse_spec(raw)
    except ConfigError as exc:
        message = str(exc)
        raise ConfigError(message if message.startswith(flag) else f"{flag} {raw!r}: {message}") from None
