"""Conversation replay on the dispatcher, in-process with a scripted sender standing in for the network: turn
order and histories, context-cap policies, a failed turn ending its conversation, stops between turns, the
per-turn accounting and the seeded think times (end-to-end checks against the simulator live in
tests/integration/test_conversations.py)."""

from __future__ import annotations

from time import perf_counter

import gevent
import pytest

from llmload.client.records import RequestRecord
from llmload.common.errors import ConfigError
from llmload.core.conversation import ConversationPolicy, request_count, turn_id
from llmload.core.dispatch import RequestQueue, StopControl, run_closed_loop, run_open_loop
from llmload.core.schedule import Scheduled
from llmload.core.sink import RecordList
from llmload.datasets.base import SampleRequest, Turn


class ScriptedSender:
    """Answers every turn with ``reply-<request id>`` after ``seconds``; fails the turns named in ``fail``."""

    def __init__(self, policy: ConversationPolicy | None = None, seconds: float = 0.01,
                 fail: frozenset[str] = frozenset()) -> None:
        self.conversation = policy
        self.seconds = seconds
        self.fail = fail
        self.sent: list[tuple[str, list[dict]]] = []
        self.starts: dict[str, float] = {}

    def new_record(self, request: Scheduled, intended_send: float | None = None) -> RequestRecord:
        return RequestRecord(request_id=request.request_id, intended_send=intended_send)

    def send(self, request: Scheduled, intended_send: float | None = None,
             record: RequestRecord | None = None) -> RequestRecord:
        assert record is not None and request.sample.messages is not None
        record.start = perf_counter()
        self.starts[record.request_id] = record.start
        self.sent.append((record.request_id, request.sample.messages))
        gevent.sleep(self.seconds)
        if record.request_id in self.fail:
            record.error, record.failure_kind = "HTTP 500: boom", "http_5xx"
            return record
        record.chunk_times.append(perf_counter())
        record.chunk_tokens.append(1)
        record.first_token = record.chunk_times[0]
        record.generated_text = f"reply-{record.request_id}"
        record.output_tokens, record.output_tokens_source = 3, "usage"
        record.success = True
        return record


def conversation(cid: str, turns: int, user_len: int = 10, reply_len: int = 5, system: str = "") -> SampleRequest:
    made = [Turn(f"{cid} question {k}", user_len, f"{cid} recorded answer {k}", reply_len) for k in range(1, turns + 1)]
    return SampleRequest(made[0].user, user_len, reply_len, request_id=cid, turns=made, system=system,
                         system_len=4 if system else 0)


def schedule(*samples: SampleRequest) -> list[Scheduled]:
    return [Scheduled(i, 0.0, s, s.request_id) for i, s in enumerate(samples)]


def test_turns_go_out_in_order_each_with_the_history_so_far():
    sender = ScriptedSender()
    sink = RecordList()
    tally = run_open_loop(schedule(conversation("a", 3, system="be brief")), lambda _r: sender, sink)
    assert [rid for rid, _ in sender.sent] == ["a:1", "a:2", "a:3"]
    last = sender.sent[-1][1]
    assert last == [{"role": "system", "content": "be brief"},
                    {"role": "user", "content": "a question 1"}, {"role": "assistant", "content": "a recorded answer 1"},
                    {"role": "user", "content": "a question 2"}, {"role": "assistant", "content": "a recorded answer 2"},
                    {"role": "user", "content": "a question 3"}]
    records = sorted(sink.records, key=lambda r: r.turn)
    assert [(r.turn, r.conversation_id, r.conversation_turns) for r in records] == [(1, "a", 3), (2, "a", 3),
                                                                                     (3, "a", 3)]
    assert [r.conversation_end for r in records] == ["", "", "completed"]
    assert [r.prompt_len for r in records] == [14, 29, 44]  # system 4 + 10, then + 10 + 5 per earlier turn
    assert tally.dispatched == 3 == request_count(schedule(conversation("a", 3)))


def test_live_history_carries_the_replies():
    sender = ScriptedSender(ConversationPolicy(history="live"))
    run_open_loop(schedule(conversation("b", 2)), lambda _r: sender, RecordList())
    assert sender.sent[1][1][1] == {"role": "assistant", "content": "reply-b:1"}


def test_a_failed_turn_ends_the_conversation():
    sender = ScriptedSender(fail=frozenset({"c:2"}))
    sink = RecordList()
    run_open_loop(schedule(conversation("c", 4)), lambda _r: sender, sink)
    assert [rid for rid, _ in sender.sent] == ["c:1", "c:2"]
    assert [r.conversation_end for r in sorted(sink.records, key=lambda r: r.turn)] == ["", "failed"]


@pytest.mark.parametrize(("policy", "sent", "end"), [
    ("end", ["d:1", "d:2", "d:3"], "context_cap"),
    ("truncate", ["d:1", "d:2", "d:3", "d:4"], "completed"),
])
def test_the_context_cap(policy: str, sent: list[str], end: str):
    # each turn adds 15 tokens of history: turn k is 10 + 15 (k - 1) prompt + 5 max_tokens, so under a cap of 45
    # turns 1-3 fit (15, 30, 45) and turn 4 (60) does not, unless turn 1 is dropped (45)
    sender = ScriptedSender(ConversationPolicy(max_context_tokens=45, context_policy=policy))
    sink = RecordList()
    run_open_loop(schedule(conversation("d", 4)), lambda _r: sender, sink)
    assert [rid for rid, _ in sender.sent] == sent
    assert all(r.prompt_len + r.expected_output_len <= 45 for r in sink.records)
    assert sorted(sink.records, key=lambda r: r.turn)[-1].conversation_end == end
    if policy == "truncate":
        assert sender.sent[-1][1][0] == {"role": "user", "content": "d question 2"}  # turn 1 was dropped


def test_a_stop_between_turns_ends_the_conversation_and_the_rest_is_not_sent():
    control = StopControl(stop_timeout=5.0)
    sender = ScriptedSender(ConversationPolicy(think="fixed:30"))
    sink = RecordList()
    gevent.spawn_later(0.3, control.stop.set)
    started = perf_counter()
    run_open_loop(schedule(conversation("e", 3)), lambda _r: sender, sink, control=control)
    assert perf_counter() - started < 10.0  # not the 30 s pause
    assert [r.request_id for r in sink.records] == ["e:1"]
    assert sink.records[0].conversation_end == ""
    assert request_count(schedule(conversation("e", 3))) - len(sink.records) == 2  # not sent


def test_closed_loop_users_run_one_conversation_after_another():
    sender = ScriptedSender()
    sink = RecordList()
    requests = schedule(conversation("f", 2), conversation("g", 3), conversation("h", 1))
    tally = run_closed_loop(RequestQueue(requests), lambda _u: sender, 1, lambda: 0.0, sink)
    assert [rid for rid, _ in sender.sent] == ["f:1", "f:2", "g:1", "g:2", "g:3", "h:1"]
    assert tally.dispatched == 6 == len(sink.records)


def test_think_times_are_seeded_per_conversation_and_respected():
    policy = ConversationPolicy(think="exp:0.05", seed=3)
    assert policy.pauses("x")() == policy.pauses("x")()
    assert policy.pauses("x")() != policy.pauses("y")()
    sender = ScriptedSender(ConversationPolicy(think="fixed:0.2"), seconds=0.0)
    sink = RecordList()
    run_open_loop(schedule(conversation("i", 2)), lambda _r: sender, sink)
    first = next(r for r in sink.records if r.turn == 1)
    assert sender.starts["i:2"] - first.chunk_times[-1] >= 0.2
    second = next(r for r in sink.records if r.turn == 2)
    assert second.intended_send is not None and second.intended_send >= first.chunk_times[-1] + 0.2


def test_bad_policies_are_config_errors():
    with pytest.raises(ConfigError, match="--history"):
        ConversationPolicy(history="maybe")
    with pytest.raises(ConfigError, match="--context-policy"):
        ConversationPolicy(context_policy="squeeze")
    with pytest.raises(ConfigError, match="--turn-think-time"):
        ConversationPolicy(think="later")


def test_turn_ids():
    assert turn_id("17#2", 3) == "17#2:3"
