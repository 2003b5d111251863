"""One ``locust -f`` run on the run core, kept on its Locust environment (``environment.llmload``).

Headless, a run is the same finite schedule ``llmload bench`` sends for the same options, and the test ends when
it has been sent and answered (or at ``-t``). In the web UI the open loop runs on a steerable
:class:`~llmload.core.schedule.LiveSchedule` and the closed loop cycles over the prompts until stopped.

Open loop: one dispatcher per load process sends its share of the global schedule; Locust's users only idle.
Closed loop: Locust's users are the loops (``-u``), each taking the next request of this process's share.
Distributed: the master builds the schedule and hands each worker its share in its first ``llm_job`` (before
Locust's spawn messages, on the same ordered channel); workers ship records through the one record path
(:mod:`llmload.core.messages`) and say ``llm_done`` with their accounting (:mod:`llmload.core.protocol`, the
messages of both ways in; docs/design.md has the table).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from time import perf_counter
from typing import Any

import gevent
from gevent.event import Event

from llmload.common.errors import LLMLoadError
from llmload.core import protocol
from llmload.core.conversation import request_count
from llmload.core.dispatch import (
    LEAD_S,
    CyclingQueue,
    RequestFeed,
    RequestQueue,
    StopControl,
    Tally,
    closed_loop_step,
    run_live_open_loop,
    run_open_loop,
)
from llmload.core.messages import clock_offset
from llmload.core.protocol import Done, Finished, Job, SetRate
from llmload.core.schedule import LiveSchedule, Schedule, Scheduled, request_ids
from llmload.core.sink import BatchShipper, RecordList
from llmload.core.state import RunState
from llmload.options import option_value
from llmload.plugin.cluster import ClusterRole
from llmload.plugin.console import tell
from llmload.plugin.observing import finish_observer, health_report, say, start_observer, watch_health
from llmload.plugin.report import open_journal
from llmload.plugin.share import ShareRole

#: a rate change applies this far in the schedule's future, so every worker hears of it first
STEER_LEAD_S = 0.5


class LocustRun(ShareRole, ClusterRole, RunState):
    """The state of one environment's run; Locust's events call its ``on_*`` methods."""

    def __init__(self, environment: Any) -> None:
        from locust.runners import MasterRunner, WorkerRunner

        super().__init__()
        self.environment = environment
        self.runner = environment.runner
        self.role = ("master" if isinstance(self.runner, MasterRunner)
                     else "worker" if isinstance(self.runner, WorkerRunner) else "local")
        opts = environment.parsed_options
        self.headless = bool(getattr(opts, "headless", True)) or environment.web_ui is None
        #: records of this test (master and local runner)
        self.records = RecordList()
        self.shipper = BatchShipper(self.runner.send_message) if self.role == "worker" else None
        self.control = StopControl()
        #: master and local runner: the run on the core (its config, target, workload, schedule, metrics)
        self.core: Any = None
        self.workload: Any = None
        self.schedule: Schedule | LiveSchedule | None = None
        self._workload_key: tuple | None = None
        #: this process's part of the run (the schedule itself on a local runner: its entries made as read)
        self.share: Sequence[Scheduled] | Schedule = []
        self.queue: RequestQueue | None = None
        self.dispatcher: gevent.Greenlet | None = None
        self.tally = Tally()
        #: closed loop: conversation turns after the first that were sent (each is a request)
        self.later_turns = 0
        self.start = 0.0
        self.finished = False
        self.rate_changed = Event()
        self._senders: dict[str, Any] = {}
        #: master: each worker's llm_done, and which workers finished their share
        self.reports: dict[str, Done] = {}
        self._finished_workers: set[str] = set()
        self._share_sent = False
        #: the web UI's LLM tab (master or local runner with a web UI)
        self.tab: Any = None
        #: --prometheus-port's live metrics (master or local runner; llmload.exporter.wiring.locust_exporter)
        self.exporter: Any = None
        #: the server's metrics and the saturation test during a test, and what they saw in the last one
        self.observer: Any = None
        self.observed: Any = None
        #: local runner and workers: this process's client health during a test, and its last report
        self.health: Any = None
        self.health_report: dict[str, Any] | None = None

    # -- what the run sends --------------------------------------------------------------------------------

    @property
    def options(self) -> Any:
        return self.environment.parsed_options

    @property
    def open_loop(self) -> bool:
        if self.role == "worker" and self.plan is not None:
            return self.plan.open_loop  # the master's options decide, as they were at its start
        return option_value(self.options, "arrival") == "open"

    @property
    def sink(self) -> Any:
        return self.shipper if self.shipper is not None else self.records

    def prepare(self) -> None:
        """Decide the run from the options (:class:`llmload.core.run.Run`), load its workload (again only when
        the options changed) and build its schedule. LLMLoadError: one line, the run cannot start."""
        from llmload.core.run import Run, RunConfig, Target
        from llmload.options import api_key, normalize_options
        from llmload.plugin.setup import (
            class_weights,
            configure_classes,
            conversation_settings,
            user_classes,
            workload_key,
        )

        opts = self.options
        normalize_options(opts)  # the web UI's start form gives strings back
        conversation_settings(opts, self.environment)
        config = RunConfig.from_options(opts, live=not self.headless)
        host = (self.environment.host or "").rstrip("/")
        if not host and self.headless and not any(getattr(c, "host", None) for c in user_classes(self.environment)):
            from llmload.common.errors import ConfigError

            raise ConfigError("no server to load: give --host, e.g. --host http://127.0.0.1:8000 (`llmload bench` "
                              "starts the simulator when no server is given; `locust -f` does not)")
        key = workload_key(opts, host)
        if key != self._workload_key or self.core is None:
            target = Target.resolve(opts, host, api_key(opts), lenient=True)
            self.core = Run(opts, config, target, say)
            self.core.load()
            self._workload_key = key
        else:  # the same options: the same workload, a fresh schedule (a live one keeps no position)
            self.core = Run(opts, config, self.core.target, say, workload=self.core.workload)
        self.workload = self.core.workload
        self.schedule = self.core.plan(classes=class_weights(self.environment), live=not self.headless)
        configure_classes(self.environment, opts, self.core.target.model, config)

    def sender_for(self, request: Scheduled) -> Any:
        """The user that sends ``request`` in the open loop: one instance per user class and process."""
        from llmload.plugin.setup import user_classes

        classes = {cls.__name__: cls for cls in user_classes(self.environment)}
        name = request.user_class if request.user_class in classes else next(iter(classes))
        sender = self._senders.get(name)
        if sender is None:
            sender = self._senders[name] = classes[name](self.environment)
        return sender

    # -- Locust's events -----------------------------------------------------------------------------------

    def on_test_start(self) -> None:
        if self.dispatcher is not None and not self.dispatcher.dead:
            # Locust fires test_start until its state says spawning: a second start while this one is still
            # setting up is the same test, and must not start a second dispatcher
            return
        self.control = StopControl(stop_timeout=float(self.environment.stop_timeout or 0.0))
        self.finished = False
        self.tally = Tally()
        self.later_turns = 0
        self._senders = {}
        self._more, self._more_dispatched, self._share_sent = [], 0, False
        try:
            if self.role == "master":
                self.records.clear(open_journal(self.options))
                self.reports.clear()
                self._finished_workers.clear()
                self.prepare()  # the web UI's start form may have changed the options
                self._send_plans()
                self.observer = start_observer(self)
            elif self.role == "local":
                self.records.clear(open_journal(self.options))
                self.prepare()
                watch_health(self)
                self._begin(self._local_plan())
                self.observer = start_observer(self)
            else:
                from llmload.core.run import RunConfig
                from llmload.plugin.setup import configure_classes, conversation_settings

                conversation_settings(self.options, self.environment)
                plan = self.plan or self._local_plan()
                configure_classes(self.environment, self.options, plan.model,
                                  RunConfig.from_options(self.options, live=not plan.headless))
                watch_health(self)
                self._begin(plan)
        except LLMLoadError as exc:
            tell(f"error: {exc}")
            self.environment.process_exit_code = exc.exit_code
            gevent.spawn(self.runner.quit)

    def on_test_stopping(self) -> None:
        self.control.stop.set()
        if self.role == "master":
            self._await_final_batches()

    def on_test_stop(self) -> None:
        if self.role != "worker" and self.observer is not None:
            self.observed = finish_observer(self, self.observer)
            self.observer = None
        if self.role == "master":
            return
        if self.dispatcher is not None:
            self.dispatcher.join()
        gevent.joinall(list(self._more))
        self.health_report = health_report(self)
        if self.role == "worker" and self.shipper is not None:
            self.shipper.flush()
            acc = self.accounting()
            done = Done(records=self.shipper.shipped, planned=acc["planned"], dispatched=acc["dispatched"],
                        health=self.health_report)
            self.runner.send_message(protocol.DONE, done.data())

    def on_quitting(self) -> None:
        import gc

        gc.freeze()  # Locust exits next: its last collections need not walk the run's objects (llmload.cli.main)
        if self.role == "worker":
            return
        if self.runner is not None and self.runner.state not in ("stopped", "init", "ready"):
            self.runner.stop()  # Ctrl-C or SIGTERM: Locust quits without stopping first
        if self.exporter is not None:
            self.exporter.finish()  # every record is in: --prometheus-linger, then stop serving
        from llmload.plugin.report import print_summary

        print_summary(self)

    # -- this process's share ------------------------------------------------------------------------------

    def _local_plan(self) -> Job:
        """A process's own share when no master sent one: the whole run, starting :data:`LEAD_S` from now."""
        return Job([], time.time() + LEAD_S, max_concurrency=getattr(self.options, "max_concurrency", None) or None,
                   open_loop=self.open_loop, headless=self.headless)

    def _begin(self, plan: Job) -> None:
        """Start sending this process's share: the dispatcher (open loop) or the users' queue (closed loop)."""
        self.start = plan.start_wall - clock_offset()
        index, count = (int(n) for n in plan.part)
        self.feed, self.parts_planned = None, 0
        if self.role == "worker":
            self.share = self._requests_from_plan(plan)
            if plan.more and self.open_loop:
                self.feed = RequestFeed(self.share, self.control.stop)
                for part in self.early_parts:
                    self.take_part(part)
            self.early_parts = []
        elif isinstance(self.schedule, Schedule):
            self.share = self.schedule if self.open_loop else list(self.schedule)
        else:
            self.share = _sample_requests(self.workload.samples)
        if self.open_loop:
            if len(self.share):
                self.sender_for(self.share[0])  # built now, not as the first request is due
            self.dispatcher = gevent.spawn(self._dispatch, plan.max_concurrency, index, count)
            self.start_early_requests()
        elif self.headless:
            self.queue = RequestQueue(list(self.share))
        else:
            self.queue = CyclingQueue(list(self.share))

    def _requests_from_plan(self, plan: Job) -> list[Scheduled]:
        from llmload.core.messages import job_requests

        requests = list(job_requests(plan.items))  # Locust's users take from a list that later jobs extend
        live = plan.live
        if not live:
            self.schedule = None
            return requests
        self.schedule = LiveSchedule([r.sample for r in requests], live["rate"], live["burstiness"], live["seed"],
                                     [tuple(c) for c in live["classes"]])
        index, count = (int(n) for n in plan.part)
        return requests[index::count]  # closed loop: cycle over mine

    def _dispatch(self, max_concurrency: int | None, index: int, count: int) -> None:
        if isinstance(self.schedule, LiveSchedule):
            self.tally = run_live_open_loop(self.schedule, self.sender_for, self.sink, changed=self.rate_changed,
                                            mine=lambda i: i % count == index, max_concurrency=max_concurrency,
                                            control=self.control, start_at=self.start)
        else:
            self.tally = run_open_loop(self.feed or self.share, self.sender_for, self.sink, max_concurrency=max_concurrency,
                                       control=self.control, start_at=self.start, skip=self.skip_given_away(),
                                       on_dispatch=self._on_dispatch)
        self._share_sent = True
        if not self.control.stop.is_set() and not self._more:
            self._share_done()

    def _on_dispatch(self, request: Scheduled) -> None:
        if self.shipper is not None:
            self.shipper.dispatched(request.index)  # the master re-assigns only what was not released

    def user_step(self, user: Any) -> None:
        """A Locust user's task: closed loop, stream the next request; open loop, idle (the dispatcher sends)."""
        from locust.exception import StopUser

        if self.open_loop:
            self.control.stop.wait(1.0)
            return
        if self.queue is None or self.control.stop.is_set():
            raise StopUser()
        if not closed_loop_step(self.queue, user, self.sink, stop=self.control.stop, on_turn=self._later_turn):
            if self.in_flight == 0:
                self._share_done()
            raise StopUser()

    def _later_turn(self, _record: Any) -> None:
        self.later_turns += 1

    def accounting(self) -> dict[str, int]:
        """Requests this process had to send, and how many it released (the rest were not sent); every turn of
        a conversation is a request."""
        if self.open_loop:
            dispatched = self.tally.dispatched + self._more_dispatched
        else:
            dispatched = (self.queue.taken if self.queue is not None else 0) + self.later_turns
        planned = request_count(self.share) + self.parts_planned if self.headless else dispatched
        return {"planned": planned, "dispatched": dispatched}

    def _share_done(self) -> None:
        """Everything of this process's share was sent and answered: end the test (headless) or say so."""
        if self.finished or not self.headless:
            return
        self.finished = True
        if self.role == "worker":
            self.runner.send_message(protocol.FINISHED, Finished(self.jobs_received).data())
        else:
            gevent.spawn(self.runner.quit)

    # -- steering (web UI) ---------------------------------------------------------------------------------

    def set_rate(self, rate: float) -> None:
        """The open-loop rate for the whole test from shortly after now, on every process alike."""
        self.options.request_rate = rate
        from_offset = perf_counter() - self.start + STEER_LEAD_S
        if self.role == "master":
            self.runner.send_message(protocol.SET_RATE, SetRate(rate, from_offset).data())
        else:
            self._apply_rate(rate, from_offset)

    def _apply_rate(self, rate: float, from_offset: float) -> None:
        if isinstance(self.schedule, LiveSchedule):
            self.schedule.set_rate(rate, from_offset)
            self.rate_changed.set()

def _sample_requests(samples: list[Any]) -> list[Scheduled]:
    return [Scheduled(i, 0.0, s, rid) for i, (s, rid) in enumerate(zip(samples, request_ids(samples, len(samples)),
                                                                       strict=True))]


def attach(environment: Any) -> LocustRun:
    """Give ``environment`` its run: role-specific messages, the workload built before the run timer starts."""
    run = LocustRun(environment)
    environment.llmload = run
    runner = run.runner
    if runner is None:
        return run
    try:
        from llmload.core.health import reader_note
        from llmload.plugin.setup import install_shape

        if note := reader_note():  # (a bad LLMLOAD_READER is refused here, before Locust spawns a user)
            say(note)
        install_shape(run)
        from llmload.options import cluster_token

        run.register(cluster_token(run.options) if run.role != "local" else None)
        if run.role == "worker":
            return run
        from llmload.exporter.wiring import locust_exporter

        run.exporter = locust_exporter(run)  # a busy port fails here, before anything is sent
        run.prepare()  # before Locust starts its run timer (-t), not inside the timed run
    except LLMLoadError as exc:
        tell(f"error: {exc}")
        sys.exit(exc.exit_code)
    return run
