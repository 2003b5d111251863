"""A worker's ``llm_done`` closes only the jobs it had taken when it sent it.

Seen in the full suite: worker0 finished its share and sent ``llm_done`` just as the master, finding worker1
dead, handed worker0 worker1's 31 unsent requests. The master took that earlier ``llm_done`` as the end of the
new part too, ended the run and reported the 31 requests "not sent"."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from llmload.core.protocol import Done
from llmload.distributed.master import BenchMaster, WorkerState


class LocustMasterChannel:
    """Stands in for Locust's MasterRunner's message channel (not llmload code)."""

    def __init__(self) -> None:
        self.clients = SimpleNamespace(ready=[], all=[])
        self.handlers: dict[str, Any] = {}

    def register_message(self, name: str, handler: Any, **_: Any) -> None:
        self.handlers[name] = handler

    def send_message(self, name: str, data: Any = None, client_id: str | None = None) -> None:
        pass


def _master_with_worker(jobs_sent: int) -> tuple[LocustMasterChannel, WorkerState]:
    channel = LocustMasterChannel()
    master = BenchMaster(channel, log=lambda _m: None)
    state = WorkerState("w0", 0, jobs_sent=jobs_sent)
    master.workers["w0"] = state
    return channel, state


def _done(channel: LocustMasterChannel, **fields: Any) -> None:
    channel.handlers["llm_done"](SimpleNamespace(node_id="w0", data=Done(**fields).data()))


def test_a_done_sent_before_a_reassigned_part_arrived_does_not_end_the_worker() -> None:
    channel, state = _master_with_worker(jobs_sent=2)
    _done(channel, records=60, planned=60, dispatched=60, jobs=1)
    assert not state.done  # its re-assigned part is on its way
    _done(channel, records=91, planned=91, dispatched=91, jobs=2)
    assert state.done


def test_a_done_that_does_not_count_jobs_or_says_leaving_is_taken() -> None:
    channel, state = _master_with_worker(jobs_sent=2)
    _done(channel, records=60, planned=60, dispatched=60)  # jobs=0: a worker that does not say
    assert state.done
    channel, state = _master_with_worker(jobs_sent=2)
    _done(channel, records=10, planned=60, dispatched=10, jobs=1, leaving=True)
    assert state.done and state.leaving  # stopped on its own: the master re-assigns its rest
