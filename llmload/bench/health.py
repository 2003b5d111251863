"""Is the client the bottleneck? Watch this process's CPU and the gevent loop's lag during a run.

A greenlet sleeps ``interval`` and measures how late it wakes: when the loop is busy parsing streams,
every token timestamp is late by about as much. CPU comes from ``psutil`` (a Locust dependency).
"""

from __future__ import annotations

from time import perf_counter
from typing import Any

import gevent
import numpy as np
import psutil

#: the client is called the bottleneck above these
CPU_LIMIT_PERCENT = 90.0
LOOP_LAG_LIMIT_MS = 5.0
SCHEDULE_LAG_LIMIT_MS = 10.0


class HealthMonitor:
    def __init__(self, interval_s: float = 0.01, cpu_every_s: float = 1.0) -> None:
        self.interval_s = interval_s
        self.cpu_every_s = cpu_every_s
        self.loop_lags_s: list[float] = []
        self.cpu_percent: list[float] = []
        self._greenlets: list[gevent.Greenlet] = []
        self._process = psutil.Process()

    def start(self) -> None:
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
        sched = np.asarray(schedule_lags_s or [0.0]) * 1000.0
        out: dict[str, Any] = {
            "cpu_percent_mean": round(float(cpu.mean()), 1) if cpu.size else 0.0,
            "cpu_percent_max": round(float(cpu.max()), 1) if cpu.size else 0.0,
            "loop_lag_p50_ms": round(float(np.percentile(lags, 50)), 3) if lags.size else 0.0,
            "loop_lag_p99_ms": round(float(np.percentile(lags, 99)), 3) if lags.size else 0.0,
            "loop_lag_max_ms": round(float(lags.max()), 3) if lags.size else 0.0,
            "schedule_lag_p99_ms": round(float(np.percentile(sched, 99)), 3),
        }
        reasons = []
        if out["cpu_percent_mean"] > CPU_LIMIT_PERCENT:
            reasons.append(f"client CPU averaged {out['cpu_percent_mean']:.0f}% (> {CPU_LIMIT_PERCENT:.0f}%)")
        if out["loop_lag_p99_ms"] > LOOP_LAG_LIMIT_MS:
            reasons.append(f"event-loop lag p99 {out['loop_lag_p99_ms']:.1f} ms (> {LOOP_LAG_LIMIT_MS:.0f} ms)")
        if out["schedule_lag_p99_ms"] > SCHEDULE_LAG_LIMIT_MS:
            reasons.append(f"schedule lag p99 {out['schedule_lag_p99_ms']:.1f} ms (> {SCHEDULE_LAG_LIMIT_MS:.0f} ms)")
        out["bottleneck"] = bool(reasons)
        out["reason"] = "; ".join(reasons)
        return out
