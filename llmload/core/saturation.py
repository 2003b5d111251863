"""Is the server saturated? In an open loop the schedule keeps sending whatever the server does; once the server
cannot keep up, requests pile up (in flight at the client, waiting in the server's queue) while throughput stays
where it is, and every later latency measures the queue, not the server (docs/observability.md, "Saturation").

The test, on samples taken while the run goes: cut time into windows of ``window_s`` seconds; over the last
``windows`` consecutive windows the backlog (requests in flight at the client, or the server's waiting queue when it
is scraped) grew in every window, grew in all by at least ``max(min_growth, growth_share x backlog at the start)``,
and the completion rate of the last window is at most ``flat_ratio`` times the first one's (throughput flat). The
run was saturated from the start of the first of those windows. A closed loop cannot saturate this way (its users
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


@dataclass
class SaturationMonitor:
    """Collects ``(t, in flight, completed so far, server waiting)`` samples and judges them by ``rule``."""

    rule: SaturationRule = field(default_factory=SaturationRule)
    start: float = 0.0
    samples: list[_Sample] = field(default_factory=list)

    def add(self, t: float, in_flight: float, completed: float, waiting: float | None = None) -> None:
        self.samples.append(_Sample(t, float(in_flight), float(completed), waiting))

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
        return Verdict(True, span[0][0].t - self.start, signal, float(growth), rates[-1])
