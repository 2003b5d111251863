"""Reading one response into its :class:`~llmload.client.records.RequestRecord`: the TTFT rule, token times, usage,
reasoning and prefix-cache counts, and the failure a broken answer gets (docs/design.md, "Metric definitions").

The transport hands over timestamped lines (:mod:`llmload.client.transport.parser`); this module splits SSE, lets the
backend parse each event and decides which events count.
"""

from __future__ import annotations

from time import perf_counter
from typing import TYPE_CHECKING, Any

import orjson

from llmload.client.backends.base import error_message, one_line
from llmload.client.failures import (
    EMPTY_STREAM,
    EMPTY_STREAM_MESSAGE,
    ERROR_EVENT,
    NOT_STREAMED,
    NOT_STREAMED_MESSAGE,
    event_failure,
    http_kind,
    is_json_answer,
)
from llmload.client.records import RequestRecord
from llmload.client.sse import parse_line
from llmload.client.toolcalls import response_tool_calls, streamed_tool_calls
from llmload.client.transport import (
    Cancelled,
    ConnectError,
    ReadTimeout,
    RequestTimeout,
    Response,
    TransportError,
    readers,
)

if TYPE_CHECKING:
    from llmload.client.backends import Backend
    from llmload.client.transport import Reactor

#: after-the-stream parsing gives the reads a turn (:meth:`Reactor.yield_to_reads`) every this many events
PARSE_SLICE = 16
#: ...and waits for the loop's next idle moment (:meth:`Reactor.idle_turn`) every this many seconds of parsing
PARSE_TURN_S = 0.001


def _take_turns(reactor: Reactor, turn_ends: float) -> float:
    """After-the-stream parsing waits for idle moments of the loop, turns of PARSE_TURN_S, so the sends of the
    requests that took this one's slot go first; within a turn it gives the reads a turn every slice (streams of
    a batch end together, and the new streams are being read). Returns when the current turn ends."""
    if perf_counter() < turn_ends:
        reactor.yield_to_reads()
        return turn_ends
    reactor.idle_turn()
    return perf_counter() + PARSE_TURN_S


class StreamReader:
    """Turns a response's timestamped lines into a :class:`RequestRecord`, per the run's TTFT rule.

    ``backend`` parses the events; ``reactor`` (the one reading the request) gets turns while a finished stream is
    parsed; ``hooks`` (:data:`llmload.client.events.llm_events`: the reader itself needs no Locust) fire on the
    first token and every later one in live mode, with ``user``; the timeouts only name what failed."""

    __slots__ = ("backend", "completion_tokens", "content_rule", "done", "hooks", "network_timeout", "pick_events",
                 "reactor", "reasoning", "record", "request_timeout", "state", "streaming", "texts", "tools",
                 "user")

    def __init__(self, record: RequestRecord, streaming: bool, backend: Backend, *, ttft_rule: str = "content",
                 reactor: Reactor | None = None, hooks: Any = None, user: Any = None,
                 network_timeout: float = 600.0, request_timeout: float | None = None) -> None:
        self.record = record
        self.streaming = streaming
        self.backend = backend
        self.reactor = reactor
        #: the reader's lines-to-events step (the reactor's reader: compiled or Python)
        self.pick_events = (reactor.reader if reactor is not None else readers.chosen()).pick_events
        self.hooks = hooks
        self.user = user
        self.network_timeout = network_timeout
        self.request_timeout = request_timeout
        self.state = backend.new_state()
        self.content_rule = ttft_rule != "vllm"
        self.texts: list[str] = []
        self.reasoning: list[str] = []
        self.completion_tokens: int | None = None
        self.done = 0
        #: the request carried ``tools``: read the answer's tool calls after it ends (:mod:`..toolcalls`)
        self.tools = False

    def on_lines(self, resp: Response, first: int) -> None:
        """Live mode: parse the lines that just arrived and fire the token hooks."""
        if resp.status == 200 and self.streaming and not self.record.error:
            self.consume(resp.lines, first, live=True)

    def consume(self, lines: list[tuple[float, bytes]], first: int, live: bool) -> None:
        """Read the events of ``lines[first:]`` into the record (the reader's ``pick_events`` turns a slice of
        lines into events in one call); ``live``: fire the token hooks as it goes. Long on purpose: the loop over
        a stream's events runs once per token, and a call per event would cost what the compiled reader saves."""
        record = self.record
        parse_event = self.backend.parse_event
        pick_events = self.pick_events
        openai = self.backend.openai_wire
        state = self.state
        times = record.chunk_times
        tokens = record.chunk_tokens
        texts = self.texts
        content_rule = self.content_rule
        user = self.user
        hooks = self.hooks if live else None
        reactor = None if live else self.reactor
        turn_ends = 0.0
        i = max(first, self.done)
        stop = len(lines)
        while i < stop:
            if reactor is None:
                end = stop
            else:
                if not i % PARSE_SLICE:
                    turn_ends = _take_turns(reactor, turn_ends)
                end = min(stop, (i // PARSE_SLICE + 1) * PARSE_SLICE)
            events = pick_events(lines, i, end, parse_event, state, openai)
            for (t, line), ev in zip(lines[i:end], events, strict=True):
                if ev is None:
                    continue
                text, content, has_choices, n, completion_tokens, prompt_tokens, _finish, error, reasoning, \
                    cached_tokens = ev
                if error is not None:
                    # malformed_event or error_event; the message holds no part of the payload, so failures group
                    record.failure_kind, record.error = event_failure(parse_line(line) or b"", error)
                    self.done = len(lines)
                    return
                if completion_tokens is not None:
                    self.completion_tokens = completion_tokens
                if prompt_tokens is not None:
                    record.server_prompt_tokens = prompt_tokens
                    if cached_tokens is not None:
                        record.cached_tokens = cached_tokens
                if content if content_rule else (has_choices or content):
                    n = n or 1
                    texts.append(text)
                    if reasoning:
                        record.reasoning_tokens += n
                        self.reasoning.append(reasoning)
                    if text and record.first_answer_token is None:
                        record.first_answer_token = t
                    if times:
                        itl = t - times[-1]
                        times.append(t)
                        tokens.append(n)
                        if hooks is not None:
                            hooks.token.fire(record=record, itl=itl, tokens=n, text=text, user=user)
                    else:
                        record.first_token = t
                        times.append(t)
                        tokens.append(n)
                        if hooks is not None:
                            hooks.first_token.fire(record=record, text=text, user=user)
                elif text:
                    texts.append(text)
            i = end
        self.done = len(lines)

    def finish(self, resp: Response) -> None:
        record = self.record
        record.status_code = resp.status
        if resp.status != 200:
            text = resp.body.decode("utf-8", "replace") if resp.body else ""
            record.error = one_line(f"HTTP {resp.status}: {text}")
            record.failure_kind = http_kind(resp.status)
            return
        if not self.streaming:
            self._finish_whole(resp)
            return
        if is_json_answer(resp.headers.get("content-type", "")):
            # One JSON body for a streaming request: its "TTFT" would be the whole answer's time and its ITLs
            # nothing, so counting it as a success would put fake numbers into every latency statistic.
            record.failure_kind, record.error = event_failure(resp.body, NOT_STREAMED_MESSAGE)
            if record.failure_kind == ERROR_EVENT:  # a JSON error object with status 200
                record.error = self._body_error(resp.body)
            else:
                record.failure_kind, record.error = NOT_STREAMED, NOT_STREAMED_MESSAGE
            return
        if not record.error:
            self.consume(resp.lines, self.done, live=False)
        if self.tools:
            record.tool_call_items = streamed_tool_calls(resp.lines)
            record.tool_calls = len(record.tool_call_items)
        record.generated_text = "".join(self.texts)
        if self.reasoning:
            record.reasoning_text = "".join(self.reasoning)
        if self.completion_tokens is not None:
            record.output_tokens = self.completion_tokens
            record.output_tokens_source = "usage"
        elif self.backend.tokens_per_event_known:
            record.output_tokens = sum(record.chunk_tokens)
            record.output_tokens_source = "chunks"
        else:
            # counted after the run by re-tokenizing the text (never in the stream loop)
            record.output_tokens = len(record.chunk_tokens)
            record.output_tokens_source = "pending"
        if not record.error:
            if record.chunk_times:
                record.success = True
            else:
                record.error = EMPTY_STREAM_MESSAGE
                record.failure_kind = EMPTY_STREAM

    @staticmethod
    def _body_error(body: bytes) -> str:
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            return "server error"
        return f"server error: {error_message(data) if isinstance(data, dict) else data}"

    def _finish_whole(self, resp: Response) -> None:
        record = self.record
        t = resp.lines[-1][0] if resp.lines else perf_counter()
        if self.backend.pooling:
            self._finish_pooling(resp, t)
            return
        try:
            text, completion_tokens, prompt_tokens = self.backend.parse_response(resp.body)
        except Exception as exc:
            record.failure_kind, record.error = event_failure(resp.body, one_line(str(exc)))
            return
        record.first_token = t
        record.chunk_times.append(t)
        record.chunk_tokens.append(completion_tokens or 1)
        record.generated_text = text
        record.server_prompt_tokens = prompt_tokens
        record.cached_tokens = self.backend.response_cached_tokens(resp.body)
        if self.tools:
            record.tool_call_items = response_tool_calls(resp.body)
            record.tool_calls = len(record.tool_call_items)
        if completion_tokens is not None:
            record.output_tokens = completion_tokens
            record.output_tokens_source = "usage"
        else:
            record.output_tokens_source = "pending"
        record.success = True

    def _finish_pooling(self, resp: Response, t: float) -> None:
        """A pooling answer: its end (the last read) ends the E2E latency; no first token, nothing generated."""
        record = self.record
        try:
            record.server_prompt_tokens = self.backend.parse_pooling(resp.body)
        except Exception as exc:
            record.failure_kind, record.error = event_failure(resp.body, one_line(str(exc)))
            return
        record.chunk_times.append(t)
        record.chunk_tokens.append(0)
        record.output_tokens = 0
        record.output_tokens_source = "usage"
        record.success = True

    def fail_transport(self, exc: TransportError) -> None:
        """The connection failed or broke mid-stream: keep what arrived, count the request as failed. The
        error's type decides (:mod:`llmload.client.transport.errors`); its message names the host and what failed."""
        record = self.record
        record.failure_kind = exc.kind
        if isinstance(exc, Cancelled):
            record.cancelled = True
            record.error = one_line(f"cancelled by the client after {len(record.chunk_times)} events "
                                    f"({perf_counter() - record.start:.3f} s)")
            return
        if isinstance(exc, ConnectError):
            record.error = one_line(str(exc))
            return
        if isinstance(exc, ReadTimeout):
            what = f"timed out after {self.network_timeout:g} s without data"
        elif isinstance(exc, RequestTimeout):
            limit = self.request_timeout
            what = f"the whole request took longer than {limit:g} s" if limit else "the request took too long"
        else:
            what = f"{type(exc).__name__}: {exc}"
        if record.chunk_times:
            record.error = one_line(f"stream broken after {len(record.chunk_times)} events: {what}")
        else:
            record.error = one_line(f"request failed: {what}")
