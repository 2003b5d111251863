"""The master/worker side of a distributed ``locust -f`` run (docs/design.md, "Distributed protocol").

    master -> worker   llm_plan      {items, start_wall, index, count, max_concurrency, live, model}
    master -> worker   llm_job       {items}                          more requests: a lost worker's unsent ones
    master -> worker   llm_stop      {}                               stop now: drain, ship, say llm_done
    master -> worker   llm_set       {request_rate, from_offset}      the web UI steered the open-loop rate
    worker -> master   llm_records   the one record batch schema (llmload.core.messages), with the indices
                                     of the requests it released
    worker -> master   llm_done      {planned, dispatched}            this worker's accounting, after its last batch
    worker -> master   llm_finished  {jobs}                           every job so far is sent and answered (headless)

The plan goes out in the master's ``test_start`` listener, before Locust's spawn messages on the same ordered
channel, so every worker has its share when its users start. In a headless open loop the master keeps each
worker's share as ``llmload bench``'s master does (:class:`~llmload.distributed.master.WorkerState`): a worker
that goes missing loses what it had in flight, and what it had not sent goes to the others
(:func:`~llmload.distributed.master.hand_over`, the one re-assignment rule). ``jobs`` in ``llm_finished`` says
how many jobs the worker had when it finished, so a finish sent before a re-assigned job arrived is not taken
for the end of that job.
"""

from __future__ import annotations

import sys
import time
from time import perf_counter
from typing import Any

import gevent

from llmload.core.messages import job_items, job_requests, read_records_message
from llmload.core.schedule import LiveSchedule, Schedule
from llmload.distributed.master import START_LEAD_S, WorkerState, alive_workers, lose_worker
from llmload.distributed.worker import BATCH_INTERVAL_S

#: how long past ``--stop-timeout`` the master waits for the workers' final batches
FINAL_BATCH_WAIT_S = 30.0
#: how often the master looks for workers Locust marked missing
WATCH_INTERVAL_S = 0.25


class ClusterRole:
    """The message handlers of :class:`~llmload.plugin.run.LocustRun` (a mixin: they share its state)."""

    runner: Any
    environment: Any
    options: Any
    schedule: Any
    workload: Any
    records: Any
    reports: dict[str, dict[str, Any]]
    shipper: Any
    finished: bool
    headless: bool
    start: float
    _plan: dict[str, Any] | None
    _finished_workers: set[str]
    _my_clock: float
    #: master, headless open loop: each worker's share, as bench's master keeps it
    cluster: dict[str, WorkerState]
    #: master: jobs given to each worker (its plan is the first)
    jobs: dict[str, int]
    #: worker: jobs received (the plan and each llm_job)
    jobs_received: int
    #: master: schedule indices re-assigned from lost workers (sent late on purpose: no schedule lag)
    reassigned: set[int]
    #: master: request (or conversation) id -> schedule index
    request_index: dict[str, int]

    @property
    def open_loop(self) -> bool:
        raise NotImplementedError  # the run's (LocustRun)

    def _apply_rate(self, rate: float, from_offset: float) -> None:
        raise NotImplementedError  # the run's (LocustRun)

    def register(self) -> None:
        """Register this role's messages on the runner."""
        if self.role == "worker":  # type: ignore[attr-defined]
            self.runner.register_message("llm_plan", self.on_plan)
            self.runner.register_message("llm_job", self.on_job)
            self.runner.register_message("llm_stop", self.on_stop, concurrent=True)
            self.runner.register_message("llm_set", self.on_set)
            gevent.spawn(self.ship_forever)
        elif self.role == "master":  # type: ignore[attr-defined]
            self.runner.register_message("llm_records", self.on_records)
            self.runner.register_message("llm_done", self.on_done)
            self.runner.register_message("llm_finished", self.on_finished)

    def _send_plans(self) -> None:
        """Each worker's share of the one schedule, sent before Locust's spawn messages."""
        from llmload.distributed import split_concurrency
        from llmload.plugin.setup import class_weights

        clients = sorted(self.runner.clients.values(), key=lambda c: self.runner.get_worker_index(c.id))
        count = max(1, len(clients))
        caps = split_concurrency(getattr(self.options, "max_concurrency", None) or None, count)
        start_wall = time.time() + START_LEAD_S
        self.start = perf_counter() + START_LEAD_S
        live = None
        if isinstance(self.schedule, LiveSchedule):
            s = self.schedule
            live = {"rate": s.rate, "burstiness": s.burstiness, "seed": s.seed,
                    "classes": class_weights(self.environment)}
        self.cluster, self.jobs, self.reassigned = {}, {}, set()
        track = live is None and self.open_loop and self.headless
        for k, client in enumerate(clients):
            if live is not None:
                items = sample_items(self.schedule.samples)
            else:
                assert isinstance(self.schedule, Schedule)
                indices = [e.index for e in self.schedule.share(k, count)]
                items = job_items(self.schedule, indices)
                if track:
                    state = WorkerState(client.id, self.runner.get_worker_index(client.id))
                    state.assigned = set(indices)
                    self.cluster[client.id] = state
            self.jobs[client.id] = 1
            self.runner.send_message("llm_plan", {"items": items, "start_wall": start_wall, "index": k,
                                                  "count": count, "max_concurrency": caps[k], "live": live,
                                                  "open_loop": self.open_loop, "headless": self.headless,
                                                  "model": self.workload.model}, client_id=client.id)
        if track:
            assert isinstance(self.schedule, Schedule)
            self.request_index = self.schedule.index_of()
            gevent.spawn(self._watch_workers)

    def _watch_workers(self) -> None:
        """Headless open loop: a worker Locust marks missing loses what it had in flight; what it had not sent
        goes to the others, as in ``llmload bench``."""
        while not self.finished and not self.control.stop.is_set():  # type: ignore[attr-defined]
            gevent.sleep(WATCH_INTERVAL_S)
            alive = alive_workers(self.runner)
            for state in self.cluster.values():
                if state.lost or state.done or state.client_id in alive:
                    continue
                line, parts = lose_worker(state, self.cluster.values(), alive)
                sys.stderr.write(f"llmload: {line}\n")
                assert isinstance(self.schedule, Schedule)
                for survivor, part in parts:
                    self.reassigned.update(part)
                    self.jobs[survivor.client_id] = self.jobs.get(survivor.client_id, 1) + 1
                    self._finished_workers.discard(survivor.client_id)
                    self.runner.send_message("llm_job", {"items": job_items(self.schedule, part)},
                                             client_id=survivor.client_id)
            self._maybe_finish()

    def _maybe_finish(self) -> None:
        """Headless: every worker still there finished every job it was given: end the test."""
        alive = alive_workers(self.runner)
        if not self.finished and alive and all(cid in self._finished_workers for cid in alive):
            self.finished = True
            gevent.spawn(self.runner.quit)

    def _await_final_batches(self) -> None:
        """Stop every worker's share and wait for its last records (Locust's quit waits only 0.5 s)."""
        waiting = [c.id for c in self.runner.clients.all if c.id not in self.reports]
        for cid in waiting:
            self.runner.send_message("llm_stop", {}, client_id=cid)
        deadline = perf_counter() + float(self.environment.stop_timeout or 0.0) + FINAL_BATCH_WAIT_S
        while perf_counter() < deadline:
            alive = alive_workers(self.runner)
            if all(cid in self.reports or cid not in alive for cid in waiting):
                return
            gevent.sleep(0.05)

    def on_records(self, msg: Any, **_: Any) -> None:
        batch = read_records_message(msg.data, self._my_clock)
        name = f"worker{self.runner.get_worker_index(msg.node_id)}"
        state = self.cluster.get(msg.node_id)
        for record in batch.records:
            record.worker = name
            self.records.add(record)
            if state is not None:
                state.records += 1
                state.received.add(self.request_index.get(record.conversation_id or record.request_id, -1))
        if state is not None:
            state.dispatched.update(batch.dispatched)

    def on_done(self, msg: Any, **_: Any) -> None:
        self.reports[msg.node_id] = dict(msg.data or {})
        if (state := self.cluster.get(msg.node_id)) is not None:
            state.done = True

    def on_finished(self, msg: Any, **_: Any) -> None:
        if int((msg.data or {}).get("jobs", 1)) >= self.jobs.get(msg.node_id, 1):
            self._finished_workers.add(msg.node_id)
        self._maybe_finish()

    def on_plan(self, msg: Any, **_: Any) -> None:
        self._plan = dict(msg.data or {})
        self.headless = bool(self._plan.get("headless", True))  # the master's web UI decides
        self.jobs_received = 1

    def on_job(self, msg: Any, **_: Any) -> None:
        """More requests for this worker's open loop (a lost worker's unsent ones), on the same run clock."""
        self.jobs_received += 1
        self.add_requests(job_requests((msg.data or {}).get("items", [])))  # type: ignore[attr-defined]

    def on_stop(self, msg: Any = None, **_: Any) -> None:
        self.runner.stop()  # fires test_stopping / test_stop here: the share drains and llm_done goes out

    def on_set(self, msg: Any, **_: Any) -> None:
        data = msg.data or {}
        if data.get("request_rate") is not None:
            self.options.request_rate = float(data["request_rate"])
            self._apply_rate(float(data["request_rate"]), float(data.get("from_offset", 0.0)))

    def ship_forever(self) -> None:
        assert self.shipper is not None
        while True:
            gevent.sleep(BATCH_INTERVAL_S)
            self.shipper.flush()


def sample_items(samples: list[Any]) -> list[list[Any]]:
    """Every sample as a job item (the web UI's live schedule: each worker draws the whole sequence)."""
    from llmload.core.messages import item
    from llmload.core.schedule import Scheduled

    return [item(Scheduled(i, 0.0, s, s.request_id or str(i))) for i, s in enumerate(samples)]
