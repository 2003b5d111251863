"""Per-session numbers, for agentic sessions (``--dataset-name weka_trace``) and conversations (``--multi-turn``)
alike: a session is the records sharing a ``conversation_id``.

Per session:

    calls                    its records; completed: those completed (success, not cut off)
    duration                 last end - first start over its records (a record with no event ends at its start)
    server time              the time at least one of its calls was in flight: the union of its records'
                             [start, end] intervals (sub-agents run beside their parent, so not a sum)
    idle time                duration - server time: tools, think time, the waits between calls
    prompt tokens            over completed calls: the server's ``usage.prompt_tokens`` where given, else the
                             dataset's
    cached tokens            over completed calls reporting ``cached_tokens``; hit rate = cached / prompt tokens
                             of those calls (None for a session where no call reported it)

The traces' own reuse (agentic sessions, whose records carry ``trace_cached_tokens``): over completed calls,
the prompt tokens a never-evicting prefix cache could serve when each trace's calls go out in turn order, over
those calls' dataset prompt tokens: the ideal beside the measured cached share.

A session is *completed* when every call it made completed and (conversations) none was cut off. The
distributions (mean, median, p99; seconds, or a fraction for the hit rate) are over every session that sent
a call. Agentic sessions also get a row per chain type (``agent_type``: ``main`` or the sub-agent's type):
calls, completed, TTFT and E2E (mean, median, p99 over its completed calls), cached fraction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from llmload.metrics.columns import Column
from llmload.metrics.conversation_result import TAIL, distribution_keys
from llmload.metrics.definitions import e2el_s, server_input_tokens, ttft_s
from llmload.metrics.distribution import Distribution
from llmload.metrics.percentiles import linear_percentiles

if TYPE_CHECKING:
    from llmload.metrics.request import MeasuredRequest


@dataclass(slots=True)
class _Session:
    calls: int = 0
    completed: int = 0
    prompt: int = 0
    cached: int = 0
    cache_prompt: int = 0
    reported: int = 0
    ideal: int = 0
    ideal_prompt: int = 0
    intervals: list[tuple[float, float]] = field(default_factory=list)


@dataclass(slots=True)
class _Chain:
    calls: int = 0
    completed: int = 0
    cached: int = 0
    cache_prompt: int = 0
    ttft: Column = field(default_factory=Column)
    e2el: Column = field(default_factory=Column)


@dataclass(frozen=True, slots=True)
class Spread:
    """Mean, median and p99 of one per-session quantity."""

    mean: float
    median: float
    p99: float

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        if not values:
            return cls(0.0, 0.0, 0.0)
        arr = np.asarray(values, dtype=float)
        return cls(float(np.mean(arr)), float(np.median(arr)), float(linear_percentiles(arr, [TAIL])[0]))

    def keys(self, name: str, unit: str = "") -> dict[str, float]:
        suffix = f"_{unit}" if unit else ""
        return {f"mean_{name}{suffix}": self.mean, f"median_{name}{suffix}": self.median,
                f"p99_{name}{suffix}": self.p99}


@dataclass(frozen=True, slots=True)
class ChainStats:
    """The calls of one chain type (``main`` or a sub-agent's type)."""

    agent_type: str
    calls: int
    completed: int
    ttft: Distribution
    e2el: Distribution
    cached_fraction: float | None

    def result_dict(self) -> dict[str, Any]:
        return {"agent_type": self.agent_type, "calls": self.calls, "completed": self.completed,
                **distribution_keys(self.ttft, "ttft"), **distribution_keys(self.e2el, "e2el"),
                "cached_fraction": self.cached_fraction}


@dataclass(frozen=True, slots=True)
class SessionStats:
    """The run's sessions (the module docstring says what each number is)."""

    sessions: int
    completed: int
    calls: int
    calls_completed: int
    duration_s: Spread
    server_time_s: Spread
    idle_time_s: Spread
    calls_per_session: Spread
    prompt_tokens: int
    cached_tokens: int
    #: prompt tokens of the calls that reported cached tokens (what ``cached_fraction`` divides by)
    reported_prompt_tokens: int
    #: per session, over the sessions where some call reported cached tokens
    hit_rate: Spread | None
    chains: tuple[ChainStats, ...] = ()
    #: agentic sessions: the traces' own reuse over the completed calls (from their hash ids), and those calls'
    #: prompt tokens as the dataset built them (None: no call came from such a trace)
    trace_reuse_tokens: int | None = None
    trace_reuse_prompt_tokens: int = 0

    @property
    def trace_reuse_fraction(self) -> float | None:
        if self.trace_reuse_tokens is None or not self.trace_reuse_prompt_tokens:
            return None
        return self.trace_reuse_tokens / self.trace_reuse_prompt_tokens

    @property
    def cached_fraction(self) -> float | None:
        return self.cached_tokens / self.reported_prompt_tokens if self.reported_prompt_tokens else None

    def result_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "sessions": self.sessions, "completed": self.completed, "calls": self.calls,
            "calls_completed": self.calls_completed, **self.duration_s.keys("duration", "s"),
            **self.server_time_s.keys("server_time", "s"), **self.idle_time_s.keys("idle_time", "s"),
            **self.calls_per_session.keys("calls"), "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens, "cached_fraction": self.cached_fraction,
        }
        if self.hit_rate is not None:
            out.update(self.hit_rate.keys("hit_rate"))
        if self.trace_reuse_tokens is not None:
            out["trace_reuse_tokens"] = self.trace_reuse_tokens
            out["trace_reuse_fraction"] = self.trace_reuse_fraction
        if self.chains:
            out["by_chain"] = [c.result_dict() for c in self.chains]
        return out


class SessionTally:
    """Takes every record of a session (``conversation_id`` set); :meth:`result` gives :class:`SessionStats`."""

    def __init__(self) -> None:
        self._sessions: dict[str, _Session] = {}
        self._chains: dict[str, _Chain] = {}

    def __bool__(self) -> bool:
        return bool(self._sessions)

    def add(self, r: MeasuredRequest, completed: bool) -> None:
        s = self._sessions.get(r.conversation_id)
        if s is None:
            s = self._sessions[r.conversation_id] = _Session()
        s.calls += 1
        end = r.end if r.end is not None else r.start
        if r.start or r.end is not None:  # a call cut off before it was sent has neither
            s.intervals.append((r.start, max(end, r.start)))
        chain = None
        if r.agent_type:
            chain = self._chains.get(r.agent_type)
            if chain is None:
                chain = self._chains[r.agent_type] = _Chain()
            chain.calls += 1
        if not completed:
            return
        s.completed += 1
        prompt = server_input_tokens(r)
        s.prompt += prompt
        if r.cached_tokens is not None:
            s.reported += 1
            s.cached += int(r.cached_tokens)
            s.cache_prompt += prompt
        if r.trace_cached_tokens is not None:
            s.ideal += int(r.trace_cached_tokens)
            s.ideal_prompt += r.prompt_len
        if chain is not None:
            chain.completed += 1
            if r.cached_tokens is not None:
                chain.cached += int(r.cached_tokens)
                chain.cache_prompt += prompt
            if (ttft := ttft_s(r)) is not None:
                chain.ttft.append(ttft)
            if (e2el := e2el_s(r)) is not None:
                chain.e2el.append(e2el)

    def result(self) -> SessionStats | None:
        if not self._sessions:
            return None
        sessions = list(self._sessions.values())
        durations, busy = [], []
        for s in sessions:
            span, served = _span_and_busy(s.intervals)
            durations.append(span)
            busy.append(served)
        rates = [s.cached / s.cache_prompt for s in sessions if s.reported and s.cache_prompt]
        return SessionStats(
            sessions=len(sessions), completed=sum(1 for s in sessions if s.calls and s.completed == s.calls),
            calls=sum(s.calls for s in sessions), calls_completed=sum(s.completed for s in sessions),
            duration_s=Spread.of(durations), server_time_s=Spread.of(busy),
            idle_time_s=Spread.of([d - b for d, b in zip(durations, busy, strict=True)]),
            calls_per_session=Spread.of([float(s.calls) for s in sessions]),
            prompt_tokens=sum(s.prompt for s in sessions), cached_tokens=sum(s.cached for s in sessions),
            reported_prompt_tokens=sum(s.cache_prompt for s in sessions),
            hit_rate=Spread.of(rates) if rates else None,
            trace_reuse_tokens=sum(s.ideal for s in sessions) if any(s.ideal_prompt for s in sessions) else None,
            trace_reuse_prompt_tokens=sum(s.ideal_prompt for s in sessions),
            chains=tuple(self._chain_stats(name, c) for name, c in sorted(self._chains.items(),
                                                                          key=lambda kv: (kv[0] != "main", kv[0]))),
        )

    def live_rows(self) -> list[dict[str, Any]] | None:
        """The live tab's session rows: one over every session (``label`` "all"), then one per chain type
        (``label`` its type), each with ``sessions``, ``calls``, ``completed``, ``ttft_p50_ms``, ``ttft_p99_ms``
        and ``cached_fraction``; None before the first session's record."""
        if not self._sessions:
            return None
        sessions = self._sessions.values()
        reported = sum(x.cache_prompt for x in sessions)
        rows = [{"label": "all", "sessions": len(self._sessions),
                 "completed_sessions": sum(1 for x in sessions if x.calls and x.completed == x.calls),
                 "calls": sum(x.calls for x in sessions), "completed": sum(x.completed for x in sessions),
                 "ttft_p50_ms": None, "ttft_p99_ms": None,
                 "cached_fraction": sum(x.cached for x in sessions) / reported if reported else None}]
        for name, c in sorted(self._chains.items(), key=lambda kv: (kv[0] != "main", kv[0])):
            ttft = c.ttft.array()
            p50, p99 = (np.asarray(linear_percentiles(ttft, [50.0, TAIL])) * 1000.0).tolist() if ttft.size else (None, None)
            rows.append({"label": name, "sessions": None, "completed_sessions": None, "calls": c.calls,
                         "completed": c.completed, "ttft_p50_ms": p50, "ttft_p99_ms": p99,
                         "cached_fraction": c.cached / c.cache_prompt if c.cache_prompt else None})
        return rows

    @staticmethod
    def _chain_stats(name: str, c: _Chain) -> ChainStats:
        return ChainStats(name, c.calls, c.completed, Distribution.of(c.ttft.array(), (TAIL,)),
                          Distribution.of(c.e2el.array(), (TAIL,)),
                          c.cached / c.cache_prompt if c.cache_prompt else None)


def _span_and_busy(intervals: list[tuple[float, float]]) -> tuple[float, float]:
    """The whole span of the intervals and the length of their union."""
    if not intervals:
        return 0.0, 0.0
    ordered = sorted(intervals)
    busy, (lo, hi) = 0.0, ordered[0]
    for start, end in ordered[1:]:
        if start > hi:
            busy += hi - lo
            lo, hi = start, end
        else:
            hi = max(hi, end)
    busy += hi - lo
    return max(e for _, e in ordered) - ordered[0][0], busy
