"""Is the server saturated? In an open loop the schedule keeps sending whatever the server does; once the server
cannot keep up, requests pile up (in flight at the client, waiting in the server's queue) while throughput stays
where it is, and every later latency measures the queue, not the server (docs/observability.md, "Saturation").

The test, on samples taken while the run goes: cut time into windows of ``window_s`` seconds; over the last
``windows`` consecutive windows the backlog (requests in flight at the client, or the server's waiting queue when it
is scraped) grew in every window, grew in all by at least ``max(min_growth, growth_share x backlog at the start)``,
and the completion rate of the last window is at most ``flat_ratio`` times the first one's (throughput flat). The
run was saturated from the start of the first of those windows.

For the client's in-flight count one more thing must hold, because a backlog also grows while a run warms up
(answers take seconds to finish, so in flight climbs towards rate x duration) and by chance in a Poisson burst:
requests must be *waiting longer*. The mean time from a request's intended send to its first token, over the
requests completed in a window, must rise from the span's first window with completions to its last by at least
``ttft_ratio`` times and ``ttft_min_growth_s``; or, past the first ``windows`` windows of the run, nothing
completes at all in the last window while the backlog grows. A closed loop cannot saturate this way (its users
bound the backlog), so the run only applies the test to open loops.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class SaturationRule:
    """The thresholds of the test (``--saturation-window``); the defaults suit runs of a minute or more."""

    window_s: float = 5.0
    windows: int = 3
    min_growth: float = 4.0
    growth_share: float = 0.5
    flat_ratio: float = 1.15
    ttft_ratio: float = 1.5
    ttft_min_growth_s: float = 0.05


@dataclass(frozen=True)
class Verdict:
    """What the test found: ``since`` is seconds from the run's start, ``signal`` which backlog grew."""

    saturated: bool = False
    since_s: float | None = None
    signal: str = ""
    growth: float = 0.0
    throughput_rps: float = 0.0

    def to_dict(self) -> dict[str, object]:
        return {"saturated": self.saturated, "since_s": self.since_s, "signal": self.signal,
                "backlog_growth": self.growth, "throughput_rps": self.throughput_rps}


@dataclass
class _Sample:
    t: float
    in_flight: float
    completed: float
    waiting: float | None
    #: over the requests completed so far: the sum of their waits to the first token, and how many had one
    wait_sum: float = 0.0
    wait_count: float = 0.0


@dataclass
class SaturationMonitor:
    """Takes ``(t, in flight, completed so far, server waiting)`` samples and judges them by ``rule`` as each window
    closes. It keeps the last ``rule.windows`` windows (their first and last samples) and the first saturated span
    of each signal found, not every sample: a day-long run's checks cost the same at its end as at its start
    (issue 37)."""

    rule: SaturationRule = field(default_factory=SaturationRule)
    start: float = 0.0
    #: samples taken since ``start``
    taken: int = 0
    _recent: deque[tuple[_Sample, _Sample]] = field(default_factory=deque, repr=False)
    _first: _Sample | None = field(default=None, repr=False)
    _last: _Sample | None = field(default=None, repr=False)
    _edge: float | None = field(default=None, repr=False)
    _found: dict[str, Verdict] = field(default_factory=dict, repr=False)

    def add(self, t: float, in_flight: float, completed: float, waiting: float | None = None,
            wait_sum: float = 0.0, wait_count: float = 0.0) -> None:
        """One sample; ``wait_sum``/``wait_count``: cumulative waits to the first token of completed requests."""
        if t < self.start:
            return
        sample = _Sample(t, float(in_flight), float(completed), waiting, float(wait_sum), float(wait_count))
        self.taken += 1
        width = self.rule.window_s
        if self._edge is None:
            self._edge = self.start + width
        while t >= self._edge:
            if self._first is not None and self._last is not None:
                self._close((self._first, self._last))
                self._first = self._last  # the next window starts where this one ended
            self._edge += width
        if self._first is None:
            self._first = sample
        self._last = sample

    def verdict(self) -> Verdict:
        """The test over the windows so far: the first saturated span of the client's backlog, else of the
        server's queue."""
        return self._found.get("in_flight") or self._found.get("waiting") or Verdict()

    def _close(self, window: tuple[_Sample, _Sample]) -> None:
        """A full window: judge the span of the last ``rule.windows`` ones for each signal not yet found."""
        self._recent.append(window)
        need = self.rule.windows
        while len(self._recent) > need:
            self._recent.popleft()
        if len(self._recent) < need:
            return
        span = list(self._recent)
        for signal in ("in_flight", "waiting"):
            if signal not in self._found and (found := self._judge(span, signal)) is not None:
                self._found[signal] = found

    def _judge(self, span: Sequence[tuple[_Sample, _Sample]], signal: str) -> Verdict | None:
        def backlog(s: _Sample) -> float | None:
            return s.in_flight if signal == "in_flight" else s.waiting

        values = [(backlog(a), backlog(b)) for a, b in span]
        if any(a is None or b is None for a, b in values):
            return None
        if not all(b > a for a, b in values):  # type: ignore[operator]
            return None
        first = values[0][0]
        growth = values[-1][1] - first  # type: ignore[operator]
        if growth < max(self.rule.min_growth, self.rule.growth_share * first):  # type: ignore[operator]
            return None
        rates = [(b.completed - a.completed) / max(b.t - a.t, 1e-9) for a, b in span]
        if rates[-1] > self.rule.flat_ratio * max(rates[0], 1e-9):
            return None
        if signal == "in_flight" and not self._waiting_longer(span):
            return None
        return Verdict(True, span[0][0].t - self.start, signal, float(growth), rates[-1])

    def _waiting_longer(self, span: Sequence[tuple[_Sample, _Sample]]) -> bool:
        """Requests wait longer and longer for their first token (module docstring): a queue, not a warm-up."""
        def mean_wait(a: _Sample, b: _Sample) -> float | None:
            n = b.wait_count - a.wait_count
            return (b.wait_sum - a.wait_sum) / n if n > 0 else None

        waits = [mean_wait(a, b) for a, b in span]
        if waits[-1] is None:
            return span[0][0].t - self.start >= self.rule.window_s * self.rule.windows
        earlier = [w for w in waits[:-1] if w is not None]
        if not earlier:
            return False
        first, last = earlier[0], waits[-1]
        return last >= max(first * self.rule.ttft_ratio, first + self.rule.ttft_min_growth_s)
