"""The worker side of a distributed ``llmload bench``: run the jobs the master sends, ship records back
(the messages: :mod:`llmload.core.protocol`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gevent
from gevent.event import Event

from llmload.core import protocol
from llmload.core.conversation import request_count, turn_count
from llmload.core.dispatch import RequestFeed, StopControl, Tally
from llmload.core.messages import clock_offset, job_requests
from llmload.core.protocol import BATCH_INTERVAL_S, Done, Job, Stop
from llmload.core.run import send_share
from llmload.core.schedule import Scheduled
from llmload.core.sink import BatchShipper
from llmload.distributed.freeze import FreezeGuard


class BenchWorker:
    """Runs the jobs a bench master sends; ships records back."""

    def __init__(self, runner: Any, make_user: Callable[[dict[str, Any]], Any], token: str | None = None,
                 log: Callable[[str], None] = print) -> None:
        self.runner = runner
        self.make_user = make_user
        self.log = log
        self.control = StopControl()
        #: stopped on its own (:meth:`leave`), not by the master
        self.leaving = False
        self.shipper = BatchShipper(runner.send_message)
        self._jobs: list[gevent.Greenlet] = []
        self._flusher: gevent.Greenlet | None = None
        #: after a freeze, asks the master which requests are still this worker's (registers llm_revoke)
        self.freeze = FreezeGuard(runner, log, stop=lambda: self.control.stop.set())
        #: requests of this run's jobs so far (every turn is one), and how many of them were released
        self.planned = 0
        self.released = 0
        #: jobs taken in this run (said in llm_done, so the master knows which of its jobs it closes)
        self.jobs_taken = 0
        #: the running job's feed, when its share comes in parts (later parts join it; they are not jobs)
        self._feed: RequestFeed | None = None
        runner.register_message(protocol.JOB, self._on_job)
        runner.register_message(protocol.STOP, self._on_stop)
        protocol.answer_challenge(runner, token, log)

    @property
    def cut_event(self) -> Event:
        return self.control.cut

    def leave(self) -> None:
        """Stop this worker's jobs (a signal to the worker): the master re-assigns what it had not sent."""
        self.leaving = True
        self.control.stop.set()

    @property
    def busy(self) -> bool:
        """A job is running."""
        return bool(self._jobs)

    def _on_job(self, msg: Any, **_: Any) -> None:
        self.freeze.touch()
        job = Job.from_data(msg.data)
        if job.follows:
            self._take_part(job)
            return
        if job.first and not self._jobs and not self.leaving:
            # a worker runs one run after another (a sweep's points): the last run's stop, revocations (its
            # indices) and accounting do not apply to this one
            self.control = StopControl()
            self.freeze.reset()
            self.planned = self.released = self.jobs_taken = 0
        self.jobs_taken += 1
        first = job_requests(job.items)
        self.planned += request_count(first)
        requests: Sequence[Scheduled] | RequestFeed = first
        if job.more:
            requests = self._feed = RequestFeed(first, self.control.stop)
        self._jobs.append(gevent.spawn(self._run_job, job, requests))
        if self._flusher is None:
            self._flusher = gevent.spawn(self._flush_loop)
            gevent.spawn(self.freeze.tick_forever)

    def _take_part(self, job: Job) -> None:
        """A later part of the running share: into its loop (none open: the job stopped, the part is not sent)."""
        if self._feed is None:
            return
        part = job_requests(job.items)
        self.planned += request_count(part)
        self._feed.add(part, job.more)
        if not job.more:
            self._feed = None

    def _on_stop(self, msg: Any, **_: Any) -> None:
        if Stop.from_data(msg.data).force:
            self.control.cut.set()
        self.control.stop.set()

    def _run_job(self, job: Job, requests: Sequence[Scheduled] | RequestFeed) -> None:
        from llmload.core.health import HealthMonitor

        assert job.run is not None, "a bench job carries the run's user settings"
        user = self.make_user(job.run)
        self.control.stop_timeout = float(job.stop_timeout or 0.0)
        start_at = job.start_wall - clock_offset()
        health = HealthMonitor(reactor=user.pool.reactor)
        health.start()
        try:
            tally = self._dispatch(job, requests, user, start_at)
        finally:
            health.stop()
        self._jobs.remove(gevent.getcurrent())
        if requests is self._feed:
            self._feed = None  # stopped before its last part
        if not self._jobs:
            self.shipper.flush()
            done = Done(records=self.shipper.shipped, planned=self.planned, dispatched=self.released,
                        leaving=self.leaving, health=health.report(tally.schedule_lags_s), jobs=self.jobs_taken)
            self.runner.send_message(protocol.DONE, done.data())
        user.pool.close()  # this job's connections: the next job builds its own user

    def _released(self, request: Scheduled) -> None:
        self.released += turn_count(request.sample)
        self.shipper.dispatched(request.index)

    def _dispatch(self, job: Job, requests: Sequence[Scheduled] | RequestFeed, user: Any, start_at: float) -> Tally:
        """The job's loop (:func:`llmload.core.run.send_share`): its share of the open-loop schedule, or its
        closed-loop users over its requests."""
        closed = job.closed or {}
        return send_share(requests, lambda _: user, self.shipper, control=self.control,
                          max_concurrency=job.max_concurrency, closed_users=closed.get("users"),
                          think=closed.get("think"), start_at=start_at, skip=lambda r: not self.freeze.may_send(r),
                          on_dispatch=self._released)

    def _flush_loop(self) -> None:
        while True:
            gevent.sleep(BATCH_INTERVAL_S)
            self.shipper.flush()
