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
    """Collects ``(t, in flight, completed so far, server waiting)`` samples and judges them by ``rule``."""

    rule: SaturationRule = field(default_factory=SaturationRule)
    start: float = 0.0
    samples: list[_Sample] = field(default_factory=list)

    def add(self, t: float, in_flight: float, completed: float, waiting: float | None = None,
            wait_sum: float = 0.0, wait_count: float = 0.0) -> None:
        """One sample; ``wait_sum``/``wait_count``: cumulative waits to the first token of completed requests."""
        self.samples.append(_Sample(t, float(in_flight), float(completed), waiting, float(wait_sum),
                                    float(wait_count)))

    def verdict(self) -> Verdict:
        """The test over the samples so far (the first saturated span found, scanning forward)."""
        windows = self._windows()
        need = self.rule.windows
        for signal in ("in_flight", "waiting"):
            for i in range(len(windows) - need + 1):
                found = self._judge(windows[i:i + need], signal)
                if found is not None:
                    return found
        return Verdict()

    def _windows(self) -> list[tuple[_Sample, _Sample]]:
        """(first, last) sample of each full window since ``start``."""
        out: list[tuple[_Sample, _Sample]] = []
        width = self.rule.window_s
        current: list[_Sample] = []
        edge = self.start + width
        for sample in self.samples:
            if sample.t < self.start:
                continue
            while sample.t >= edge:
                if current:
                    out.append((current[0], current[-1]))
                current = [current[-1]] if current else []
                edge += width
            current.append(sample)
        return out

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
