"""The master/worker side of a distributed ``locust -f`` run, on the one cluster protocol
(:mod:`llmload.core.protocol`; docs/design.md, "Distributed protocol").

The master's ``test_start`` listener admits the workers (the cluster token's challenge, when one is set) and sends
each its share as its first ``llm_job``, before Locust's spawn messages on the same ordered channel, so every
worker has its share when its users start. Workers ship records through the one record path
(:mod:`llmload.core.messages`), report their requests in flight (``llm_live``), say ``llm_finished`` when a
headless share is sent and answered, and ``llm_done`` with their accounting after the last batch.

In a headless open loop the master keeps each worker's share as ``llmload bench``'s master does
(:class:`~llmload.distributed.master.WorkerState`): a worker that goes missing loses what it had in flight, and
what it had not sent goes to the others in another ``llm_job`` (:func:`~llmload.distributed.master.hand_over`,
the one re-assignment rule). ``jobs`` in ``llm_finished`` says how many jobs the worker had when it finished, so a
finish sent before a re-assigned job arrived is not taken for the end of that job.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from time import perf_counter
from typing import Any

import gevent

from llmload.core import protocol
from llmload.core.messages import clock_offset, job_items, job_requests, read_records_message
from llmload.core.parts import RunParts, part_seconds
from llmload.core.protocol import (
    BATCH_INTERVAL_S,
    LIVE_INTERVAL_S,
    LIVE_STALE_S,
    START_LEAD_S,
    Done,
    Finished,
    Job,
    Live,
    SetRate,
    Stop,
    TokenGate,
)
from llmload.core.schedule import IndexLookup, LiveSchedule, Schedule, Scheduled
from llmload.distributed.freeze import FreezeGuard
from llmload.distributed.indices import IndexSet
from llmload.distributed.master import (
    WorkerState,
    alive_workers,
    answer_resumed,
    due_parts,
    lose_worker,
    revoke_from_lost,
)
from llmload.plugin.console import tell

#: how long past ``--stop-timeout`` the master waits for the workers' final batches
FINAL_BATCH_WAIT_S = 30.0
#: how often the master looks for workers Locust marked missing
WATCH_INTERVAL_S = 0.25
#: how long the master's test start waits for the workers to answer the cluster token's challenge
ADMIT_WAIT_S = 10.0


class ClusterRole:
    """The message handlers of :class:`~llmload.plugin.run.LocustRun` (a mixin: they share its state)."""

    runner: Any
    environment: Any
    options: Any
    schedule: Any
    workload: Any
    records: Any
    reports: dict[str, Done]
    shipper: Any
    finished: bool
    headless: bool
    start: float
    in_flight: int
    control: Any
    #: worker: its first job of the test (its share and what the master's options decided)
    plan: Job | None
    #: worker: after a freeze, asks the master which requests are still its own (registers llm_revoke)
    freeze: FreezeGuard | None
    #: master: the cluster token's gate (every worker trusted without a token)
    gate: TokenGate | None
    #: master: each worker's last ``llm_live`` (in flight, perf_counter when it arrived)
    worker_live: dict[str, tuple[int, float]]
    _finished_workers: set[str]
    _my_clock: float
    #: master, headless open loop: each worker's share, as bench's master keeps it
    cluster: dict[str, WorkerState]
    #: master: jobs given to each worker (its plan is the first)
    jobs: dict[str, int]
    #: worker: jobs received (the plan and each llm_job)
    jobs_received: int
    #: master: schedule indices re-assigned from lost workers (sent late on purpose: no schedule lag)
    reassigned: IndexSet
    #: master: each record's schedule index (its own; by its id only for an older worker's)
    index_of: IndexLookup
    #: master, headless open loop: where the schedule is cut into the parts sent as their time comes
    parts: RunParts | None

    def __init__(self) -> None:
        super().__init__()
        self.plan = None
        self.freeze = None
        self.gate = None
        self.worker_live = {}
        self._start_wall = 0.0
        self.cluster = {}
        self.jobs = {}
        self.reassigned = IndexSet()
        self.index_of = IndexLookup()
        self.parts = None
        self.jobs_received = 1
        self._my_clock = clock_offset()

    @property
    def open_loop(self) -> bool:
        raise NotImplementedError  # the run's (LocustRun)

    def take_part(self, job: Job) -> None:
        raise NotImplementedError  # the run's (plugin.share.ShareRole)

    def add_requests(self, requests: Sequence[Scheduled]) -> None:
        raise NotImplementedError  # the run's (plugin.share.ShareRole)

    def _apply_rate(self, rate: float, from_offset: float) -> None:
        raise NotImplementedError  # the run's (LocustRun)


    def register(self, token: str | None) -> None:
        """Register this role's messages on the runner (``token``: the cluster token, or None)."""
        if self.role == "worker":  # type: ignore[attr-defined]
            self.runner.register_message(protocol.JOB, self.on_job)
            self.runner.register_message(protocol.STOP, self.on_stop, concurrent=True)
            self.runner.register_message(protocol.SET_RATE, self.on_set)
            protocol.answer_challenge(self.runner, token, tell)
            self.freeze = FreezeGuard(self.runner, tell, stop=lambda: self.control.stop.set())
            gevent.spawn(self.freeze.tick_forever)
            gevent.spawn(self.ship_forever)
            gevent.spawn(self.report_live_forever)
        elif self.role == "master":  # type: ignore[attr-defined]
            self.gate = TokenGate(self.runner, token, tell)
            self.runner.register_message(protocol.RECORDS, self.on_records)
            self.runner.register_message(protocol.DONE, self.on_done)
            self.runner.register_message(protocol.FINISHED, self.on_finished)
            self.runner.register_message(protocol.LIVE, self.on_live)
            self.runner.register_message(protocol.RESUMED, self.on_resumed)

    def admitted_workers(self) -> list[Any]:
        """The connected workers that may get a share, by worker index: without a cluster token all of them;
        with one, those that answered its challenge within :data:`ADMIT_WAIT_S` (the rest are told to quit)."""
        clients = sorted(self.runner.clients.values(), key=lambda c: self.runner.get_worker_index(c.id))
        gate = self.gate
        if gate is None or not gate.token:
            return clients
        ids = {c.id for c in clients}
        deadline = perf_counter() + ADMIT_WAIT_S
        # until every worker answered, rightly or wrongly (a wrong proof need not be waited for)
        while len(gate.admit(ids)) + len(ids & gate.refused) < len(ids) and perf_counter() < deadline:
            gevent.sleep(0.05)
        admitted = set(gate.admit(ids))
        for client in clients:
            if client.id not in admitted and client.id not in gate.refused:  # a wrong proof was told already
                tell(f"worker {client.id} did not answer the cluster token's challenge: it gets no share and is "
                     "told to quit")
                self.runner.send_message("quit", None, client_id=client.id)
        return [c for c in clients if c.id in admitted]

    def worker_name(self, client_id: str) -> str:
        """How records, summaries and results name a worker: ``worker{index}``, as bench's master does."""
        return f"worker{self.runner.get_worker_index(client_id)}"

    def in_flight_total(self) -> int | None:
        """Requests in flight over the whole run: this process's own, or on a master the workers' last
        ``llm_live`` reports (one at most :data:`LIVE_STALE_S` old from each worker that has not said
        ``llm_done``; None before any arrived: left out rather than shown as 0). The live tab, the saturation
        test and ``--prometheus-port`` all read this one count."""
        if self.role != "master":  # type: ignore[attr-defined]
            return self.in_flight
        if not self.worker_live:
            return None
        now = perf_counter()
        return sum(n for node, (n, at) in list(self.worker_live.items())
                   if now - at <= LIVE_STALE_S and node not in self.reports)

    def _send_plans(self) -> None:
        """Each worker's share of the one schedule, sent before Locust's spawn messages."""
        from llmload.distributed import split_concurrency
        from llmload.plugin.setup import class_weights

        clients = self.admitted_workers()
        count = max(1, len(clients))
        caps = split_concurrency(getattr(self.options, "max_concurrency", None) or None, count)
        start_wall = self._start_wall = time.time() + START_LEAD_S
        self.start = perf_counter() + START_LEAD_S
        live = None
        if isinstance(self.schedule, LiveSchedule):
            s = self.schedule
            live = {"rate": s.rate, "burstiness": s.burstiness, "seed": s.seed,
                    "classes": class_weights(self.environment)}
        self.cluster, self.jobs, self.reassigned = {}, {}, IndexSet()
        track = live is None and self.open_loop and self.headless
        # a tracked share goes in parts as their time comes (core/parts); an untracked one whole
        parts = self.parts = (RunParts(self.schedule.offsets, part_seconds())
                              if track and isinstance(self.schedule, Schedule) else None)
        if parts is not None and parts.more:
            tell(f"each worker's share goes out in {parts.count} parts of {parts.part_s:g} s of the schedule, each "
                 "sent before it is due")
        for k, client in enumerate(clients):
            items: list[list[Any]] | dict[str, Any]
            more = False
            if live is not None:
                items = sample_items(self.schedule.samples)
            else:
                assert isinstance(self.schedule, Schedule)
                indices = self.schedule.share_indices(k, count)
                if parts is not None:
                    state = WorkerState(client.id, self.runner.get_worker_index(client.id))
                    state.assigned = IndexSet(indices)
                    state.feeding = more = parts.more
                    indices = state.assigned.between(*parts.first)
                    state.sent.update(indices)
                    self.cluster[client.id] = state
                items = job_items(self.schedule, indices)
            self.jobs[client.id] = 1
            job = Job(items, start_wall, first=True, part=(k, count), max_concurrency=caps[k],
                      stop_timeout=float(self.environment.stop_timeout or 0.0), live=live,
                      open_loop=self.open_loop, headless=self.headless, model=self.workload.model, more=more)
            self.runner.send_message(protocol.JOB, job.data(), client_id=client.id)
        if track:
            assert isinstance(self.schedule, Schedule)
            self.index_of = IndexLookup(self.schedule)
            gevent.spawn(self._watch_workers)

    def _watch_workers(self) -> None:
        """Headless open loop: a worker Locust marks missing loses what it had in flight; what it had not sent
        goes to the others, as in ``llmload bench``."""
        while not self.finished and not self.control.stop.is_set():
            gevent.sleep(WATCH_INTERVAL_S)
            self._send_due_parts()
            alive = alive_workers(self.runner)
            for state in self.cluster.values():
                if state.lost or state.done or state.client_id in alive:
                    continue
                line, parts = lose_worker(state, self.cluster.values(), alive)
                tell(line)
                revoke_from_lost(self.runner, state)
                assert isinstance(self.schedule, Schedule)
                for survivor, part in parts:
                    self.reassigned.update(part)
                    survivor.sent.update(part)  # its later parts leave them out
                    self.jobs[survivor.client_id] = self.jobs.get(survivor.client_id, 1) + 1
                    self._finished_workers.discard(survivor.client_id)
                    job = Job(job_items(self.schedule, part), self._start_wall, first=False)
                    self.runner.send_message(protocol.JOB, job.data(), client_id=survivor.client_id)
            self._maybe_finish()

    def _send_due_parts(self) -> None:
        """The parts of each worker's share whose time has come, less what it was given already (a lost
        worker's requests), as ``llmload bench``'s master sends them."""
        if self.parts is None:
            return
        assert isinstance(self.schedule, Schedule)
        for state, todo, more in due_parts(self.parts, perf_counter() - self.start, self.cluster.values()):
            state.sent.update(todo)
            job = Job(job_items(self.schedule, todo), self._start_wall, first=False, more=more, follows=True)
            self.runner.send_message(protocol.JOB, job.data(), client_id=state.client_id)

    def _maybe_finish(self) -> None:
        """Headless: every worker still there finished every job it was given: end the test."""
        alive = alive_workers(self.runner)
        if not self.finished and alive and all(cid in self._finished_workers for cid in alive):
            self.finished = True
            gevent.spawn(self.runner.quit)

    def _await_final_batches(self) -> None:
        """Stop every worker's share and wait for its last records (Locust's quit waits only 0.5 s)."""
        waiting = [c.id for c in self.runner.clients.all if c.id not in self.reports]
        stop = Stop().data()  # never force: this is Locust's end of the test, which drains
        for cid in waiting:
            self.runner.send_message(protocol.STOP, stop, client_id=cid)
        deadline = perf_counter() + float(self.environment.stop_timeout or 0.0) + FINAL_BATCH_WAIT_S
        while perf_counter() < deadline:
            alive = alive_workers(self.runner)
            if all(cid in self.reports or cid not in alive for cid in waiting):
                return
            gevent.sleep(0.05)

    def on_records(self, msg: Any, **_: Any) -> None:
        if self.gate is not None and not self.gate.trusted(msg.node_id):
            return  # a stranger's records are not the run's
        batch = read_records_message(msg.data, self._my_clock)
        name = self.worker_name(msg.node_id)
        state = self.cluster.get(msg.node_id)
        for record in batch.records:
            record.worker = name
            index = self.index_of(record, -1)
            # a re-assigned request was sent late on purpose: its lag is not the client's
            self.records.add(record, counts_lag=index not in self.reassigned)
            if state is not None:
                state.records += 1
                state.received.add(index)
        if state is not None:
            state.dispatched.update(batch.dispatched)

    def on_done(self, msg: Any, **_: Any) -> None:
        if self.gate is not None and not self.gate.trusted(msg.node_id):
            return
        self.reports[msg.node_id] = Done.from_data(msg.data)
        if (state := self.cluster.get(msg.node_id)) is not None:
            state.done = True

    def on_finished(self, msg: Any, **_: Any) -> None:
        if Finished.from_data(msg.data).jobs >= self.jobs.get(msg.node_id, 1):
            self._finished_workers.add(msg.node_id)
        self._maybe_finish()

    def on_resumed(self, msg: Any, **_: Any) -> None:
        """A worker that was frozen asks what is still its own (it may have been taken for lost meanwhile)."""
        if self.gate is not None and not self.gate.trusted(msg.node_id):
            return
        answer = answer_resumed(self.cluster.get(msg.node_id), tell)
        self.runner.send_message(protocol.REVOKE, answer.data(), client_id=msg.node_id)

    def on_live(self, msg: Any, **_: Any) -> None:
        self.worker_live[msg.node_id] = (Live.from_data(msg.data).in_flight, perf_counter())

    def on_job(self, msg: Any, **_: Any) -> None:
        """The first job of a test is this worker's share (kept until its users start); a later one holds more
        requests for its open loop (a lost worker's unsent ones), on the same run clock."""
        job = Job.from_data(msg.data)
        if self.freeze is not None:
            self.freeze.touch()
        if job.follows:  # a later part of the share: not a job of its own
            self.take_part(job)
            return
        if job.first:
            if self.freeze is not None:
                self.freeze.reset()
            self.plan = job
            self.headless = job.headless  # the master's web UI decides
            self.jobs_received = 1
            return
        self.jobs_received += 1
        self.add_requests(job_requests(job.items))

    def on_stop(self, msg: Any = None, **_: Any) -> None:
        if msg is not None and Stop.from_data(msg.data).force:
            self.control.cut.set()
        self.runner.stop()  # fires test_stopping / test_stop here: the share drains and llm_done goes out

    def on_set(self, msg: Any, **_: Any) -> None:
        steer = SetRate.from_data(msg.data)
        self.options.request_rate = float(steer.request_rate)
        self._apply_rate(float(steer.request_rate), float(steer.from_offset))

    def ship_forever(self) -> None:
        assert self.shipper is not None
        while True:
            gevent.sleep(BATCH_INTERVAL_S)
            self.shipper.flush()

    def report_live_forever(self) -> None:
        """Tell the master this worker's requests in flight, every :data:`LIVE_INTERVAL_S` while a test runs."""
        while True:
            gevent.sleep(LIVE_INTERVAL_S)
            if self.runner.state in ("spawning", "running", "stopping") or self.in_flight:
                try:
                    self.runner.send_message(protocol.LIVE, Live(int(self.in_flight)).data())
                except Exception:  # the master is gone or reconnecting: the next report will do
                    pass


def sample_items(samples: list[Any]) -> list[list[Any]]:
    """Every sample as a job item (the web UI's live schedule: each worker draws the whole sequence)."""
    from llmload.core.messages import item

    return [item(Scheduled(i, 0.0, s, s.request_id or str(i))) for i, s in enumerate(samples)]
