"""How long the client's loop goes without looking at its sockets, and what kept it busy.

Token times are the kernel's arrival times, so a busy client shifts no timestamp until data waits so long that two
chunks of one stream arrive before it reads them: the two then share one read and one timestamp (the later
chunk's), and the earlier gap reads as the sum of both. What decides that is the *stall*: a stretch of client work
between two looks at the sockets, from the moment gevent's loop returns from its poll to its next poll, or to the
next turn client work gives the reactor (:meth:`~llmload.client.transport.reactor.Reactor.yield_to_reads`).

A :class:`StallClock` keeps a histogram of every stall and the longest few with what ran in them: the greenlets
(the function each runs and where it gave the loop back), the reactor's own reads and the garbage collector.
Attribution costs one Python call per greenlet switch, so it is on only while someone asks (:meth:`StallClock.attribute`,
the client-health monitor during a run); the histogram costs two watcher callbacks per loop iteration.
"""

from __future__ import annotations

import gc
import heapq
import os
from dataclasses import dataclass, field
from itertools import count
from time import perf_counter
from typing import Any

#: histogram buckets of 0.1 ms; the last one holds 1 s or more
STALL_BUCKETS = 10_001
#: how many of the longest stalls are kept with what ran in them
KEEP_LONGEST = 8
#: at most this many greenlets are named per stall
NAMED_PER_STALL = 4
#: libev's highest and lowest watcher priorities: the clock's check runs first after a poll, its prepare last
_MAXPRI, _MINPRI = 2, -2


@dataclass
class _Stretch:
    """What ran since the loop last looked at the sockets."""

    began: float = 0.0
    reading_s: float = 0.0
    gc_s: float = 0.0
    #: greenlet -> [seconds it ran, code object and line where it last gave the loop back, what it runs]
    ran: dict[Any, list[Any]] = field(default_factory=dict)

    def restart(self, now: float) -> None:
        self.began = now
        self.reading_s = self.gc_s = 0.0
        if self.ran:
            self.ran.clear()


class StallClock:
    """Measures every stall of one gevent loop (see the module docstring); :meth:`summary` reports them.

    :meth:`looked` is called by whoever looks at the sockets outside libev's own poll (the reactor, when client
    work yields to it); :meth:`reading` adds the reactor's read time to the current stall's account.
    """

    def __init__(self) -> None:
        self.histogram = [0] * STALL_BUCKETS
        #: min-heap of (seconds, tie-breaker, what ran) for the longest stalls
        self._longest: list[tuple[float, int, dict[str, Any]]] = []
        self._ties = count()
        self._stretch = _Stretch(began=perf_counter())
        self._origin = perf_counter()
        self._watchers: tuple[Any, Any] | None = None
        self._previous_tracer: Any = None
        self._attributing = False
        self._switched = 0.0
        self._gc_began = 0.0
        self._hub: Any = None

    # -- wiring ------------------------------------------------------------------------------------------

    def start(self, loop: Any) -> None:
        """Watch ``loop`` (gevent's hub loop): a check watcher marks each return from the poll, a prepare
        watcher each poll about to happen. Both are unref'd: they never keep a finished loop alive."""
        if self._watchers is not None:
            return
        woke = loop.check(ref=False, priority=_MAXPRI)
        polls = loop.prepare(ref=False, priority=_MINPRI)
        woke.start(self._woke)
        polls.start(self._polls)
        self._watchers = (woke, polls)

    def stop(self) -> None:
        """Stop watching (and attributing)."""
        self.attribute(False)
        if self._watchers is not None:
            for watcher in self._watchers:
                watcher.stop()
                watcher.close()
            self._watchers = None

    def attribute(self, on: bool = True) -> None:
        """Name what ran in each stall (greenlet switches and garbage collection are watched while on)."""
        import greenlet

        if on == self._attributing:
            return
        self._attributing = on
        if on:
            import gevent

            self._hub = gevent.get_hub()
            self._switched = perf_counter()
            self._previous_tracer = greenlet.settrace(self._switch)
            gc.callbacks.append(self._collecting)
        else:
            greenlet.settrace(self._previous_tracer)
            self._previous_tracer = None
            if self._collecting in gc.callbacks:
                gc.callbacks.remove(self._collecting)

    def reset(self) -> None:
        """Forget what was measured (a run's measurement starts)."""
        self.histogram[:] = [0] * STALL_BUCKETS
        self._longest.clear()
        self._origin = perf_counter()
        self._stretch.restart(self._origin)

    # -- measuring ---------------------------------------------------------------------------------------

    @property
    def last_look(self) -> float:
        """When the sockets were last looked at (a poll, or a read client work yielded to)."""
        return self._stretch.began

    def looked(self, now: float) -> None:
        """The sockets were looked at ``now``: the stall that led here ends."""
        stretch = self._stretch
        seconds = now - stretch.began
        if seconds > 0:
            self.histogram[min(int(seconds * 10_000), STALL_BUCKETS - 1)] += 1
            longest = self._longest
            if len(longest) < KEEP_LONGEST or seconds > longest[0][0]:
                entry = (seconds, next(self._ties), self._account(seconds, now))
                if len(longest) < KEEP_LONGEST:
                    heapq.heappush(longest, entry)
                else:
                    heapq.heapreplace(longest, entry)
        stretch.restart(now)

    def reading(self, seconds: float) -> None:
        """The reactor spent ``seconds`` reading in the current stall."""
        self._stretch.reading_s += seconds

    def _woke(self) -> None:
        self._stretch.restart(perf_counter())

    def _polls(self) -> None:
        self.looked(perf_counter())

    def _switch(self, event: str, args: Any) -> None:
        if event in ("switch", "throw"):
            now = perf_counter()
            origin, target = args
            ran = self._stretch.ran
            if target is not self._hub and target not in ran:
                ran[target] = [0.0, None, _run_name(target)]  # named now: gevent forgets it once the greenlet ends
            if origin is not self._hub:  # the hub runs the loop itself: its time is the rest of the stall
                frame = origin.gr_frame
                where = (frame.f_code, frame.f_lineno) if frame is not None else None
                spent = ran.get(origin)
                if spent is None:
                    ran[origin] = [now - self._switched, where, _run_name(origin)]
                else:
                    spent[0] += now - self._switched
                    spent[1] = where
            self._switched = now
        if self._previous_tracer is not None:
            self._previous_tracer(event, args)

    def _collecting(self, phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_began = perf_counter()
        else:
            self._stretch.gc_s += perf_counter() - self._gc_began

    def _account(self, seconds: float, now: float) -> dict[str, Any]:
        """What ran in the stall that just ended, named while the greenlets are still at hand."""
        stretch = self._stretch
        ran = sorted(stretch.ran.items(), key=lambda item: -item[1][0])[:NAMED_PER_STALL]
        return {
            "ms": round(seconds * 1000.0, 3),
            "at_s": round(now - self._origin, 3),
            "reads_ms": round(stretch.reading_s * 1000.0, 3),
            "gc_ms": round(stretch.gc_s * 1000.0, 3),
            "greenlets": [{"what": _where(name, where), "ms": round(spent * 1000.0, 3)}
                          for _g, (spent, where, name) in ran if spent > 0],
        }

    # -- reporting ---------------------------------------------------------------------------------------

    def percentile_ms(self, p: float) -> float | None:
        """The p-th percentile stall in ms (the histogram's bucket; None: no stall measured)."""
        from llmload.metrics.percentiles import rank_bucket

        bucket = rank_bucket(self.histogram, p)
        return None if bucket is None else bucket / 10.0

    def summary(self) -> dict[str, Any]:
        """``stall_p50_ms``, ``stall_p99_ms``, ``stall_max_ms``, ``stalls_over_5ms`` and ``longest_stalls``
        (the longest first, each with what ran in it when attribution was on)."""
        longest = [entry for _s, _t, entry in sorted(self._longest, reverse=True)]
        over = sum(self.histogram[50:])
        return {
            "stall_p50_ms": self.percentile_ms(50),
            "stall_p99_ms": self.percentile_ms(99),
            "stall_max_ms": longest[0]["ms"] if longest else None,
            "stalls_over_5ms": over,
            "longest_stalls": longest,
        }


def _run_name(g: Any) -> str:
    """The function a greenlet runs (its class name where it has none)."""
    run = getattr(g, "_run", None) or getattr(g, "run", None)
    return getattr(run, "__qualname__", None) or type(g).__name__


def _where(name: str, where: tuple[Any, int] | None) -> str:
    """``function@file:line``: what the greenlet runs and where it last gave the loop back ('done': it ended)."""
    if where is None:
        return f"{name}@done"
    code, line = where
    return f"{name}@{os.path.basename(code.co_filename)}:{line}"
