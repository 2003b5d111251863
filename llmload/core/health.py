"""Is the client the bottleneck? Watch this process's CPU, how late it reads arriving data, and the loop.

Token timestamps are the kernel's receive times (:mod:`llmload.client.transport`), so a busy client does not shift
them; it starts to distort ITLs only when it reads a stream so late that two chunks merge into one read.
The transport's *read lag* (our read − kernel arrival) is the direct measure of that. A greenlet that
sleeps ``interval`` also reports the loop's lag (how late greenlets run: sends, dispatch). CPU comes from
``psutil`` (a Locust dependency).
"""

from __future__ import annotations

from time import perf_counter
from typing import TYPE_CHECKING, Any

import gevent
import numpy as np
import psutil

from llmload.metrics.definitions import LATE_SEND_MS, late_sends
from llmload.metrics.percentiles import linear_percentiles

if TYPE_CHECKING:
    from llmload.client.transport import Reactor

#: the client is called the bottleneck above these
CPU_LIMIT_PERCENT = 90.0
#: reading data later than this share of the median inter-token gap risks merging two chunks into one read
#: (the kernel timestamps each read, so a later read is only a problem once chunks merge)
READ_LAG_SHARE_OF_ITL = 0.3
#: used when the ITL is not known yet
READ_LAG_LIMIT_MS = 3.0
#: the client is late when its sends are (metrics.definitions.LATE_SEND_MS: the summary's "Late sends" too)
SCHEDULE_LAG_LIMIT_MS = LATE_SEND_MS
#: ...but only when more sends than this share were that late (and always more than one): in a short run the
#: p99 is its latest send, and one hiccup (a GC pause, the first send) is not a client that cannot keep up
LATE_SEND_SHARE = 0.01


class HealthMonitor:
    """Samples the loop lag and CPU while running; ``reactor`` is the one that reads the run's streams.

    Read lag is known only from a reactor: without one (or with no kernel-timestamped reads, as over TLS)
    ``read_lag_p99_ms`` is None and the verdict rests on CPU and the schedule lag.
    """

    def __init__(self, interval_s: float = 0.01, cpu_every_s: float = 1.0, *,
                 reactor: Reactor | None = None) -> None:
        self.reactor = reactor
        self.interval_s = interval_s
        self.cpu_every_s = cpu_every_s
        self.loop_lags_s: list[float] = []
        self.cpu_percent: list[float] = []
        self._greenlets: list[gevent.Greenlet] = []
        self._process = psutil.Process()

    def start(self) -> None:
        if self.reactor is not None:
            self.reactor.reset_read_lag()
        self._process.cpu_percent(None)
        self._greenlets = [gevent.spawn(self._watch_loop), gevent.spawn(self._watch_cpu)]

    def stop(self) -> None:
        gevent.killall(self._greenlets, block=True)

    def _watch_loop(self) -> None:
        while True:
            t = perf_counter()
            gevent.sleep(self.interval_s)
            self.loop_lags_s.append(max(0.0, perf_counter() - t - self.interval_s))

    def _watch_cpu(self) -> None:
        while True:
            gevent.sleep(self.cpu_every_s)
            self.cpu_percent.append(self._process.cpu_percent(None))

    def report(self, schedule_lags_s: list[float] | None = None) -> dict[str, Any]:
        if not self.cpu_percent:  # a run shorter than one sampling interval
            self.cpu_percent.append(self._process.cpu_percent(None))
        lags = np.asarray(self.loop_lags_s) * 1000.0
        cpu = np.asarray(self.cpu_percent)
        loop_p50, loop_p99 = linear_percentiles(lags, (50.0, 99.0))  # the one percentile rule (metrics)
        out: dict[str, Any] = {
            "cpu_percent_mean": round(float(cpu.mean()), 1) if cpu.size else 0.0,
            "cpu_percent_max": round(float(cpu.max()), 1) if cpu.size else 0.0,
            "loop_lag_p50_ms": round(loop_p50, 3),
            "loop_lag_p99_ms": round(loop_p99, 3),
            "loop_lag_max_ms": round(float(lags.max()), 3) if lags.size else 0.0,
            **schedule_health(list(schedule_lags_s or ())),
        }
        out["read_lag_p99_ms"] = self.reactor.read_lag_percentile(99) if self.reactor is not None else None
        return judge(out)


def merge_health(workers: dict[str, dict[str, Any] | None], master: dict[str, Any]) -> dict[str, Any]:
    """A distributed run's client health: the busiest worker's CPU, loop and read lags (the verdict is made from
    these by :func:`judge`) over ``master``'s report, whose schedule lag stays (the master's leaves out requests
    re-assigned from dead workers, late on purpose); each worker's own report under ``per_worker``."""
    reports = {name: h for name, h in workers.items() if h}
    if not reports:
        return master
    merged = dict(master)
    for key in ("cpu_percent_mean", "cpu_percent_max", "loop_lag_p99_ms", "read_lag_p99_ms"):
        values = [h[key] for h in reports.values() if h.get(key) is not None]
        if values:
            merged[key] = max(values)  # the busiest worker decides
    merged["per_worker"] = reports
    return merged


def schedule_health(schedule_lags_s: list[float]) -> dict[str, Any]:
    """The schedule-lag part of a health report, from the lags a master collected from its records."""
    sched = np.asarray(schedule_lags_s or [0.0]) * 1000.0
    return {"schedule_lag_p99_ms": round(linear_percentiles(sched, (99.0,))[0], 3),
            "late_sends": late_sends(schedule_lags_s), "sends": len(schedule_lags_s)}


def judge(health: dict[str, Any], median_itl_ms: float | None = None) -> dict[str, Any]:
    """Decide (again) whether the client was the bottleneck, once the run's median ITL is known."""
    limit = READ_LAG_LIMIT_MS if not median_itl_ms else max(1.0, READ_LAG_SHARE_OF_ITL * median_itl_ms)
    reasons = []
    cpu = health.get("cpu_percent_mean") or 0.0
    if cpu > CPU_LIMIT_PERCENT:
        reasons.append(f"client CPU averaged {cpu:.0f}% (> {CPU_LIMIT_PERCENT:.0f}%)")
    read_lag = health.get("read_lag_p99_ms")
    if read_lag is not None and read_lag > limit:
        reasons.append(f"data read {read_lag:.1f} ms after it arrived at p99 (> {limit:.1f} ms, chunks may merge)")
    sched = health.get("schedule_lag_p99_ms") or 0.0
    late, sends = health.get("late_sends"), health.get("sends")
    too_many_late = late is None or not sends or late > max(1, LATE_SEND_SHARE * sends)
    if sched > SCHEDULE_LAG_LIMIT_MS and too_many_late:
        detail = f", {late} of {sends} sends" if late is not None and sends else ""
        reasons.append(f"schedule lag p99 {sched:.1f} ms (> {SCHEDULE_LAG_LIMIT_MS:.0f} ms{detail})")
    health["bottleneck"] = bool(reasons)
    health["reason"] = "; ".join(reasons)
    return health
