"""The typed-event APIs' streams, rendered as bytes: the OpenAI Responses API (``/v1/responses``) and the
Anthropic Messages API (``/v1/messages``). Each event is an SSE ``event:`` line and a ``data:`` object with the
same ``type``; the text goes out one delta event a chunk, with the timing and prefix cache of every route
(docs/simulator.md, "Routes"). The other dialects are in :mod:`llmload.sim.wire`; :func:`make_wire` serves
every route.
"""

from __future__ import annotations

import orjson

from llmload.sim.pooling_wire import PoolingWire
from llmload.sim.requests import GenRequest
from llmload.sim.text import text_of
from llmload.sim.wire import WIRES, ToolCallWire, Wire

#: events of a Responses stream before its first delta: created, in_progress, the first item and its part
_HEAD_EVENTS = 4
#: events between a Responses stream's last reasoning delta and its first answer delta: the reasoning part's and
#: item's ``.done`` events, the message item's ``added`` events
_SWITCH_EVENTS = 5


def _typed(kind: bytes, payload: bytes) -> bytes:
    """One typed SSE event (the Responses and Messages APIs): an ``event:`` line, then its ``data:``."""
    return b"event: " + kind + b"\ndata: " + payload + b"\n\n"


def _split(req: GenRequest, text: bytes, generated: int, n: int) -> tuple[bytes, bytes]:
    """``(reasoning text, answer text)`` of the chunk of tokens ``generated - n`` to ``generated``: the first
    ``req.reasoning_tokens`` tokens of an output are reasoning (as on the chat route)."""
    r = req.reasoning_tokens
    if generated <= r:
        return text, b""
    if generated - n >= r:
        return b"", text
    return (text_of(req.text_offset, generated - n, r - generated + n),
            text_of(req.text_offset, r, generated - r))


class ResponsesWire(Wire):
    """The OpenAI Responses API (``/v1/responses``): typed events, usage on ``response.completed``. With
    reasoning (``--reasoning-tokens``) the output is two items: a ``reasoning`` item (``reasoning_text`` deltas)
    at output index 0, then the ``message`` item."""

    def __init__(self, req: GenRequest, dialect: str, request_id: str, created: int) -> None:
        super().__init__(req, dialect, request_id, created)
        self._deltas = 0
        self._text = b""
        self._thought = b""
        self._switched = False
        self._msg = b"msg_" + request_id.encode()
        self._rs = b"rs_" + request_id.encode()
        index = b"1" if req.reasoning_tokens else b"0"
        self._delta = (b'{"type":"response.output_text.delta","item_id":"' + self._msg
                       + b'","output_index":' + index + b',"content_index":0,"delta":"')
        self._think = (b'{"type":"response.reasoning_text.delta","item_id":"' + self._rs
                       + b'","output_index":0,"content_index":0,"delta":"')

    def _seq(self, k: int) -> int:
        """``sequence_number`` of the ``k``-th event after the deltas rendered so far (the head and the first
        item's two ``added`` events are 0-3, then the deltas and the switch to the answer; the sim renders the
        first delta before the ``added`` events sent ahead of it, so numbers come from positions)."""
        return _HEAD_EVENTS + self._deltas + (_SWITCH_EVENTS if self._switched else 0) + k

    def _response(self, status: bytes, output: bytes, usage: bytes) -> bytes:
        return (b'{"id":"%s","object":"response","created_at":%d,"model":%s,"status":"%s","output":[%s]%s}'
                % (self.request_id.encode(), self.created, orjson.dumps(self.req.model), status, output, usage))

    def _usage(self) -> bytes:
        req = self.req
        return (b',"usage":{"input_tokens":%d,"input_tokens_details":{"cached_tokens":%d},"output_tokens":%d,'
                b'"output_tokens_details":{"reasoning_tokens":%d},"total_tokens":%d}'
                % (req.prompt_tokens, req.cached_tokens, req.output_tokens, req.reasoning_tokens,
                   req.prompt_tokens + req.output_tokens))

    def _message(self, status: bytes, text: bytes | None) -> bytes:
        content = (b'{"type":"output_text","text":"' + text + b'","annotations":[]}') if text is not None else b""
        return (b'{"type":"message","id":"' + self._msg + b'","status":"' + status
                + b'","role":"assistant","content":[' + content + b"]}")

    def _reasoning(self, status: bytes, text: bytes) -> bytes:
        return (b'{"type":"reasoning","id":"' + self._rs + b'","status":"' + status + b'","summary":[],'
                b'"content":[{"type":"reasoning_text","text":"' + text + b'"}]}')

    def _output(self) -> bytes:
        """The finished response's ``output``: the reasoning item (if any), the message (if it has text)."""
        items = [self._reasoning(b"completed", self._thought)] if self.req.reasoning_tokens else []
        if not self.req.reasoning_tokens or self.req.output_tokens > self.req.reasoning_tokens:
            items.append(self._message(b"completed", self._text))
        return b",".join(items)

    def head_events(self) -> bytes:
        if not self.req.stream:
            return b""
        created = self._response(b"in_progress", b"", b"")
        return (_typed(b"response.created", b'{"type":"response.created","sequence_number":%d,"response":%s}'
                       % (0, created))
                + _typed(b"response.in_progress", b'{"type":"response.in_progress","sequence_number":%d,'
                         b'"response":%s}' % (1, created)))

    def _added(self, seq: int, output_index: int, item: bytes, item_id: bytes, part: bytes) -> bytes:
        return (_typed(b"response.output_item.added", b'{"type":"response.output_item.added","sequence_number":%d,'
                       b'"output_index":%d,"item":%s}' % (seq, output_index, item))
                + _typed(b"response.content_part.added", b'{"type":"response.content_part.added",'
                         b'"sequence_number":%d,"item_id":"%s","output_index":%d,"content_index":0,"part":%s}'
                         % (seq + 1, item_id, output_index, part)))

    def _text_part(self, text: bytes) -> bytes:
        return b'{"type":"output_text","text":"' + text + b'","annotations":[]}'

    def _done(self, seq: int, output_index: int, item_id: bytes, kind: bytes, part: bytes, item: bytes) -> bytes:
        """A part's ``.done`` (``kind``: ``output_text`` or ``reasoning_text``), its part's and its item's."""
        text_key = b"text"
        return (_typed(b"response.%s.done" % kind, b'{"type":"response.%s.done","sequence_number":%d,'
                       b'"item_id":"%s","output_index":%d,"content_index":0,"%s":"%s"}'
                       % (kind, seq, item_id, output_index, text_key,
                          self._thought if kind == b"reasoning_text" else self._text))
                + _typed(b"response.content_part.done", b'{"type":"response.content_part.done",'
                         b'"sequence_number":%d,"item_id":"%s","output_index":%d,"content_index":0,"part":%s}'
                         % (seq + 1, item_id, output_index, part))
                + _typed(b"response.output_item.done", b'{"type":"response.output_item.done","sequence_number":%d,'
                         b'"output_index":%d,"item":%s}' % (seq + 2, output_index, item)))

    def _reasoning_done(self, seq: int) -> bytes:
        return self._done(seq, 0, self._rs, b"reasoning_text",
                          b'{"type":"reasoning_text","text":"' + self._thought + b'"}',
                          self._reasoning(b"completed", self._thought))

    def first_events(self) -> bytes:
        if not self.req.stream:
            return b""
        if self.req.reasoning_tokens:
            return self._added(2, 0, self._reasoning(b"in_progress", b""), self._rs,
                               b'{"type":"reasoning_text","text":""}')
        return self._added(2, 0, self._message(b"in_progress", None), self._msg, self._text_part(b""))

    def token_event(self, text: bytes, generated: int, last: bool, n: int = 1) -> bytes:
        out = b""
        thought, answer = _split(self.req, text, generated, n) if self.req.reasoning_tokens else (b"", text)
        if thought:
            self._thought += thought
            self._deltas += 1
            out += _typed(b"response.reasoning_text.delta", self._think + thought + b'","sequence_number":%d}'
                          % self._seq(-1))
        if answer:
            if self.req.reasoning_tokens and not self._switched:
                out += self._reasoning_done(self._seq(0))
                out += self._added(self._seq(3), 1, self._message(b"in_progress", None), self._msg,
                                   self._text_part(b""))
                self._switched = True
            self._text += answer
            self._deltas += 1
            out += _typed(b"response.output_text.delta", self._delta + answer + b'","sequence_number":%d}'
                          % self._seq(-1))
        return out

    def tail_events(self) -> bytes:
        if self.req.reasoning_tokens and not self._switched:  # every token was reasoning: no message item
            out = self._reasoning_done(self._seq(0))
            seq = self._seq(3)
        else:
            index = 1 if self.req.reasoning_tokens else 0
            out = self._done(self._seq(0), index, self._msg, b"output_text", self._text_part(self._text),
                             self._message(b"completed", self._text))
            seq = self._seq(3)
        return out + _typed(b"response.completed", b'{"type":"response.completed","sequence_number":%d,"response":%s}'
                            % (seq, self._response(b"completed", self._output(), self._usage())))

    def error_event(self, message: str) -> bytes:
        return _typed(b"error", orjson.dumps({"type": "error", "code": "server_error", "message": message,
                                              "sequence_number": self._seq(0)}))

    def full_json(self, text: bytes) -> bytes:
        self._thought, self._text = _split(self.req, text, self.req.output_tokens, self.req.output_tokens) \
            if self.req.reasoning_tokens else (b"", text)
        return self._response(b"completed", self._output(), self._usage())


class MessagesWire(Wire):
    """The Anthropic Messages API (``/v1/messages``): typed events; the prompt's usage on ``message_start``
    (uncached ``input_tokens`` and ``cache_read_input_tokens``), the output's on ``message_delta``. With
    reasoning (``--reasoning-tokens``) a ``thinking`` block (``thinking_delta``s, then a ``signature_delta``) comes
    first, at index 0, and the text block at index 1."""

    def __init__(self, req: GenRequest, dialect: str, request_id: str, created: int) -> None:
        super().__init__(req, dialect, request_id, created)
        self._switched = False
        index = b"1" if req.reasoning_tokens else b"0"
        self._delta = b'{"type":"content_block_delta","index":' + index + b',"delta":{"type":"text_delta","text":"'
        self._think = b'{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"'
        #: stands for the signature Anthropic puts on a thinking block (opaque to every client)
        self._signature = b"sig_" + request_id.encode()

    def _stop(self) -> bytes:
        return b"max_tokens" if self.req.output_tokens >= self.req.max_tokens else b"end_turn"

    def _message(self, content: bytes, stop: bytes, output_tokens: int) -> bytes:
        req = self.req
        return (b'{"id":"%s","type":"message","role":"assistant","model":%s,"content":[%s],"stop_reason":%s,'
                b'"stop_sequence":null,"usage":{"input_tokens":%d,"cache_read_input_tokens":%d,'
                b'"cache_creation_input_tokens":0,"output_tokens":%d}}'
                % (self.request_id.encode(), orjson.dumps(req.model), content, stop,
                   req.prompt_tokens - req.cached_tokens, req.cached_tokens, output_tokens))

    def _start(self, index: int, block: bytes) -> bytes:
        return _typed(b"content_block_start", b'{"type":"content_block_start","index":%d,"content_block":%s}'
                      % (index, block))

    def _end_thinking(self) -> bytes:
        return (_typed(b"content_block_delta", b'{"type":"content_block_delta","index":0,'
                       b'"delta":{"type":"signature_delta","signature":"%s"}}' % self._signature)
                + _typed(b"content_block_stop", b'{"type":"content_block_stop","index":0}'))

    def first_events(self) -> bytes:
        # message_start goes out once the engine admitted the request: the cached tokens are known then
        if not self.req.stream:
            return b""
        block = (b'{"type":"thinking","thinking":"","signature":""}' if self.req.reasoning_tokens
                 else b'{"type":"text","text":""}')
        return (_typed(b"message_start", b'{"type":"message_start","message":%s}' % self._message(b"", b"null", 0))
                + self._start(0, block) + _typed(b"ping", b'{"type":"ping"}'))

    def token_event(self, text: bytes, generated: int, last: bool, n: int = 1) -> bytes:
        if not self.req.reasoning_tokens:
            return _typed(b"content_block_delta", self._delta + text + b'"}}')
        thought, answer = _split(self.req, text, generated, n)
        out = _typed(b"content_block_delta", self._think + thought + b'"}}') if thought else b""
        if answer:
            if not self._switched:
                out += self._end_thinking() + self._start(1, b'{"type":"text","text":""}')
                self._switched = True
            out += _typed(b"content_block_delta", self._delta + answer + b'"}}')
        return out

    def tail_events(self) -> bytes:
        if self.req.reasoning_tokens and not self._switched:
            stop = self._end_thinking()
        else:
            stop = _typed(b"content_block_stop", b'{"type":"content_block_stop","index":%d}'
                          % (1 if self.req.reasoning_tokens else 0))
        return (stop
                + _typed(b"message_delta", b'{"type":"message_delta","delta":{"stop_reason":"%s","stop_sequence":null},'
                         b'"usage":{"output_tokens":%d}}' % (self._stop(), self.req.output_tokens))
                + _typed(b"message_stop", b'{"type":"message_stop"}'))

    def error_event(self, message: str) -> bytes:
        return _typed(b"error", orjson.dumps({"type": "error", "error": {"type": "api_error", "message": message}}))

    def full_json(self, text: bytes) -> bytes:
        req = self.req
        if not req.reasoning_tokens:
            content = b'{"type":"text","text":"' + text + b'"}'
        else:
            thought, answer = _split(req, text, req.output_tokens, req.output_tokens)
            content = b'{"type":"thinking","thinking":"' + thought + b'","signature":"' + self._signature + b'"}'
            if answer:
                content += b',{"type":"text","text":"' + answer + b'"}'
        return self._message(content, b'"' + self._stop() + b'"', req.output_tokens)


#: request kind -> wire, every route's
_ALL_WIRES: dict[str, type[Wire]] = {**WIRES, "responses": ResponsesWire, "messages": MessagesWire}


def make_wire(req: GenRequest, dialect: str, request_id: str, created: int) -> Wire:
    """The wire of ``req``'s route (a chat answer that calls a tool: :class:`~llmload.sim.wire.ToolCallWire`)."""
    if req.tool:
        return ToolCallWire(req, dialect, request_id, created)
    if req.pooled is not None:
        return PoolingWire(req, dialect, request_id, created)
    return _ALL_WIRES[req.kind](req, dialect, request_id, created)
