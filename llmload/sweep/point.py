"""One point of a sweep: a full ``llmload bench`` run of the shared workload at one load, on the target, user
and workers the sweep set up once (docs/sweep.md). A point is exactly what ``llmload bench`` with that
``--request-rate``/``--max-concurrency`` would measure; warm-up requests are left out of its statistics."""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gevent.event import Event

from llmload.bench.console import log
from llmload.core.run import Outcome, Run, Target, Workload
from llmload.sweep.plan import CONCURRENCY, SweepPlan
from llmload.sweep.table import point_row


class PointStop:
    """One point's stop and cut-off events. The sweep's signals set them (and end the sweep); a saturation
    stop sets only this point's, so the next point starts afresh. Quacks like
    :class:`llmload.processes.interrupts.RunInterrupts` for :func:`llmload.bench.execute.execute`."""

    def __init__(self, interrupts: Any) -> None:
        self._run = interrupts
        self.stop = Event()
        self.force = Event()
        self._links = ((interrupts.stop, self._on_stop), (interrupts.force, self._on_force))
        for event, callback in self._links:
            event.rawlink(callback)
            if event.is_set():
                callback(event)

    def _on_stop(self, _event: Any) -> None:
        self.stop.set()

    def _on_force(self, _event: Any) -> None:
        self.force.set()

    @property
    def signum(self) -> int | None:
        return self._run.signum

    def raise_if_interrupted(self) -> None:
        self._run.raise_if_interrupted()

    def start_run(self, stop_timeout: float | None) -> None:
        self._run.start_run(stop_timeout)

    def start_report(self) -> None:
        """The sweep stays in its run phase between points: a signal stops the sweep, results are kept."""

    def close(self) -> None:
        for event, callback in self._links:
            event.unlink(callback)


@dataclass(frozen=True)
class Point:
    """A point's row for ``sweep.json`` and its exit code as a bench run."""

    row: dict[str, Any]
    exit_code: int
    #: fraction of the requests sent that met every SLO (None without SLOs)
    goodput: float | None


def point_name(index: int, dimension: str, load: float) -> str:
    what = "concurrency" if dimension == CONCURRENCY else "rate"
    shown = "inf" if math.isinf(load) else f"{load:g}"
    return f"point-{index:02d}-{what}-{shown}.json"


class Session:
    """What every point shares: the target, the workload, the user and (distributed) the master."""

    def __init__(self, sweep: SweepPlan, target: Target, workload: Workload, user: Any, env: Any,
                 master: Any, interrupts: Any, stack: ExitStack) -> None:
        self.sweep = sweep
        self.target = target
        self.workload = workload
        self.user = user
        self.env = env
        self.master = master
        self.interrupts = interrupts
        self.stack = stack
        self.rows: list[dict[str, Any]] = []
        #: called after each point's row is added (the runner rewrites sweep.json)
        self.after_point: Callable[[], None] = lambda: None

    @property
    def interrupted(self) -> bool:
        return self.interrupts.signum is not None

    def run_point(self, load: float, role: str, *, stop_on_saturation: bool = False, of: str = "") -> Point:
        """Run one point at ``load`` (a rate, ``inf``, or a concurrency) and append its row."""
        from llmload.bench.execute import execute
        from llmload.bench.outputs import Finished, conclude
        from llmload.core.schedule import Schedule

        sweep = self.sweep
        index = len(self.rows) + 1
        plan = self._point_plan(index, load, stop_on_saturation)
        samples = self._samples(load)
        run = Run(plan.args, plan.config, self.target, log, workload=self.workload)
        schedule = run.plan(samples)
        assert isinstance(schedule, Schedule)
        log(f"Sweep point {index}{of} ({role}): {_shown(sweep.dimension, load)}, {len(schedule)} requests"
            + (f" ({sweep.warmup} of them warm-up)" if sweep.warmup else ""))
        stop = PointStop(self.interrupts)
        try:
            outcome, health = execute(plan, run, self.user, self.env, stop, self.stack, self.master)
        finally:
            stop.close()
            self.user.pool.close()
        measured = without_warmup(outcome, schedule, sweep.warmup)
        trimmed = Schedule(schedule.entries[sweep.warmup:], schedule.offsets[sweep.warmup:])
        measured_run = Run(plan.args, plan.config, self.target, log, workload=self.workload, schedule=trimmed)
        done = conclude(Finished(plan, measured_run, measured, health))
        goodput = _goodput_fraction(done.metrics) if sweep.slo else None
        meets = None if goodput is None else goodput >= sweep.goodput_target
        row = point_row(index, role, done.result, goodput=goodput, meets_target=meets,
                        result_file=_name(done.result_path), records_file=_name(done.records_path))
        self.rows.append(row)
        self.after_point()
        return Point(row, done.exit_code, goodput)

    def _point_plan(self, index: int, load: float, stop_on_saturation: bool) -> Any:
        sweep = self.sweep
        run = sweep.run
        changes: dict[str, Any] = {"result_filename": point_name(index, sweep.dimension, load),
                                   "stop_on_saturation": stop_on_saturation or run.args.stop_on_saturation}
        if sweep.dimension == CONCURRENCY:
            changes["max_concurrency"] = int(load)
        else:
            changes["request_rate"] = load
        if math.isinf(changes.get("request_rate", run.args.request_rate)):
            changes["stop_on_saturation"] = False  # everything is due at once: piling up is the point
        plan = run.with_changes(**changes)
        plan.metadata.update({"sweep_point": index, "warmup": sweep.warmup})
        return plan

    def _samples(self, load: float) -> list[Any]:
        """The shared samples; with ``--duration`` a rate point cycles them to ``rate x duration`` requests."""
        samples = self.workload.samples
        sweep = self.sweep
        if sweep.duration is None or math.isinf(load) or sweep.dimension == CONCURRENCY:
            return list(samples)
        count = sweep.warmup + max(1, math.ceil(load * sweep.duration))
        return [samples[i % len(samples)] for i in range(count)]


def without_warmup(outcome: Outcome, schedule: Any, warmup: int) -> Outcome:
    """The outcome without the first ``warmup`` requests of the schedule; the measured window starts when the
    first measured request was sent (docs/sweep.md, "Warm-up")."""
    if not warmup:
        return outcome
    index_of = schedule.index_of()
    kept = [r for r in outcome.records if index_of.get(r.conversation_id or r.request_id, warmup) >= warmup]
    duration = outcome.duration
    if kept and outcome.records:
        last = max((r.end or r.start) for r in outcome.records)
        run_start = last - outcome.duration
        duration = max(1e-9, outcome.duration - max(0.0, min(r.start for r in kept) - run_start))
    lags = [lag for r in kept if (lag := r.schedule_lag) is not None] if outcome.schedule_lags_s else []
    return Outcome(kept, duration, lags, outcome.unsent, outcome.workers, outcome.lost,
                   interrupted_by=outcome.interrupted_by, observed=outcome.observed, journal=outcome.journal)


def _goodput_fraction(metrics: Any) -> float | None:
    """Share of the requests sent (completed, failed or cut off) that met every SLO."""
    if metrics.good_requests is None:
        return None
    if not metrics.sent:
        return 0.0
    return metrics.good_requests / metrics.sent


def _name(path: Path | None) -> str | None:
    return path.name if path is not None else None


def _shown(dimension: str, load: float) -> str:
    if dimension == CONCURRENCY:
        return f"--max-concurrency {int(load)}"
    return "--request-rate inf" if math.isinf(load) else f"--request-rate {load:g}"
