"""The ramp-up keys of today's ``vllm bench serve`` result: the ramp's options and ``rps_change_events``, one
``{"rps": int, "timestamp": ISO time}`` per whole rate the ramp reached, the first at the run's start
(docs/vllm-compat.md). A request's rate is the one the schedule drew its gap from
(:func:`llmload.core.arrivals.request_rates`); its moment the intended send."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from llmload.core.arrivals import request_rates
from llmload.core.schedule import ScheduleSpec


def ramp_keys(spec: ScheduleSpec) -> dict[str, Any]:
    """``ramp_up_strategy``, ``ramp_up_start_rps``, ``ramp_up_end_rps``: only for a ramp-up run, as vLLM."""
    if spec.ramp_up_strategy is None:
        return {}
    return {"ramp_up_strategy": spec.ramp_up_strategy, "ramp_up_start_rps": _whole(spec.ramp_up_start_rps),
            "ramp_up_end_rps": _whole(spec.ramp_up_end_rps)}


def _whole(rate: float | None) -> float | int | None:
    """vLLM's ramp rates are integers: a whole rate is written as one."""
    return int(rate) if rate is not None and float(rate).is_integer() else rate


def rps_change_events(spec: ScheduleSpec, offsets_s: Sequence[float], start_wall: float) -> list[dict[str, Any]]:
    """The whole rates the ramp passed, each with the wall-clock moment of the first request sent at it
    (``offsets_s``: the schedule's send offsets, in order; ``start_wall``: the run's start, ``time.time()``).
    Several whole rates crossed by one request share its moment, as in vLLM. Empty without a ramp-up."""
    if spec.ramp_up_strategy is None or not offsets_s:
        return []
    rates = request_rates(len(offsets_s), spec.request_rate, ramp_up_strategy=spec.ramp_up_strategy,
                          ramp_up_start_rps=spec.ramp_up_start_rps, ramp_up_end_rps=spec.ramp_up_end_rps)
    last = int(rates[0])
    events = [{"rps": last, "timestamp": datetime.fromtimestamp(start_wall).isoformat()}]
    for offset, rate in zip(offsets_s, rates, strict=True):
        if int(rate) > last:
            moment = datetime.fromtimestamp(start_wall + offset).isoformat()
            events += [{"rps": r, "timestamp": moment} for r in range(last + 1, int(rate) + 1)]
            last = int(rate)
    return events
