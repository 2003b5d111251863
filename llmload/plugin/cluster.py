"""The master/worker side of a distributed ``locust -f`` run (docs/design.md, "Distributed protocol").

    master -> worker   llm_plan      {items, start_wall, index, count, max_concurrency, live, model}
    master -> worker   llm_stop      {}                               stop now: drain, ship, say llm_done
    master -> worker   llm_set       {request_rate, from_offset}      the web UI steered the open-loop rate
    worker -> master   llm_records   the one record batch schema (llmload.core.messages)
    worker -> master   llm_done      {planned, dispatched}            this worker's accounting, after its last batch
    worker -> master   llm_finished  {}                               its share is sent and answered (headless)

The plan goes out in the master's ``test_start`` listener, before Locust's spawn messages on the same ordered
channel, so every worker has its share when its users start.
"""

from __future__ import annotations

import time
from time import perf_counter
from typing import Any

import gevent

from llmload.core.messages import read_records_message
from llmload.core.schedule import LiveSchedule, Schedule

#: how often a worker ships its record batch
BATCH_INTERVAL_S = 0.25
#: the master's plan names a start this far ahead, so every worker starts together
START_LEAD_S = 0.5
#: how long past ``--stop-timeout`` the master waits for the workers' final batches
FINAL_BATCH_WAIT_S = 30.0


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

    def register(self) -> None:
        """Register this role's messages on the runner."""
        if self.role == "worker":  # type: ignore[attr-defined]
            self.runner.register_message("llm_plan", self.on_plan)
            self.runner.register_message("llm_stop", self.on_stop, concurrent=True)
            self.runner.register_message("llm_set", self.on_set)
            gevent.spawn(self.ship_forever)
        elif self.role == "master":  # type: ignore[attr-defined]
            self.runner.register_message("llm_records", self.on_records)
            self.runner.register_message("llm_done", self.on_done)
            self.runner.register_message("llm_finished", self.on_finished)

    def _send_plans(self) -> None:
        """Each worker's share of the one schedule, sent before Locust's spawn messages."""
        from llmload.core.messages import job_items
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
        for k, client in enumerate(clients):
            if live is not None:
                items = sample_items(self.schedule.samples)
            else:
                assert isinstance(self.schedule, Schedule)
                items = job_items(self.schedule, [e.index for e in self.schedule.share(k, count)])
            self.runner.send_message("llm_plan", {"items": items, "start_wall": start_wall, "index": k,
                                                  "count": count, "max_concurrency": caps[k], "live": live,
                                                  "open_loop": self.open_loop, "headless": self.headless,
                                                  "model": self.workload.model}, client_id=client.id)

    def _await_final_batches(self) -> None:
        """Stop every worker's share and wait for its last records (Locust's quit waits only 0.5 s)."""
        waiting = [c.id for c in self.runner.clients.all if c.id not in self.reports]
        for cid in waiting:
            self.runner.send_message("llm_stop", {}, client_id=cid)
        deadline = perf_counter() + float(self.environment.stop_timeout or 0.0) + FINAL_BATCH_WAIT_S
        while perf_counter() < deadline:
            alive = {c.id for c in self.runner.clients.all if c.state != "missing"}
            if all(cid in self.reports or cid not in alive for cid in waiting):
                return
            gevent.sleep(0.05)

    def on_records(self, msg: Any, **_: Any) -> None:
        batch = read_records_message(msg.data, self._my_clock)
        name = f"worker{self.runner.get_worker_index(msg.node_id)}"
        for record in batch.records:
            record.worker = name
            self.records.add(record)

    def on_done(self, msg: Any, **_: Any) -> None:
        self.reports[msg.node_id] = dict(msg.data or {})

    def on_finished(self, msg: Any, **_: Any) -> None:
        self._finished_workers.add(msg.node_id)
        alive = [c.id for c in self.runner.clients.all if c.state != "missing"]
        if not self.finished and all(cid in self._finished_workers for cid in alive):
            self.finished = True
            gevent.spawn(self.runner.quit)

    def on_plan(self, msg: Any, **_: Any) -> None:
        self._plan = dict(msg.data or {})
        self.headless = bool(self._plan.get("headless", True))  # the master's web UI decides

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
