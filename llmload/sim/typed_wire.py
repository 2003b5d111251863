"""The typed-event APIs' streams, rendered as bytes: the OpenAI Responses API (``/v1/responses``) and the
Anthropic Messages API (``/v1/messages``). Each event is an SSE ``event:`` line and a ``data:`` object with the
same ``type``; the text goes out one delta event a chunk, with the timing and prefix cache of every route
(docs/simulator.md, "Routes"). The other dialects are in :mod:`llmload.sim.wire`; :func:`make_wire` serves
every route.
"""

from __future__ import annotations

import orjson

from llmload.sim.requests import GenRequest
from llmload.sim.wire import WIRES, Wire

#: events of a Responses stream before its first text delta
_HEAD_EVENTS = 4


def _typed(kind: bytes, payload: bytes) -> bytes:
    """One typed SSE event (the Responses and Messages APIs): an ``event:`` line, then its ``data:``."""
    return b"event: " + kind + b"\ndata: " + payload + b"\n\n"


class ResponsesWire(Wire):
    """The OpenAI Responses API (``/v1/responses``): typed events, usage on ``response.completed``."""

    def __init__(self, req: GenRequest, dialect: str, request_id: str, created: int) -> None:
        super().__init__(req, dialect, request_id, created)
        self._deltas = 0
        self._text = b""
        self._item = b"msg_" + request_id.encode()
        self._delta = (b'{"type":"response.output_text.delta","item_id":"' + self._item
                       + b'","output_index":0,"content_index":0,"delta":"')

    def _seq(self, k: int) -> int:
        """``sequence_number`` of the ``k``-th event after the text deltas (the head and the two ``added``
        events are 0-3, the deltas follow; the sim may render a delta before the events sent ahead of it)."""
        return _HEAD_EVENTS + self._deltas + k

    def _response(self, status: bytes, output: bytes, usage: bytes) -> bytes:
        return (b'{"id":"%s","object":"response","created_at":%d,"model":%s,"status":"%s","output":[%s]%s}'
                % (self.request_id.encode(), self.created, orjson.dumps(self.req.model), status, output, usage))

    def _usage(self) -> bytes:
        req = self.req
        return (b',"usage":{"input_tokens":%d,"input_tokens_details":{"cached_tokens":%d},"output_tokens":%d,'
                b'"output_tokens_details":{"reasoning_tokens":0},"total_tokens":%d}'
                % (req.prompt_tokens, req.cached_tokens, req.output_tokens, req.prompt_tokens + req.output_tokens))

    def _message(self, status: bytes, text: bytes | None) -> bytes:
        content = (b'{"type":"output_text","text":"' + text + b'","annotations":[]}') if text is not None else b""
        return (b'{"type":"message","id":"' + self._item + b'","status":"' + status
                + b'","role":"assistant","content":[' + content + b"]}")

    def head_events(self) -> bytes:
        if not self.req.stream:
            return b""
        created = self._response(b"in_progress", b"", b"")
        return (_typed(b"response.created", b'{"type":"response.created","sequence_number":%d,"response":%s}'
                       % (0, created))
                + _typed(b"response.in_progress", b'{"type":"response.in_progress","sequence_number":%d,'
                         b'"response":%s}' % (1, created)))

    def first_events(self) -> bytes:
        if not self.req.stream:
            return b""
        return (_typed(b"response.output_item.added", b'{"type":"response.output_item.added","sequence_number":%d,'
                       b'"output_index":0,"item":%s}' % (2, self._message(b"in_progress", None)))
                + _typed(b"response.content_part.added", b'{"type":"response.content_part.added",'
                         b'"sequence_number":%d,"item_id":"%s","output_index":0,"content_index":0,'
                         b'"part":{"type":"output_text","text":"","annotations":[]}}' % (3, self._item)))

    def token_event(self, text: bytes, generated: int, last: bool, n: int = 1) -> bytes:
        self._text += text
        self._deltas += 1
        return _typed(b"response.output_text.delta", self._delta + text + b'","sequence_number":%d}'
                      % (_HEAD_EVENTS + self._deltas - 1))

    def tail_events(self) -> bytes:
        text, item = self._text, self._item
        return (_typed(b"response.output_text.done", b'{"type":"response.output_text.done","sequence_number":%d,'
                       b'"item_id":"%s","output_index":0,"content_index":0,"text":"%s"}' % (self._seq(0), item, text))
                + _typed(b"response.content_part.done", b'{"type":"response.content_part.done",'
                         b'"sequence_number":%d,"item_id":"%s","output_index":0,"content_index":0,'
                         b'"part":{"type":"output_text","text":"%s","annotations":[]}}' % (self._seq(1), item, text))
                + _typed(b"response.output_item.done", b'{"type":"response.output_item.done","sequence_number":%d,'
                         b'"output_index":0,"item":%s}' % (self._seq(2), self._message(b"completed", text)))
                + _typed(b"response.completed", b'{"type":"response.completed","sequence_number":%d,"response":%s}'
                         % (self._seq(3), self._response(b"completed", self._message(b"completed", text),
                                                         self._usage()))))

    def error_event(self, message: str) -> bytes:
        return _typed(b"error", orjson.dumps({"type": "error", "code": "server_error", "message": message,
                                              "sequence_number": self._seq(0)}))

    def full_json(self, text: bytes) -> bytes:
        return self._response(b"completed", self._message(b"completed", text), self._usage())


class MessagesWire(Wire):
    """The Anthropic Messages API (``/v1/messages``): typed events; the prompt's usage on ``message_start``
    (uncached ``input_tokens`` and ``cache_read_input_tokens``), the output's on ``message_delta``."""

    def __init__(self, req: GenRequest, dialect: str, request_id: str, created: int) -> None:
        super().__init__(req, dialect, request_id, created)
        self._delta = b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"'

    def _stop(self) -> bytes:
        return b"max_tokens" if self.req.output_tokens >= self.req.max_tokens else b"end_turn"

    def _message(self, content: bytes, stop: bytes, output_tokens: int) -> bytes:
        req = self.req
        return (b'{"id":"%s","type":"message","role":"assistant","model":%s,"content":[%s],"stop_reason":%s,'
                b'"stop_sequence":null,"usage":{"input_tokens":%d,"cache_read_input_tokens":%d,'
                b'"cache_creation_input_tokens":0,"output_tokens":%d}}'
                % (self.request_id.encode(), orjson.dumps(req.model), content, stop,
                   req.prompt_tokens - req.cached_tokens, req.cached_tokens, output_tokens))

    def first_events(self) -> bytes:
        # message_start goes out once the engine admitted the request: the cached tokens are known then
        if not self.req.stream:
            return b""
        return (_typed(b"message_start", b'{"type":"message_start","message":%s}' % self._message(b"", b"null", 0))
                + _typed(b"content_block_start", b'{"type":"content_block_start","index":0,'
                         b'"content_block":{"type":"text","text":""}}')
                + _typed(b"ping", b'{"type":"ping"}'))

    def token_event(self, text: bytes, generated: int, last: bool, n: int = 1) -> bytes:
        return _typed(b"content_block_delta", self._delta + text + b'"}}')

    def tail_events(self) -> bytes:
        return (_typed(b"content_block_stop", b'{"type":"content_block_stop","index":0}')
                + _typed(b"message_delta", b'{"type":"message_delta","delta":{"stop_reason":"%s","stop_sequence":null},'
                         b'"usage":{"output_tokens":%d}}' % (self._stop(), self.req.output_tokens))
                + _typed(b"message_stop", b'{"type":"message_stop"}'))

    def error_event(self, message: str) -> bytes:
        return _typed(b"error", orjson.dumps({"type": "error", "error": {"type": "api_error", "message": message}}))

    def full_json(self, text: bytes) -> bytes:
        return self._message(b'{"type":"text","text":"' + text + b'"}', b'"' + self._stop() + b'"',
                             self.req.output_tokens)


#: request kind -> wire, every route's
_ALL_WIRES: dict[str, type[Wire]] = {**WIRES, "responses": ResponsesWire, "messages": MessagesWire}


def make_wire(req: GenRequest, dialect: str, request_id: str, created: int) -> Wire:
    """The wire of ``req``'s route."""
    return _ALL_WIRES[req.kind](req, dialect, request_id, created)
