"""The worker side of a distributed ``llmload bench``: run the jobs the master sends, ship records back."""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable
from time import perf_counter
from typing import Any

import gevent
from gevent.event import Event

from llmload.core.dispatch import RequestQueue, StopControl, Tally, run_closed_loop, run_open_loop
from llmload.core.messages import job_requests
from llmload.core.schedule import Scheduled
from llmload.core.sink import BatchShipper

#: how often workers ship record batches
BATCH_INTERVAL_S = 0.25
#: a worker whose own loop did not run for this long was frozen, and checks with the master before it sends
FREEZE_S = 2.0
#: how long a resumed worker waits for the master's answer before it sends nothing more of its job
RESUME_WAIT_S = 10.0


def auth_proof(token: str, nonce: str, worker_id: str) -> str:
    """What a worker answers to the master's challenge: the token itself never goes over the wire."""
    return hmac.new(token.encode(), f"{nonce}:{worker_id}".encode(), hashlib.sha256).hexdigest()


class BenchWorker:
    """Runs the jobs a bench master sends; ships records back."""

    def __init__(self, runner: Any, make_user: Callable[[dict[str, Any]], Any], token: str | None = None,
                 log: Callable[[str], None] = print) -> None:
        self.runner = runner
        self.make_user = make_user
        self.token = token
        self.log = log
        self.control = StopControl()
        #: stopped on its own (:meth:`leave`), not by the master
        self.leaving = False
        self.shipper = BatchShipper(runner.send_message)
        self._jobs: list[gevent.Greenlet] = []
        self._flusher: gevent.Greenlet | None = None
        self._last_tick = perf_counter()
        #: the loop did not run for FREEZE_S or longer: check with the master before sending more
        self._frozen = False
        self._resumed = Event()
        #: requests the master moved to another worker before they were due
        self.revoked: set[int] = set()
        runner.register_message("llm_job", self._on_job)
        runner.register_message("llm_stop", self._on_stop)
        runner.register_message("llm_revoke", self._on_revoke)
        runner.register_message("llm_challenge", self._on_challenge)

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

    def _on_challenge(self, msg: Any, **_: Any) -> None:
        if not self.token:
            self.log("the master asks for a cluster token and this worker has none "
                     "(set LLMLOAD_CLUSTER_TOKEN or --cluster-token-file)")
        nonce = str((msg.data or {}).get("nonce", ""))
        proof = auth_proof(self.token, nonce, self.runner.client_id) if self.token else ""
        self.runner.send_message("llm_auth", {"proof": proof})

    def _on_job(self, msg: Any, **_: Any) -> None:
        self._last_tick = perf_counter()
        if not self._jobs and not self.leaving:
            # a worker runs one job after another (a sweep's points): the last job's stop and revocations
            # (its indices) do not apply to this one
            self.control = StopControl()
            self.revoked = set()
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
            self.control.cut.set()
        self.control.stop.set()

    def _may_send(self, request: Scheduled) -> bool:
        """Asked as a request is due. After a freeze, first ask the master what is still ours."""
        if self._frozen or perf_counter() - self._last_tick > FREEZE_S:
            self.log("this worker was frozen: asking the master which requests are still its own")
            self._resumed.clear()
            self.runner.send_message("llm_resumed", {})
            if not self._resumed.wait(RESUME_WAIT_S):
                self.log("the master did not answer after this worker was frozen: sending nothing more")
                self.control.stop.set()
                return False
            self._frozen = False
            self._last_tick = perf_counter()
        return request.index not in self.revoked

    def _run_job(self, job: dict[str, Any]) -> None:
        from llmload.core.health import HealthMonitor

        user = self.make_user(job["run"])
        requests = job_requests(job["items"])
        self.control.stop_timeout = float(job.get("stop_timeout") or 0.0)
        start_at = perf_counter() + (job["start_wall"] - time.time())
        health = HealthMonitor(reactor=user.pool.reactor)
        health.start()
        try:
            tally = self._dispatch(job, requests, user, start_at)
        finally:
            health.stop()
        self._jobs.remove(gevent.getcurrent())
        if not self._jobs:
            self.shipper.flush()
            self.runner.send_message("llm_done", {"records": self.shipper.shipped, "leaving": self.leaving,
                                                  "health": health.report(tally.schedule_lags_s)})
        user.pool.close()  # this job's connections: the next job builds its own user

    def _dispatch(self, job: dict[str, Any], requests: list[Scheduled], user: Any, start_at: float) -> Tally:
        """The job's loop: its share of the open-loop schedule, or closed-loop users over its requests."""
        on_dispatch = lambda r: self.shipper.dispatched(r.index)  # noqa: E731
        closed = job.get("closed")
        if closed:
            from llmload.core.arrivals import parse_think_time

            think = parse_think_time(closed["think"])
            gevent.sleep(max(0.0, start_at - perf_counter()))
            return run_closed_loop(RequestQueue(requests), lambda _u: user, int(closed["users"]), think,
                                   self.shipper, control=self.control, on_dispatch=on_dispatch)
        return run_open_loop(requests, lambda _r: user, self.shipper, max_concurrency=job.get("max_concurrency"),
                             control=self.control, start_at=start_at, skip=lambda r: not self._may_send(r),
                             on_dispatch=on_dispatch)

    def _flush_loop(self) -> None:
        while True:
            for _ in range(round(BATCH_INTERVAL_S / 0.05)):
                gevent.sleep(0.05)
                now = perf_counter()
                if now - self._last_tick > FREEZE_S:
                    self._frozen = True
                self._last_tick = now
            self.shipper.flush()
