"""Replaying one conversation turn by turn: the unit a multi-turn run schedules (docs/conversations.md).

A conversation arrives like any request (its first turn is due at its scheduled offset, or when a closed-loop
user takes it); each later turn is sent after the previous one ended plus a think time, carrying the history so
far. Every turn is one :class:`~llmload.client.records.RequestRecord` (``conversation_id``, ``turn``), put into the sink
as soon as it ends. The record that ends a conversation says why in ``conversation_end``: ``completed``,
``failed`` (a failed turn ends its conversation: its history would be wrong), ``context_cap`` or ``cut_off``.
A conversation the run's stop ended between two turns keeps an empty ``conversation_end`` on its last record.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from time import perf_counter
from typing import Any, Protocol

import numpy as np
from gevent import GreenletExit
from gevent.event import Event

from llmload.client.failures import CUT_OFF
from llmload.client.records import RequestRecord
from llmload.common.choices import CONTEXT_POLICIES, HISTORY_MODES
from llmload.common.errors import ConfigError
from llmload.core.schedule import Scheduled
from llmload.core.sink import RecordSink
from llmload.datasets.base import SampleRequest, Turn

#: ``max_tokens`` of a turn whose reply the dataset does not record (and no fixed output length)
DEFAULT_TURN_OUTPUT_LEN = 256


@dataclass(frozen=True)
class ConversationPolicy:
    """How conversations are replayed (``--history``, ``--max-context-tokens``, ``--turn-think-time``, ...)."""

    #: ``recorded``: append the dataset's reply (prompts identical run to run); ``live``: the server's reply
    history: str = "recorded"
    #: most tokens a turn may use, prompt (the sum of its messages' lengths) plus ``max_tokens``
    max_context_tokens: int | None = None
    #: over the cap: ``end`` the conversation, or ``truncate`` (drop the oldest turns until it fits)
    context_policy: str = "end"
    #: pause between a turn's end and the next turn's send (a pause spec, e.g. ``exp:5``; '' for none)
    think: str = ""
    #: add ``reply tokens / reading_speed`` seconds of reading time to each pause (0: off)
    reading_speed: float = 0.0
    #: put the reply's reasoning back into the history (as ``<think>…</think>`` before the answer)
    keep_reasoning: bool = False
    #: think times are drawn per conversation from (seed, conversation id): the same on every process
    seed: int = 0
    #: every turn's ``max_tokens`` (``--output-len``); None: the recorded reply's length
    output_len: int | None = None
    #: with ``--tools``: how long a tool takes before its result goes back (``--tool-latency``; '' for none), and
    #: the most follow-up requests after tool results in one turn (``--max-tool-rounds``)
    tool_latency: str = ""
    max_tool_rounds: int = 4

    def max_tokens(self, turn: Turn, fallback: int = DEFAULT_TURN_OUTPUT_LEN) -> int:
        """A turn's ``max_tokens``: the fixed output length, else the recorded reply's, else ``fallback``."""
        return self.output_len or turn.reply_len or fallback or DEFAULT_TURN_OUTPUT_LEN

    def __post_init__(self) -> None:
        if self.history not in HISTORY_MODES:
            raise ConfigError(f"--history must be one of {', '.join(HISTORY_MODES)}, got {self.history!r}")
        if self.context_policy not in CONTEXT_POLICIES:
            raise ConfigError(f"--context-policy must be one of {', '.join(CONTEXT_POLICIES)}, "
                              f"got {self.context_policy!r}")
        if self.think:
            from llmload.core.arrivals import parse_think_time

            parse_think_time(self.think, 0, "--turn-think-time")  # a bad spec fails before the run
        if self.tool_latency:
            from llmload.core.tools import tool_latency

            tool_latency(self.tool_latency)

    def tool_pauses(self, conversation_id: str) -> Callable[[], float]:
        """This conversation's tool latencies, drawn from its own seeded stream."""
        if not self.tool_latency:
            return lambda: 0.0
        import random

        from llmload.core.tools import tool_latency

        latency = tool_latency(self.tool_latency)
        rng = random.Random(f"{self.seed}/{conversation_id}/tools")
        return lambda: float(latency.sample(rng))

    def pauses(self, conversation_id: str) -> Callable[[], float]:
        """This conversation's think times, drawn from its own seeded stream."""
        if not self.think:
            return lambda: 0.0
        from llmload.core.arrivals import parse_think_time

        rng = np.random.default_rng([self.seed, zlib.crc32(conversation_id.encode())])
        return parse_think_time(self.think, rng, "--turn-think-time")


class TurnSender(Protocol):
    """What sends a turn (an :class:`~llmload.client.users.LLMUser`)."""

    def new_record(self, request: Scheduled, intended_send: float | None = None) -> RequestRecord: ...

    def send(self, request: Scheduled, intended_send: float | None = None,
             record: RequestRecord | None = None) -> RequestRecord: ...


def turn_count(sample: SampleRequest) -> int:
    """Requests this sample makes: its turns, a session's calls, or one."""
    if sample.session is not None:
        return int(sample.session.calls)
    return len(sample.turns) if sample.turns is not None else 1


def request_count(requests: Any) -> int:
    """Requests a sequence of scheduled entries makes, every turn of every conversation counted."""
    total = getattr(requests, "turn_total", None)
    if total is not None:  # a Schedule: counted over its sample pool, without making each entry
        return int(total(turn_count))
    return sum(turn_count(r.sample) for r in requests)


def turn_id(conversation_id: str, turn: int) -> str:
    """A turn's request id: the conversation's id and the 1-based turn, e.g. ``"17:3"``."""
    return f"{conversation_id}:{turn}"


class _History:
    """The messages a conversation has sent and received so far, each with its length in tokens."""

    def __init__(self, sample: SampleRequest) -> None:
        self.system: list[tuple[dict[str, Any], int]] = []
        if sample.system:
            self.system.append(({"role": "system", "content": sample.system}, sample.system_len))
        #: (user message, its tokens, assistant message, its tokens) per finished turn
        self.pairs: list[tuple[dict[str, Any], int, dict[str, Any], int]] = []

    def messages(self, turn: Turn) -> tuple[list[dict[str, Any]], int]:
        """The next turn's messages and their total length."""
        out = [m for m, _ in self.system]
        tokens = sum(n for _, n in self.system)
        for user, user_len, reply, reply_len in self.pairs:
            out += (user, reply)
            tokens += user_len + reply_len
        out.append({"role": "user", "content": turn.user})
        return out, tokens + turn.user_len

    def fit(self, turn: Turn, max_tokens: int, cap: int | None, policy: str) -> bool:
        """Whether the next turn fits under ``cap``; ``truncate`` drops the oldest turns until it does."""
        if cap is None:
            return True
        while self.messages(turn)[1] + max_tokens > cap:
            if policy != "truncate" or not self.pairs:
                return False
            self.pairs.pop(0)
        return True


def replay_conversation(
    sender: TurnSender,
    request: Scheduled,
    first: RequestRecord,
    sink: RecordSink,
    policy: ConversationPolicy,
    stop: Event,
    on_turn: Callable[[RequestRecord], None] | None = None,
) -> None:
    """Send ``request``'s turns in order; ``first`` is turn 1's record (made by the dispatcher, with its intended
    send time). Each turn's record goes into ``sink`` once it ends; ``on_turn`` hears of every turn after the
    first as it is released. Returns when the conversation ended (or ``stop`` was set between two turns)."""
    sample = request.sample
    turns = sample.turns or []
    history = _History(sample)
    pause = policy.pauses(request.request_id)
    tool_pause = policy.tool_pauses(request.request_id)
    record, intended = first, first.intended_send
    for k, turn in enumerate(turns, start=1):
        max_tokens = policy.max_tokens(turn, sample.expected_output_len if k == 1 else DEFAULT_TURN_OUTPUT_LEN)
        if k > 1:
            record = sender.new_record(request, intended)
            if intended is not None:
                record.dispatched_at = perf_counter()
            if on_turn is not None:
                on_turn(record)
        messages, prompt_tokens = history.messages(turn)
        _label(record, request, k, len(turns), prompt_tokens, max_tokens)
        last = k == len(turns)
        turn_request = replace(request, sample=SampleRequest(turn.user, prompt_tokens, max_tokens,
                                                             messages=messages, request_id=record.request_id))
        _send_turn(sender, turn_request, record, sink, last and not record_tools(sender))
        if record_tools(sender) and not record.conversation_end:
            record, stopped = _tool_rounds(sender, turn_request, record, sink, policy, stop, tool_pause, on_turn)
            if stopped:
                return
            if last and not record.conversation_end:
                _end(record, "completed", sink)
        if last or record.conversation_end:
            return
        exchange = _exchange(turn, record, policy)
        history.pairs.append(exchange)
        following = turns[k]
        if not history.fit(following, policy.max_tokens(following), policy.max_context_tokens,
                           policy.context_policy):
            _end(record, "context_cap", sink)
            return
        wait = pause() + _reading_time(exchange[3], policy.reading_speed)
        sink.add(record)
        due = perf_counter() + wait
        if stop.wait(wait) if wait > 0 else stop.is_set():
            return
        intended = due if first.intended_send is not None else None


def record_tools(sender: Any) -> bool:
    """The sender's requests carry ``tools`` (``--tools``): a turn's answer may call them."""
    return "tools" in (getattr(sender, "extra_body", None) or {})


def _tool_rounds(sender: Any, request: Scheduled, record: RequestRecord, sink: RecordSink, policy: ConversationPolicy,
                 stop: Event, pause: Callable[[], float],
                 on_turn: Callable[[RequestRecord], None] | None) -> tuple[RequestRecord, bool]:
    """While the turn's latest answer calls tools (at most ``policy.max_tool_rounds`` times): put that record into
    the sink, wait the tools' latency, and send the conversation again with the assistant's tool calls and a
    simulated result for each (a ``tool`` message). Returns the turn's last record (not yet in the sink) and
    whether the run's stop came during a tool's latency (the record is then in the sink already). The
    history of later turns keeps the user message and the recorded (or final) answer, not the tool exchange."""
    from llmload.core.tools import tool_result

    messages = list(request.sample.messages or [])
    prompt_tokens = request.sample.prompt_len
    for rounds in range(1, policy.max_tool_rounds + 1):
        if not (record.success and not record.cut_off and record.tool_call_items):
            break
        calls = record.tool_call_items
        messages += [{"role": "assistant", "content": record.generated_text or None, "tool_calls": calls},
                     *({"role": "tool", "tool_call_id": c["id"], "content": tool_result(c)} for c in calls)]
        # the server's count where it said, plus the answer and the results at ~4 characters a token
        prompt_tokens = (record.server_prompt_tokens or prompt_tokens) + record.output_tokens + sum(
            len(tool_result(c)) // 4 for c in calls)
        sink.add(record)
        wait = pause()
        due = perf_counter() + wait
        if stop.wait(wait) if wait > 0 else stop.is_set():
            return record, True
        following = sender.new_record(request, due if record.intended_send is not None else None)
        if following.intended_send is not None:
            following.dispatched_at = perf_counter()
        if on_turn is not None:
            on_turn(following)
        _label(following, request, record.turn, record.conversation_turns, prompt_tokens,
               request.sample.expected_output_len)
        following.conversation_id = record.conversation_id
        following.request_id = f"{turn_id(request.request_id, record.turn)}.{rounds}"
        following.tool_round = rounds
        sample = SampleRequest("", prompt_tokens, request.sample.expected_output_len, messages=list(messages),
                               request_id=following.request_id)
        _send_turn(sender, replace(request, sample=sample), following, sink, False)
        record = following
        if record.conversation_end:
            break
    return record, False


def _label(record: RequestRecord, request: Scheduled, turn: int, turns: int, prompt_tokens: int,
           max_tokens: int) -> None:
    record.request_id = turn_id(request.request_id, turn)
    record.conversation_id = request.request_id
    record.turn = turn
    record.conversation_turns = turns
    record.prompt_len = prompt_tokens
    record.expected_output_len = max_tokens


def _send_turn(sender: TurnSender, request: Scheduled, record: RequestRecord, sink: RecordSink, last: bool) -> None:
    """Stream one turn. A failed turn ends the conversation; the last turn's record goes into the sink here,
    an earlier one's once the conversation knows whether it goes on (its ``conversation_end``)."""
    try:
        sender.send(request, record.intended_send, record)
    except GreenletExit:
        record.conversation_end = CUT_OFF
        sink.add(record)
        raise
    if not (record.success and not record.cut_off):
        _end(record, CUT_OFF if record.cut_off else "failed", sink)
    elif last:
        _end(record, "completed", sink)


def _end(record: RequestRecord, why: str, sink: RecordSink) -> None:
    record.conversation_end = why
    sink.add(record)


def _exchange(turn: Turn, record: RequestRecord, policy: ConversationPolicy) -> tuple[dict, int, dict, int]:
    """The finished turn as history: the user message and the reply (recorded, or the server's)."""
    user = {"role": "user", "content": turn.user}
    if policy.history == "recorded":
        return user, turn.user_len, {"role": "assistant", "content": turn.reply}, turn.reply_len
    text = record.generated_text
    if policy.keep_reasoning and record.reasoning_text:
        text = f"<think>{record.reasoning_text}</think>{text}"
    tokens = record.output_tokens if record.output_tokens_source == "usage" else len(record.chunk_tokens)
    return user, turn.user_len, {"role": "assistant", "content": text}, tokens


def _reading_time(reply_tokens: int, tokens_per_s: float) -> float:
    return reply_tokens / tokens_per_s if tokens_per_s > 0 else 0.0


def deliver(
    sender: Any,
    request: Scheduled,
    record: RequestRecord,
    sink: RecordSink,
    stop: Event,
    on_turn: Callable[[RequestRecord], None] | None = None,
    on_response_end: Callable[[], None] | None = None,
) -> None:
    """Send one request, replay one conversation (a sample with turns) or one agentic session (a sample with a
    session: :mod:`llmload.core.session`); every record ends up in ``sink``. The sender's ``conversation`` and
    ``sessions`` attributes (a :class:`ConversationPolicy`, a :class:`~llmload.core.session.SessionPolicy`) say
    how they replay. ``on_response_end``: called when a single request's response has ended, before it is parsed
    (a conversation's next turn needs the answer, so a conversation never calls it; a session holds its slot
    until its last call ends)."""
    if request.sample.session is not None:
        from llmload.core.session import SessionPolicy, replay_session

        replay_session(sender, request, record, sink, getattr(sender, "sessions", None) or SessionPolicy(), stop,
                       on_turn)
        return
    if request.sample.turns is None:
        try:
            sender.send(request, record.intended_send, record, on_response_end=on_response_end)
        finally:
            sink.add(record)
        return
    policy = getattr(sender, "conversation", None) or ConversationPolicy()
    replay_conversation(sender, request, record, sink, policy, stop, on_turn)
