"""Replaying one agentic session: its main chain and its sub-agents' chains, each call when what it waits for
has ended (docs/agentic.md).

A session arrives like any request (at its scheduled offset, or when a closed-loop user takes it) and holds
its concurrency slot until its last call ends. Its rules, from the trace (:mod:`llmload.datasets.traces.weka`):

- within a chain (the main agent or one sub-agent) a call goes out only after the previous call of that chain
  has ended, then waits its recorded pause (its ``think_time``) divided by ``time_scale`` and capped by
  ``max_idle``; the main chain's first call waits its ``t`` so, a sub-agent's first call goes at its spawn;
- a sub-agent starts after the main-chain call that spawned it has ended, plus the recorded gap to its spawn
  (scaled and capped alike), and runs beside its parent;
- a main-chain call recorded after a sub-agent's last answer (one not ``async_launched``) also waits for that
  sub-agent to end, then the recorded gap after that end.

A failed call does not end its chain: the prompts come from the trace, not from the answers, so the session
goes on as recorded and the failure is counted where it happened. A stop ends every chain between two calls; a
kill cuts off the calls in flight (each keeps its record). Every call is one
:class:`~llmload.client.records.RequestRecord`: ``conversation_id`` the session's request id, ``turn`` the call's
index in its trace (from 0, document order, depth first), ``agent`` ('' for the main chain, else the agent id)
and ``agent_type`` (``main``, else the sub-agent's type).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from time import perf_counter
from typing import Any

import gevent
from gevent import GreenletExit
from gevent.event import Event

from llmload.client.failures import CUT_OFF
from llmload.client.records import RequestRecord
from llmload.common.errors import ConfigError
from llmload.core.schedule import Scheduled
from llmload.core.sink import RecordSink
from llmload.datasets.base import SampleRequest

#: ``agent_type`` of a main-chain call (a sub-agent's is its ``subagent_type``, or ``subagent``)
MAIN = "main"
SUBAGENT = "subagent"


@dataclass(frozen=True)
class SessionPolicy:
    """How sessions replay (``--time-scale``, ``--max-idle``, ``--stream-all``)."""

    #: recorded pauses are divided by it (2: twice as fast)
    time_scale: float = 1.0
    #: no pause is longer than this many seconds (after scaling)
    max_idle: float = 60.0
    #: stream every call, also the trace's non-streamed (``n``) ones
    stream_all: bool = False

    def __post_init__(self) -> None:
        if not self.time_scale > 0:
            raise ConfigError(f"--time-scale must be > 0, got {self.time_scale}")
        if not self.max_idle >= 0:
            raise ConfigError(f"--max-idle must be >= 0 seconds, got {self.max_idle}")

    def pause(self, recorded_s: float) -> float:
        """The replay's pause for a recorded one."""
        return min(max(0.0, recorded_s) / self.time_scale, self.max_idle)


class _Replay:
    """The state one session's chains share: the records so far, which chains ended, the first record."""

    def __init__(self, sender: Any, request: Scheduled, first: RequestRecord, sink: RecordSink,
                 policy: SessionPolicy, stop: Event, on_call: Callable[[RequestRecord], None] | None) -> None:
        self.sender = sender
        self.request = request
        self.agent = request.sample.session
        self.first: RequestRecord | None = first
        self.open_loop = first.intended_send is not None
        self.sink = sink
        self.policy = policy
        self.stop = stop
        self.on_call = on_call
        self.ended: dict[str, Event] = {}
        self.children: list[gevent.Greenlet] = []

    def record_for(self, chain: Any, call: Any, due: float) -> RequestRecord:
        """The call's record: the dispatcher's for the session's first call, a new one after it."""
        if self.first is not None:
            record, self.first = self.first, None
        else:
            record = self.sender.new_record(self.request, due if self.open_loop else None)
            if self.open_loop:
                record.dispatched_at = perf_counter()
            if self.on_call is not None:
                self.on_call(record)
        session = self.agent.session
        record.request_id = f"{self.request.request_id}:{call.turn}"
        record.conversation_id = self.request.request_id
        record.turn = call.turn
        record.conversation_turns = session.calls
        record.agent = chain.agent_id
        record.agent_type = (chain.subagent_type or SUBAGENT) if chain.agent_id else MAIN
        record.prompt_len = self.agent.prompt_len(call)
        record.trace_cached_tokens = self.agent.prompts[call.turn].ideal_cached
        record.expected_output_len = max(1, call.output_tokens)
        return record

    def send(self, chain: Any, call: Any, due: float) -> RequestRecord:
        record = self.record_for(chain, call, due)
        sample = self.agent.call_sample(call, record.request_id,
                                        stream=None if call.stream or self.policy.stream_all else False)
        try:
            self.sender.send(replace(self.request, sample=sample), record.intended_send, record)
        except GreenletExit:
            if not record.cut_off:
                record.cut_off, record.success, record.failure_kind = True, False, CUT_OFF
            self.sink.add(record)
            raise
        self.sink.add(record)
        return record

    def wait(self, seconds: float) -> bool:
        """Pause; True when the run's stop came first."""
        return self.stop.wait(seconds) if seconds > 0 else self.stop.is_set()

    def run_chain(self, chain: Any, start_pause: float) -> None:
        """Send the chain's calls in order (see the module docstring); spawn the sub-agents a main call starts."""
        session = self.agent.session
        main = chain is session.main
        try:
            if main:
                self.spawn_after(-1)
            due = perf_counter() + start_pause
            if self.wait(start_pause):
                return
            for index, call in enumerate(chain.calls):
                if index:
                    waited = [self.ended[s.agent_id] for s in session.waits_for(call)] if main else []
                    if waited and not self.wait_for(waited):
                        return
                    pause = self.policy.pause(session.pause_before(chain, index))
                    due = perf_counter() + pause
                    if self.wait(pause):
                        return
                self.send(chain, call, due)
                if main:
                    self.spawn_after(call.turn)
        finally:
            self.ended[chain.agent_id].set()

    def wait_for(self, events: list[Event]) -> bool:
        """Wait until every event is set; False when the run's stop came first."""
        for event in events:
            gevent.wait([event, self.stop], count=1)
            if not event.is_set():
                return False
        return True

    def spawn_after(self, turn: int) -> None:
        """Start the sub-agents the main-chain call ``turn`` spawned (-1: those before any call)."""
        session = self.agent.session
        for chain in session.subagents:
            if chain.after_turn == turn and chain.calls:
                self.children.append(gevent.spawn(self.run_chain, chain,
                                                  self.policy.pause(session.spawn_pause(chain))))

    def run(self) -> None:
        session = self.agent.session
        for chain in session.chains:
            self.ended[chain.agent_id] = Event()
            if not chain.calls:
                self.ended[chain.agent_id].set()
        try:
            self.run_chain(session.main, self.policy.pause(session.pause_before(session.main, 0))
                           if session.main.calls else 0.0)
            gevent.joinall(self.children)
        finally:
            gevent.killall(self.children, block=True)
        if self.first is not None:  # the stop came before the session's first call: nothing was sent
            self.first.cut_off, self.first.success, self.first.failure_kind = True, False, CUT_OFF
            self.first.error = "cut off: the run was stopped before this request was sent"
            self.sink.add(self.first)


def replay_session(sender: Any, request: Scheduled, first: RequestRecord, sink: RecordSink, policy: SessionPolicy,
                   stop: Event, on_call: Callable[[RequestRecord], None] | None = None) -> None:
    """Replay ``request``'s session (its sample's ``session``); ``first`` is its first call's record (made by
    the dispatcher, with the intended send time). Every call's record goes into ``sink`` as it ends;
    ``on_call`` hears of every call after the first as it is released. Returns when every chain has ended."""
    _Replay(sender, request, first, sink, policy, stop, on_call).run()


def single_request(sample: SampleRequest) -> SampleRequest:
    """What the initial test and the warm-ups send for a sample: itself, or a session's first call."""
    agent = sample.session
    if agent is None:
        return sample
    chain = next(c for c in agent.session.chains if c.calls)
    return agent.call_sample(chain.calls[0], sample.request_id)
