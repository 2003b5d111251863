"""The spread of a setting's trials (``--trials N``): the same sweep run N times, summarised as the range and
mean of its answer and of each load's numbers. Points are matched across trials by their load (rate or
concurrency), so a list sweep's points line up; a search's points line up where the trials tried the same
load. Keys: ``settings.json``'s ``spread`` (docs/sweep.md, "Server settings")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: the row numbers whose spread is reported, and where each comes from in a sweep.json row
_FIELDS = {
    "output_throughput": ("output_throughput",),
    "request_throughput": ("request_throughput",),
    "ttft_median_ms": ("ttft_ms", "median"),
    "tpot_median_ms": ("tpot_ms", "median"),
    "goodput": ("goodput",),
}


def summary(values: Sequence[float]) -> dict[str, Any]:
    """``{n, mean, min, max}`` of some numbers (None for an empty list)."""
    return {"n": len(values), "mean": sum(values) / len(values) if values else None,
            "min": min(values) if values else None, "max": max(values) if values else None}


def _value(row: Mapping[str, Any], path: tuple[str, ...]) -> float | None:
    value: Any = row
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def spread(sweeps: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The trials' spread: the answer over the trials that met (``met``: any did), the best output tokens/s of
    any point, and per load the numbers of :data:`_FIELDS` over the trials that ran it."""
    answers = [float(a["value"]) for d in sweeps if (a := d.get("answer")) and a.get("met")]
    by_load: dict[tuple[Any, Any, Any], list[Mapping[str, Any]]] = {}
    for data in sweeps:
        for row in data.get("points") or []:
            key = (row.get("role"), row.get("request_rate"), row.get("max_concurrency"))
            by_load.setdefault(key, []).append(row)
    points = []
    for (role, rate, concurrency), rows in by_load.items():
        point: dict[str, Any] = {"role": role, "request_rate": rate, "max_concurrency": concurrency,
                                 "trials": len(rows)}
        for name, path in _FIELDS.items():
            point[name] = summary([v for r in rows if (v := _value(r, path)) is not None])
        points.append(point)
    best = [v for d in sweeps for r in d.get("points") or [] if (v := _value(r, ("output_throughput",))) is not None]
    return {"trials": len(sweeps), "answer": {"met": bool(answers), **summary(answers)},
            "best_output_throughput": max(best) if best else None, "points": points}
