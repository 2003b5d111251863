"""The cluster-token challenge survives a worker that was not listening yet: the master asks again.

Locust's worker runner connects inside its constructor, so a worker registers its ``llm_challenge`` handler only
after the master may already have sent the challenge; on a loaded machine the ack and the challenge arrive in one
read and the worker drops the challenge as an unknown message. The master used to challenge once and then wait
forever ("1/2 workers connected" until --expect-workers-max-wait)."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from llmload.core.protocol import CHALLENGE_AGAIN_S, auth_proof
from llmload.distributed.master import BenchMaster


class LocustMasterChannel:
    """Stands in for Locust's MasterRunner: its ready clients and its message channel (not llmload code)."""

    def __init__(self, *client_ids: str) -> None:
        self.clients = SimpleNamespace(ready=[SimpleNamespace(id=c) for c in client_ids], all=[])
        self.sent: list[tuple[str, Any, str | None]] = []
        self.handlers: dict[str, Any] = {}

    def register_message(self, name: str, handler: Any, **_: Any) -> None:
        self.handlers[name] = handler

    def send_message(self, name: str, data: Any = None, client_id: str | None = None) -> None:
        self.sent.append((name, data, client_id))

    def challenges(self) -> list[str]:
        return [data["nonce"] for name, data, _ in self.sent if name == "llm_challenge"]


def test_an_unanswered_challenge_is_sent_again_until_the_worker_answers() -> None:
    channel = LocustMasterChannel("w1")
    master = BenchMaster(channel, token="cluster-secret", log=lambda _m: None)
    assert master.ready_workers() == [] and len(channel.challenges()) == 1
    assert master.ready_workers() == [] and len(channel.challenges()) == 1  # not at every poll
    deadline = time.monotonic() + 10 * CHALLENGE_AGAIN_S
    while len(channel.challenges()) < 2 and time.monotonic() < deadline:
        time.sleep(CHALLENGE_AGAIN_S / 10)
        master.ready_workers()
    first, again = channel.challenges()[:2]
    assert again == first  # the same question: an answer to either counts
    channel.handlers["llm_auth"](SimpleNamespace(node_id="w1", data={"proof": auth_proof("cluster-secret", first,
                                                                                          "w1")}))
    assert master.ready_workers() == ["w1"]
    asked = len(channel.challenges())
    time.sleep(CHALLENGE_AGAIN_S * 1.5)
    assert master.ready_workers() == ["w1"] and len(channel.challenges()) == asked  # answered: never again


def test_a_wrong_answer_is_told_to_quit() -> None:
    channel = LocustMasterChannel("w1")
    master = BenchMaster(channel, token="cluster-secret", log=lambda _m: None)
    master.ready_workers()
    channel.handlers["llm_auth"](SimpleNamespace(node_id="w1", data={"proof": "guess"}))
    assert ("quit", None, "w1") in channel.sent and master.ready_workers() == []
