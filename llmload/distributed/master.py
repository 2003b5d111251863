"""The master side of a distributed ``llmload bench``: hand out shares, collect records, handle dead,
frozen, leaving and joining workers (the messages: :mod:`llmload.core.protocol`); the bookkeeping of each
worker's share (:class:`WorkerState`, :func:`hand_over`) serves ``locust -f``'s master too."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

import gevent
from gevent.event import Event

from llmload.client.records import RequestRecord
from llmload.client.records.journal import RecordJournal
from llmload.client.records.kept import KeptRecords
from llmload.core import protocol
from llmload.core.conversation import request_count
from llmload.core.messages import clock_offset, job_items, read_records_message
from llmload.core.parts import RunParts, part_seconds
from llmload.core.protocol import START_LEAD_S, Done, Job, Revoke, Stop, TokenGate
from llmload.core.schedule import IndexLookup, Schedule
from llmload.distributed.indices import IndexSet
from llmload.metrics.spill import Chunked

#: requests re-balanced to a joining worker are due at least this far in the future
REBALANCE_MARGIN_S = 2.0


def split_concurrency(total: int | None, workers: int) -> list[int | None]:
    """The global ``--max-concurrency`` split across workers (they add up to the total)."""
    if total is None:
        return [None] * workers
    return [total // workers + (1 if i < total % workers else 0) for i in range(workers)]


@dataclass
class WorkerState:
    client_id: str
    index: int
    #: global schedule indices, one bit each (:class:`IndexSet`: a soak's bookkeeping stays small)
    assigned: IndexSet = field(default_factory=IndexSet)
    dispatched: IndexSet = field(default_factory=IndexSet)
    #: global indices of the records received from it
    received: IndexSet = field(default_factory=IndexSet)
    records: int = 0
    done: bool = False
    lost: bool = False
    health: dict[str, Any] | None = None
    #: its unsent requests, given to other workers when it was thought dead
    reassigned_away: IndexSet = field(default_factory=IndexSet)
    #: it stopped on its own (a signal to the worker) and said so in llm_done; ``left``: its rest was re-assigned
    leaving: bool = False
    left: bool = False
    #: jobs sent to it this run (its first share, re-assigned parts, a newcomer's share; not the later parts
    #: of its share, which join its first job)
    jobs_sent: int = 0
    #: the indices sent to it in any job or part
    sent: IndexSet = field(default_factory=IndexSet)
    #: its first job waits for the later parts of its share
    feeding: bool = False

    @property
    def name(self) -> str:
        return f"worker{self.index}"

    @property
    def unsent(self) -> list[int]:
        """Its requests it has not said it sent and has sent no record of: what another worker may send."""
        return list(self.assigned - self.dispatched - self.received)

    @property
    def in_flight(self) -> int:
        """Requests it sent whose records have not arrived (lost, if it is gone)."""
        return len(self.dispatched - self.received)


def alive_workers(runner: Any) -> set[str]:
    """The ids of the workers Locust has not marked missing (missed heartbeats)."""
    return {c.id for c in runner.clients.all if c.state != "missing"}


def lose_worker(state: WorkerState, workers: Iterable[WorkerState], alive: set[str], *,
                hand: bool = True) -> tuple[str, list[tuple[WorkerState, list[int]]]]:
    """``state``'s worker is gone: mark it lost and (``hand``: unless the run is stopping) move what it had not sent
    to the others by :func:`hand_over`. Returns the line to log and each receiver's part (send them)."""
    state.lost = True
    todo = state.unsent
    parts = hand_over(state, todo, workers, alive) if hand else []
    return (f"{state.name} disappeared: {state.records} records received from it, {state.in_flight} requests in "
            f"flight with it are lost, {len(todo)} unsent requests re-assigned"), parts


def revoke_from_lost(runner: Any, state: WorkerState) -> None:
    """Tell a worker taken for lost what was given away from it: if only its heartbeats were late (a starved
    process), it must not send those requests too. A dead worker never reads it."""
    if state.reassigned_away:
        runner.send_message(protocol.REVOKE, Revoke(sorted(state.reassigned_away)).data(),
                            client_id=state.client_id)


def answer_resumed(state: WorkerState | None, log: Callable[[str], None]) -> Revoke:
    """A worker that was frozen asks what is still its own (:mod:`llmload.distributed.freeze`): nothing it had not
    sent, if that was given away while it was taken for lost. It counts as running again. The one rule of both
    masters; the caller sends the answer."""
    revoke: list[int] = []
    if state is not None and state.lost:
        revoke = sorted(state.reassigned_away)
        state.lost = False
        state.done = False
        log(f"{state.name} is back after a freeze: the {len(revoke)} requests it had not sent stay with the others")
    return Revoke(revoke, resume=True)


def hand_over(state: WorkerState, todo: list[int], workers: Iterable[WorkerState],
              alive: set[str]) -> list[tuple[WorkerState, list[int]]]:
    """Move ``todo`` (requests ``state`` never sent) to the workers still running, in equal round-robin parts:
    the one re-assignment rule of both distributed ways in. Returns each receiver and its part (send them)."""
    def usable(s: WorkerState) -> bool:
        return s is not state and not s.lost and not s.leaving and s.client_id in alive

    workers = list(workers)
    survivors = [s for s in workers if usable(s) and not s.done] or [s for s in workers if usable(s)]
    if not todo or not survivors:
        return []
    state.assigned.difference_update(todo)
    state.reassigned_away.update(todo)
    parts = []
    for k, survivor in enumerate(survivors):
        part = todo[k :: len(survivors)]
        if part:
            survivor.assigned.update(part)
            survivor.done = False
            parts.append((survivor, part))
    return parts


def due_parts(parts: RunParts, elapsed: float, workers: Iterable[WorkerState]
              ) -> Iterator[tuple[WorkerState, list[int], bool]]:
    """The parts whose time has come, ``elapsed`` seconds into the run (:mod:`llmload.core.parts`), for each worker
    whose share comes in parts: ``(worker, its indices in the part not yet sent to it, more parts follow)``; the
    caller sends them (and counts them as sent). The one rule of both masters. A lost, leaving or done worker gets
    its parts too (what was handed away is not in them): one that was frozen gets the rest and the close when it
    wakes, with a request due or not; a dead one never reads them, and a stopped one drops them."""
    workers = list(workers)
    for lo, hi, last in parts.due(elapsed):
        for state in workers:
            if state.feeding:
                todo = [i for i in state.assigned.between(lo, hi) if i not in state.sent]
                state.feeding = not last
                yield state, todo, not last


@dataclass
class MasterResult:
    #: in send order (a :class:`~llmload.client.records.kept.JournalRecords`: read back from the journal)
    records: Sequence[RequestRecord]
    start: float
    end: float
    workers: list[WorkerState]
    #: sent by a worker that died before reporting them
    lost: int
    #: never sent (run stopped early)
    unsent: int
    schedule_lags_s: Sequence[float] | Chunked


@dataclass
class _Job:
    """What every job of one run shares."""

    run_config: dict[str, Any]
    schedule: Schedule
    start: float
    start_wall: float
    stop_timeout: float
    #: closed loop: ``--think-time`` spec (None: open loop)
    think: str | None = None
    #: where the schedule is cut into the parts sent as their time comes
    parts: RunParts | None = None


class BenchMaster:
    """Drives a distributed run from the master's side."""

    def __init__(self, runner: Any, on_record: Callable[[RequestRecord], None] | None = None,
                 token: str | None = None, log: Callable[[str], None] = print) -> None:
        self.runner = runner
        self.on_record = on_record
        #: where each record received is written as it arrives (docs/reliability.md, "Records journal")
        self.journal: RecordJournal | None = None
        self.log = log
        #: which workers proved they hold the cluster token (all of them when there is none)
        self.gate = TokenGate(runner, token, log)
        self.workers: dict[str, WorkerState] = {}
        #: the run's records, in the journal (in memory only where it cannot be written): a conversation files
        #: each of its turns under its own index and turn
        self.records = KeptRecords(None)
        #: requests re-assigned from a dead worker: sent late on purpose, so not counted as client lag
        self.reassigned = IndexSet()
        #: each record's schedule index (its own; by its id only for an older worker's)
        self._index_of = IndexLookup()
        self._my_clock = clock_offset()
        runner.register_message(protocol.RECORDS, self._on_records)
        runner.register_message(protocol.DONE, self._on_done)
        runner.register_message(protocol.RESUMED, self._on_resumed)

    # -- joining -------------------------------------------------------------------------------------------

    def ready_workers(self) -> list[str]:
        """Connected workers that may get jobs (:meth:`TokenGate.admit`: the others are challenged)."""
        return self.gate.admit(c.id for c in self.runner.clients.ready)

    def wait_for_workers(self, expected: int, timeout_s: float, log: Callable[[str], None],
                         check: Callable[[], None] | None = None) -> list[str]:
        """The first ``expected`` workers ready (authenticated), or [] after ``timeout_s``; ``check`` is called
        while waiting and may raise to give up sooner (a local worker that died)."""
        deadline = perf_counter() + timeout_s
        last = -1
        while perf_counter() < deadline:
            if check is not None:
                check()
            ready = self.ready_workers()
            if len(ready) != last:
                log(f"{len(ready)}/{expected} workers connected")
                last = len(ready)
            if len(ready) >= expected:
                return sorted(ready, key=self.runner.get_worker_index)[:expected]
            gevent.sleep(0.1)
        return []

    # -- messages from workers -----------------------------------------------------------------------------

    def _on_resumed(self, msg: Any, **_: Any) -> None:
        """A worker that was frozen asks what is still its own."""
        answer = answer_resumed(self.workers.get(msg.node_id), self.log)
        self.runner.send_message(protocol.REVOKE, answer.data(), client_id=msg.node_id)

    def _on_records(self, msg: Any, **_: Any) -> None:
        if not self.gate.trusted(msg.node_id):
            return  # a stranger's records are not the run's
        state = self.workers.get(msg.node_id)
        batch = read_records_message(msg.data, self._my_clock)
        for record in batch.records:
            record.compact()
            record.worker = state.name if state else msg.node_id
            index = self._index_of(record, -1 - self.records.received)
            if state is not None:
                state.records += 1
                state.received.add(index)
            if self.on_record is not None:
                self.on_record(record)
            # a re-assigned request was sent late on purpose: its lag is not the client's
            self.records.add(record, index, counts_lag=index not in self.reassigned)
        if state is not None:
            state.dispatched.update(batch.dispatched)

    def _on_done(self, msg: Any, **_: Any) -> None:
        state = self.workers.get(msg.node_id)
        if state is not None:
            done = Done.from_data(msg.data)
            if 0 < done.jobs < state.jobs_sent and not done.leaving:
                # it finished before a re-assigned part reached it: that part is still to come
                return
            state.done = True
            state.health = done.health
            state.leaving = done.leaving

    # -- the run -------------------------------------------------------------------------------------------

    def run(self, client_ids: Sequence[str], run_config: dict[str, Any], schedule: Schedule,
            max_concurrency: int | None, stop_event: Event, stop_timeout: float, log: Callable[[str], None],
            cut_event: Event | None = None, think: str | None = None) -> MasterResult:
        """Give each worker every n-th request of ``schedule`` and wait until all are done or lost. With
        ``think`` (a ``--think-time`` spec) each worker runs its share of the ``max_concurrency`` closed-loop
        users over its requests."""
        n = len(client_ids)
        shares = split_concurrency(max_concurrency, n)
        # a master runs one job after another (a sweep's points): nothing of the last one carries over
        self.records, self.reassigned, self.workers = KeptRecords(self.journal), IndexSet(), {}
        start = perf_counter() + START_LEAD_S
        parts = RunParts(schedule.offsets, part_seconds()) if think is None else RunParts.whole(len(schedule))
        job = _Job(run_config, schedule, start, start + clock_offset(), stop_timeout, think, parts)
        self._index_of = IndexLookup(schedule)
        if parts.more:
            log(f"each worker's share goes out in {parts.count} parts of {parts.part_s:g} s of the schedule, each "
                f"sent before it is due")
        for k, cid in enumerate(client_ids):
            state = WorkerState(cid, self.runner.get_worker_index(cid))
            state.assigned = IndexSet(schedule.share_indices(k, n))
            state.feeding = parts.more
            self.workers[cid] = state
            self._send_job(state, state.assigned.between(*parts.first), job, shares[k], first=True, more=parts.more)
        stopped = forced = False
        while not all(s.done or s.lost for s in self.workers.values()):
            gevent.sleep(0.1)
            if stop_event.is_set() and not stopped:
                stopped = True
                self._broadcast_stop(force=False)
            if cut_event is not None and cut_event.is_set() and not forced:
                forced = True
                self._broadcast_stop(force=True)
            self._check_workers(job, stopped, log)
            if not stopped:
                self._send_due_parts(job)
                self._welcome_new_workers(job, log)
        return self._result(job)

    def _send_due_parts(self, job: _Job) -> None:
        """The parts of each worker's share whose time has come (:mod:`llmload.distributed.parts`); what it was
        given already (a lost worker's requests, a newcomer's) is left out."""
        assert job.parts is not None
        for state, todo, more in due_parts(job.parts, perf_counter() - job.start, self.workers.values()):
            self._send_job(state, todo, job, None, follows=True, more=more)

    def _broadcast_stop(self, force: bool) -> None:
        for cid in self.workers:
            self.runner.send_message(protocol.STOP, Stop(force).data(), client_id=cid)

    def _check_workers(self, job: _Job, stopped: bool, log: Callable[[str], None]) -> None:
        """Re-assign what a leaving or vanished worker had not sent (unless the run is stopping)."""
        alive = alive_workers(self.runner)
        for state in self.workers.values():
            if state.leaving and not state.left:
                # the worker was stopped on its own (SIGTERM: a pod evicted): what it had not sent goes on
                state.left = True
                todo = state.unsent
                log(f"{state.name} stopped on its own: {state.records} records received from it, "
                    f"{len(todo)} unsent requests re-assigned")
                if not stopped:
                    self._reassign(state, todo, alive, job)
                continue
            if state.done or state.lost or state.client_id in alive:
                continue
            line, parts = lose_worker(state, self.workers.values(), alive, hand=not stopped)
            log(line)
            revoke_from_lost(self.runner, state)
            self._send_parts(parts, job)

    def _result(self, job: _Job) -> MasterResult:
        kept = self.records
        end = kept.last_end if kept.last_end is not None else perf_counter()
        end = max(end, kept.last_start if kept.last_start is not None else job.start)
        lost = sum(s.in_flight for s in self.workers.values() if s.lost)
        counted = kept.distinct()
        records = kept.in_send_order(counted)
        lags = kept.lags(counted)
        unsent = request_count(job.schedule) - len(records) - lost
        return MasterResult(records, job.start, end, list(self.workers.values()), lost, max(0, unsent), lags)

    def _reassign(self, state: WorkerState, todo: list[int], alive: set[str], job: _Job) -> None:
        """Give ``todo`` (requests ``state`` never sent) to the workers still running, in equal shares."""
        self._send_parts(hand_over(state, todo, self.workers.values(), alive), job)

    def _send_parts(self, parts: list[tuple[WorkerState, list[int]]], job: _Job) -> None:
        for survivor, part in parts:
            self.reassigned.update(part)
            self._send_job(survivor, part, job, None)

    def _welcome_new_workers(self, job: _Job, log: Callable[[str], None]) -> None:
        """A worker that connects mid-run takes an equal share of every busy worker's requests that are due
        more than ``REBALANCE_MARGIN_S`` from now (so none of them can have been sent already)."""
        for cid in [cid for cid in self.ready_workers() if cid not in self.workers]:
            busy = [s for s in self.workers.values() if not s.done and not s.lost]
            if not busy:
                return
            horizon = perf_counter() - job.start + REBALANCE_MARGIN_S
            newcomer = WorkerState(cid, self.runner.get_worker_index(cid))
            self.workers[cid] = newcomer
            share = len(busy) + 1
            moved: list[int] = []
            for state in busy:
                offsets = job.schedule.offsets
                future = [i for i in state.assigned - state.dispatched if offsets[i] > horizon]
                take = future[::share][: len(future) // share]
                if take:
                    state.assigned.difference_update(take)
                    self.runner.send_message(protocol.REVOKE, Revoke(take).data(), client_id=state.client_id)
                    moved.extend(take)
            if moved:
                newcomer.assigned = IndexSet(moved)
                self._send_job(newcomer, sorted(moved), job, None, first=True)
                log(f"{newcomer.name} joined: it takes {len(moved)} not yet due requests from the others")
            else:
                newcomer.done = True

    def _send_job(self, state: WorkerState, indices: Sequence[int], job: _Job, max_concurrency: int | None,
                  first: bool = False, more: bool = False, follows: bool = False) -> None:
        """A job (``more``: its later parts follow), or with ``follows`` a later part of the running one."""
        closed = None
        if job.think is not None:
            closed = {"users": max(1, max_concurrency or 1), "think": job.think}
        message = Job(job_items(job.schedule, indices), job.start_wall, first=first, max_concurrency=max_concurrency,
                      stop_timeout=job.stop_timeout, run=job.run_config, closed=closed, more=more, follows=follows)
        state.sent.update(indices)
        if not follows:
            state.jobs_sent += 1
        self.runner.send_message(protocol.JOB, message.data(), client_id=state.client_id)
