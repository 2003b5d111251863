"""Distributed ``llmload bench``: a master hands each worker its share of one global schedule; workers stream
records back in batches; the master keeps every record it received, notices dead workers, and re-assigns
what they had not sent yet.

Messages ride on Locust's master/worker channel under ``llm_*`` names (DESIGN §7)::

    master -> worker   llm_challenge {nonce}                       (with a cluster token: prove you know it)
    worker -> master   llm_auth      {proof}                       HMAC-SHA256(token, nonce + worker id)
    master -> worker   llm_job      {run, start_wall, items: [[index, offset, prompt, prompt_len, output_len]...],
                                     max_concurrency, stop_timeout}
    master -> worker   llm_stop     {force}                        force: cut off what is in flight now
    master -> worker   llm_revoke   {indices, resume}              requests moved elsewhere; resume: go on
    worker -> master   llm_resumed  {}                             this worker was frozen (SIGSTOP, swap): may I?
    worker -> master   llm_records  {records: [RequestRecord dicts], dispatched: [index...], clock}
    worker -> master   llm_done     {records, leaving, health}     leaving: stopped by a signal to the worker

Workers get jobs (and with them the API key) only once authenticated: with a cluster token set
(``LLMLOAD_CLUSTER_TOKEN`` or ``--cluster-token-file``) a worker must answer the master's challenge; a stranger
that connects is told to quit. Without a token every worker that connects is trusted.

A worker that was frozen longer than :data:`FREEZE_S` (its own loop stopped) asks the master before it sends
anything more: the master may have given its unsent requests to the others meanwhile.

Clocks: record times are the worker's ``perf_counter``; every batch carries the worker's
``time.time() - perf_counter()`` so the master moves them onto its own timeline.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

import gevent
from gevent.event import Event

from llmload.datasets.base import SampleRequest
from llmload.records import RequestRecord

#: how often workers ship record batches
BATCH_INTERVAL_S = 0.25
#: the first send is this far in the future when a job goes out, so every worker starts together
START_LEAD_S = 0.5
#: requests re-balanced to a joining worker are due at least this far in the future
REBALANCE_MARGIN_S = 2.0
#: a worker whose own loop did not run for this long was frozen, and checks with the master before it sends
FREEZE_S = 2.0
#: how long a resumed worker waits for the master's answer before it sends nothing more of its job
RESUME_WAIT_S = 10.0
_TIME_FIELDS = ("start", "first_token", "intended_send", "dispatched_at")


def clock_offset() -> float:
    """``wall - perf_counter`` on this host: adding it turns a perf_counter time into wall-clock time."""
    return time.time() - perf_counter()


def shift_record(record: RequestRecord, shift: float) -> None:
    """Move a record's times from a worker's perf_counter onto the master's (``shift`` = worker − master
    clock offset)."""
    if not shift:
        return
    for name in _TIME_FIELDS:
        value = getattr(record, name)
        if value is not None:
            setattr(record, name, value + shift)
    record.chunk_times = [t + shift for t in record.chunk_times]


def auth_proof(token: str, nonce: str, worker_id: str) -> str:
    """What a worker answers to the master's challenge: the token itself never goes over the wire."""
    return hmac.new(token.encode(), f"{nonce}:{worker_id}".encode(), hashlib.sha256).hexdigest()


def split_concurrency(total: int | None, workers: int) -> list[int | None]:
    """The global ``--max-concurrency`` split across workers (they add up to the total)."""
    if total is None:
        return [None] * workers
    return [total // workers + (1 if i < total % workers else 0) for i in range(workers)]


# -- worker ------------------------------------------------------------------------------------------------

class BenchWorker:
    """Runs the jobs a bench master sends; ships records back."""

    def __init__(self, runner: Any, make_user: Callable[[dict[str, Any]], Any], token: str | None = None,
                 log: Callable[[str], None] = print) -> None:
        self.runner = runner
        self.make_user = make_user
        self.token = token
        self.log = log
        self.stop_event = Event()
        #: set by a forced stop: cut off what is in flight now
        self.cut_event = Event()
        #: stopped on its own (:meth:`leave`), not by the master
        self.leaving = False
        self._pending: list[dict[str, Any]] = []
        self._dispatched: list[int] = []
        self._sent = 0
        self._jobs: list[gevent.Greenlet] = []
        self._flusher: gevent.Greenlet | None = None
        self._last_tick = perf_counter()
        #: the loop did not run for FREEZE_S or longer: check with the master before sending more
        self._frozen = False
        self._resumed = Event()
        runner.register_message("llm_job", self._on_job)
        runner.register_message("llm_stop", self._on_stop)
        runner.register_message("llm_revoke", self._on_revoke)
        runner.register_message("llm_challenge", self._on_challenge)
        #: requests the master moved to another worker before they were due
        self.revoked: set[int] = set()

    def leave(self) -> None:
        """Stop this worker's jobs (a signal to the worker): the master re-assigns what it had not sent."""
        self.leaving = True
        self.stop_event.set()

    @property
    def busy(self) -> bool:
        """A job is running."""
        return bool(self._jobs)

    def _on_challenge(self, msg: Any, **_: Any) -> None:
        if not self.token:
            self.log("the master asks for a cluster token and this worker has none "
                     "(set LLMLOAD_CLUSTER_TOKEN or --cluster-token-file)")
        nonce = str((msg.data or {}).get("nonce", ""))
        proof = auth_proof(self.token, nonce, self.runner.client_id) if self.token else ""
        self.runner.send_message("llm_auth", {"proof": proof})

    def _on_job(self, msg: Any, **_: Any) -> None:
        self._last_tick = perf_counter()
        self._jobs.append(gevent.spawn(self._run_job, msg.data))
        if self._flusher is None:
            self._flusher = gevent.spawn(self._flush_loop)

    def _on_revoke(self, msg: Any, **_: Any) -> None:
        data = msg.data or {}
        self.revoked.update(int(i) for i in data.get("indices", []))
        if data.get("resume"):
            self._resumed.set()

    def _on_stop(self, msg: Any, **_: Any) -> None:
        if (msg.data or {}).get("force"):
            self.cut_event.set()
        self.stop_event.set()

    def _may_send(self, index: int) -> bool:
        """Asked as request ``index`` is due. After a freeze, first ask the master what is still ours."""
        if self._frozen or perf_counter() - self._last_tick > FREEZE_S:
            self.log("this worker was frozen: asking the master which requests are still its own")
            self._resumed.clear()
            self.runner.send_message("llm_resumed", {})
            if not self._resumed.wait(RESUME_WAIT_S):
                self.log("the master did not answer after this worker was frozen: sending nothing more")
                self.stop_event.set()
                return False
            self._frozen = False
            self._last_tick = perf_counter()
        return index not in self.revoked

    def _run_job(self, job: dict[str, Any]) -> None:
        from llmload.bench.dispatch import run_open_loop
        from llmload.bench.health import HealthMonitor

        user = self.make_user(job["run"])
        items = job["items"]
        samples = [
            SampleRequest(prompt=p, prompt_len=pl, expected_output_len=ol, request_id=f"r{idx}")
            for idx, _off, p, pl, ol in items
        ]
        offsets = [off for _idx, off, _p, _pl, _ol in items]
        start_at = perf_counter() + (job["start_wall"] - time.time())
        health = HealthMonitor()
        health.start()
        result = run_open_loop(
            user.new_record, user.send, samples, offsets,
            max_concurrency=job.get("max_concurrency"), stop_event=self.stop_event, start_at=start_at,
            on_dispatch=lambda i: self._dispatched.append(items[i][0]),
            skip=lambda i: not self._may_send(items[i][0]),
            on_record=lambda r: self._pending.append(r.to_dict()),
            stop_timeout=float(job.get("stop_timeout") or 0.0),
            cut_event=self.cut_event,
            keep_records=False,
        )
        health.stop()
        self._jobs.remove(gevent.getcurrent())
        if not self._jobs:
            self._flush()
            self.runner.send_message("llm_done", {"records": self._sent, "leaving": self.leaving, "health": health.report(
                result.schedule_lags_s)})

    def _flush(self) -> None:
        if not self._pending and not self._dispatched:
            return
        records, self._pending = self._pending, []
        dispatched, self._dispatched = self._dispatched, []
        self._sent += len(records)
        self.runner.send_message("llm_records", {"records": records, "dispatched": dispatched,
                                                 "clock": clock_offset()})

    def _flush_loop(self) -> None:
        while True:
            for _ in range(round(BATCH_INTERVAL_S / 0.05)):
                gevent.sleep(0.05)
                now = perf_counter()
                if now - self._last_tick > FREEZE_S:
                    self._frozen = True
                self._last_tick = now
            self._flush()


# -- master ------------------------------------------------------------------------------------------------

@dataclass
class WorkerState:
    client_id: str
    index: int
    assigned: set[int] = field(default_factory=set)
    dispatched: set[int] = field(default_factory=set)
    records: int = 0
    done: bool = False
    lost: bool = False
    health: dict[str, Any] | None = None
    #: its unsent requests, given to other workers when it was thought dead
    reassigned_away: set[int] = field(default_factory=set)
    #: it stopped on its own (a signal to the worker) and said so in llm_done; ``left``: its rest was re-assigned
    leaving: bool = False
    left: bool = False


@dataclass
class MasterResult:
    records: list[RequestRecord]
    start: float
    end: float
    workers: list[WorkerState]
    #: sent by a worker that died before reporting them
    lost: int
    #: never sent (run stopped early)
    unsent: int
    schedule_lags_s: list[float]


class BenchMaster:
    """Drives a distributed run from the master's side."""

    def __init__(self, runner: Any, on_record: Callable[[RequestRecord], None] | None = None,
                 token: str | None = None, log: Callable[[str], None] = print) -> None:
        self.runner = runner
        self.on_record = on_record
        self.token = token
        self.log = log
        #: worker id -> nonce of the challenge sent to it
        self._challenged: dict[str, str] = {}
        #: workers that proved they hold the cluster token (all workers when there is none)
        self.authenticated: set[str] = set()
        self.workers: dict[str, WorkerState] = {}
        self.records: dict[int, RequestRecord] = {}
        #: requests re-assigned from a dead worker: sent late on purpose, so not counted as client lag
        self.reassigned: set[int] = set()
        self._my_clock = clock_offset()
        runner.register_message("llm_records", self._on_records)
        runner.register_message("llm_done", self._on_done)
        runner.register_message("llm_auth", self._on_auth)
        runner.register_message("llm_resumed", self._on_resumed)

    def ready_workers(self) -> list[str]:
        """Connected workers that may get jobs; challenges the ones not yet asked."""
        ready = [c.id for c in self.runner.clients.ready]
        if not self.token:
            return ready
        for cid in ready:
            if cid not in self._challenged:
                nonce = secrets.token_hex(16)
                self._challenged[cid] = nonce
                self.runner.send_message("llm_challenge", {"nonce": nonce}, client_id=cid)
        return [cid for cid in ready if cid in self.authenticated]

    def _on_auth(self, msg: Any, **_: Any) -> None:
        cid = msg.node_id
        nonce = self._challenged.get(cid)
        proof = str((msg.data or {}).get("proof", ""))
        if nonce is not None and self.token and hmac.compare_digest(proof, auth_proof(self.token, nonce, cid)):
            self.authenticated.add(cid)
            return
        self.log(f"a worker ({cid}) failed to authenticate with the cluster token: it gets no job and is told "
                 "to quit")
        self.runner.send_message("quit", None, client_id=cid)

    def _on_resumed(self, msg: Any, **_: Any) -> None:
        """A worker that was frozen asks what is still its own: nothing it had not sent, if we gave that away."""
        state = self.workers.get(msg.node_id)
        revoke: list[int] = []
        if state is not None and state.lost:
            revoke = sorted(state.reassigned_away)
            state.lost = False
            state.done = False
            self.log(f"worker{state.index} is back after a freeze: the {len(revoke)} requests it had not sent "
                     "stay with the others")
        self.runner.send_message("llm_revoke", {"indices": revoke, "resume": True}, client_id=msg.node_id)

    def wait_for_workers(self, expected: int, timeout_s: float, log: Callable[[str], None]) -> list[str]:
        deadline = perf_counter() + timeout_s
        last = -1
        while perf_counter() < deadline:
            ready = self.ready_workers()
            if len(ready) != last:
                log(f"{len(ready)}/{expected} workers connected")
                last = len(ready)
            if len(ready) >= expected:
                return sorted(ready, key=self.runner.get_worker_index)[:expected]
            gevent.sleep(0.1)
        return []

    def _on_records(self, msg: Any, **_: Any) -> None:
        state = self.workers.get(msg.node_id)
        data = msg.data
        shift = float(data.get("clock", self._my_clock)) - self._my_clock
        for raw in data.get("records", []):
            record = RequestRecord.from_dict(raw)
            shift_record(record, shift)
            record.compact()
            record.worker = f"worker{state.index}" if state else msg.node_id
            index = int(record.request_id[1:]) if record.request_id.startswith("r") else len(self.records)
            self.records[index] = record
            if state is not None:
                state.records += 1
            if self.on_record is not None:
                self.on_record(record)
        if state is not None:
            state.dispatched.update(data.get("dispatched", []))

    def _on_done(self, msg: Any, **_: Any) -> None:
        state = self.workers.get(msg.node_id)
        if state is not None:
            state.done = True
            state.health = (msg.data or {}).get("health")
            state.leaving = bool((msg.data or {}).get("leaving"))

    def run(
        self,
        client_ids: Sequence[str],
        run_config: dict[str, Any],
        samples: Sequence[SampleRequest],
        offsets: Sequence[float],
        max_concurrency: int | None,
        stop_event: Event,
        stop_timeout: float,
        log: Callable[[str], None],
        cut_event: Event | None = None,
    ) -> MasterResult:
        n = len(client_ids)
        shares = split_concurrency(max_concurrency, n)
        start_wall = time.time() + START_LEAD_S
        start = perf_counter() + START_LEAD_S
        for k, cid in enumerate(client_ids):
            state = WorkerState(cid, self.runner.get_worker_index(cid))
            state.assigned = set(range(k, len(samples), n))
            self.workers[cid] = state
            self._send_job(state, sorted(state.assigned), run_config, samples, offsets, start_wall, shares[k],
                           stop_timeout)
        stopped = forced = False
        while True:
            gevent.sleep(0.1)
            if stop_event.is_set() and not stopped:
                stopped = True
                for cid in self.workers:
                    self.runner.send_message("llm_stop", {"force": False}, client_id=cid)
            if cut_event is not None and cut_event.is_set() and not forced:
                forced = True
                for cid in self.workers:
                    self.runner.send_message("llm_stop", {"force": True}, client_id=cid)
            alive = {c.id for c in self.runner.clients.all if c.state != "missing"}
            for state in self.workers.values():
                if state.leaving and not state.left:
                    # the worker was stopped on its own (SIGTERM: a pod evicted): what it had not sent goes on
                    state.left = True
                    todo = sorted(state.assigned - state.dispatched - self._received(state))
                    log(f"worker{state.index} stopped on its own: {state.records} records received from it, "
                        f"{len(todo)} unsent requests re-assigned")
                    if not stopped:
                        self._reassign(state, todo, alive, run_config, samples, offsets, start_wall, stop_timeout)
                    continue
                if state.done or state.lost or state.client_id in alive:
                    continue
                state.lost = True
                received = self._received(state)
                todo = sorted(state.assigned - state.dispatched - received)
                in_flight = len(state.dispatched - received)
                log(f"worker{state.index} disappeared: {state.records} records received from it, "
                    f"{in_flight} requests in flight with it are lost, {len(todo)} unsent requests re-assigned")
                if not stopped:
                    self._reassign(state, todo, alive, run_config, samples, offsets, start_wall, stop_timeout)
            if not stopped:
                self._welcome_new_workers(run_config, samples, offsets, start, start_wall, log, stop_timeout)
            if all(s.done or s.lost for s in self.workers.values()):
                break
        end = max((r.end for r in self.records.values() if r.end is not None), default=perf_counter())
        end = max(end, max((r.start for r in self.records.values()), default=start))
        lost = sum(len(s.dispatched - self._received(s)) for s in self.workers.values() if s.lost)
        records = [self.records[i] for i in sorted(self.records)]
        lags = [lag for i, r in sorted(self.records.items())
                if i not in self.reassigned and (lag := r.schedule_lag) is not None]
        unsent = len(samples) - len(records) - lost
        return MasterResult(records, start, end, list(self.workers.values()), lost, max(0, unsent), lags)

    def _received(self, state: WorkerState) -> set[int]:
        return {i for i, r in self.records.items() if r.worker == f"worker{state.index}"}

    def _reassign(self, state: WorkerState, todo: list[int], alive: set[str], run_config: dict[str, Any],
                  samples: Sequence[SampleRequest], offsets: Sequence[float], start_wall: float,
                  stop_timeout: float) -> None:
        """Give ``todo`` (requests ``state`` never sent) to the workers still running, in equal shares."""
        survivors = [s for s in self.workers.values()
                     if s is not state and not s.lost and not s.leaving and not s.done and s.client_id in alive]
        if not survivors:
            survivors = [s for s in self.workers.values()
                         if s is not state and not s.lost and not s.leaving and s.client_id in alive]
        if not todo or not survivors:
            return
        state.assigned.difference_update(todo)
        state.reassigned_away.update(todo)
        for k, s in enumerate(survivors):
            part = todo[k :: len(survivors)]
            if part:
                self.reassigned.update(part)
                s.assigned.update(part)
                s.done = False
                self._send_job(s, part, run_config, samples, offsets, start_wall, None, stop_timeout)

    def _welcome_new_workers(self, run_config: dict[str, Any], samples: Sequence[SampleRequest],
                             offsets: Sequence[float], start: float, start_wall: float,
                             log: Callable[[str], None], stop_timeout: float) -> None:
        """A worker that connects mid-run takes an equal share of every busy worker's requests that are due
        more than ``REBALANCE_MARGIN_S`` from now (so none of them can have been sent already)."""
        ready = [cid for cid in self.ready_workers() if cid not in self.workers]
        for cid in ready:
            busy = [s for s in self.workers.values() if not s.done and not s.lost]
            if not busy:
                return
            horizon = perf_counter() - start + REBALANCE_MARGIN_S
            newcomer = WorkerState(cid, self.runner.get_worker_index(cid))
            self.workers[cid] = newcomer
            share = len(busy) + 1
            moved: list[int] = []
            for state in busy:
                future = sorted(i for i in state.assigned - state.dispatched if offsets[i] > horizon)
                take = future[::share][: len(future) // share]
                if take:
                    state.assigned.difference_update(take)
                    self.runner.send_message("llm_revoke", {"indices": take}, client_id=state.client_id)
                    moved.extend(take)
            if moved:
                newcomer.assigned = set(moved)
                self._send_job(newcomer, sorted(moved), run_config, samples, offsets, start_wall, None,
                               stop_timeout)
                log(f"worker{newcomer.index} joined: it takes {len(moved)} not yet due requests from the others")
            else:
                newcomer.done = True

    @staticmethod
    def merged_health(workers: Sequence[WorkerState], master: dict[str, Any]) -> dict[str, Any]:
        """The busiest worker's CPU and lags (the verdict is made from these by ``health.judge``)."""
        reports = [w.health for w in workers if w.health]
        if not reports:
            return master
        merged = dict(master)
        # schedule lag stays the master's: it leaves out requests re-assigned from dead workers (late on purpose)
        for key in ("cpu_percent_mean", "cpu_percent_max", "loop_lag_p99_ms", "read_lag_p99_ms"):
            values = [h[key] for h in reports if h.get(key) is not None]
            if values:
                merged[key] = max(values)  # the busiest worker decides
        merged["per_worker"] = {f"worker{w.index}": w.health for w in workers if w.health}
        return merged

    def _send_job(self, state: WorkerState, indices: Sequence[int], run_config: dict[str, Any],
                  samples: Sequence[SampleRequest], offsets: Sequence[float], start_wall: float,
                  max_concurrency: int | None, stop_timeout: float) -> None:
        items = [[i, float(offsets[i]), samples[i].prompt, samples[i].prompt_len, samples[i].expected_output_len]
                 for i in indices]
        self.runner.send_message(
            "llm_job",
            {"run": run_config, "start_wall": start_wall, "items": items, "max_concurrency": max_concurrency,
             "stop_timeout": stop_timeout},
            client_id=state.client_id,
        )
