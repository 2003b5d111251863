"""Each dialect's stream events and JSON responses, rendered as bytes.

Prefixes and suffixes are built once per request, so a token event is a few byte concatenations.
Dialect quirks (what real engines do that clients trip over):

- ``vllm``: chat streams open with a role-only chunk (``delta: {role, content: ""}``) right before the first
  token; a final usage-only chunk when ``stream_options.include_usage``; ``data: [DONE]``.
- ``sglang``: the first event carries empty text and is sent as soon as the request is accepted.
- ``max``: vLLM's wire format (its difference is timing; see the stall profiles).
- ``transformers``: the role chunk is sent before generation; usage rides on the finish chunk together with
  ``choices``; no ``[DONE]``; errors arrive as ``data: {"error": ...}`` inside a 200 response.

Usage carries ``prompt_tokens_details.cached_tokens`` whenever the prefix cache is on (as vLLM does with
prefix caching enabled) and, for chat with reasoning, ``completion_tokens_details.reasoning_tokens``. Chat's
first ``reasoning_tokens`` tokens go out as ``delta.reasoning_content`` (vLLM's field), the rest as
``delta.content``; a chunk that straddles the boundary carries both. A chat answer that calls a tool
(:mod:`llmload.sim.tools`) streams ``delta.tool_calls`` instead (:class:`ToolCallWire`).
"""

from __future__ import annotations

import hashlib

import orjson

from llmload.sim.requests import GenRequest

_NULL = b"null"


def _sse(payload: bytes) -> bytes:
    return b"data: " + payload + b"\n\n"


def _usage(req: GenRequest, completion_tokens: int) -> bytes:
    out = b'{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d' % (
        req.prompt_tokens,
        req.prompt_tokens + completion_tokens,
        completion_tokens,
    )
    if req.prefix_cache:
        out += b',"prompt_tokens_details":{"cached_tokens":%d}' % req.cached_tokens
    if req.reasoning_tokens:
        out += b',"completion_tokens_details":{"reasoning_tokens":%d}' % min(req.reasoning_tokens, completion_tokens)
    return out + b"}"


class Wire:
    """Renders one request's events. Subclasses fill in the dialect."""

    content_type = b"text/event-stream"

    def __init__(self, req: GenRequest, dialect: str, request_id: str, created: int) -> None:
        self.req = req
        self.dialect = dialect
        self.request_id = request_id
        self.created = created

    def head_events(self) -> bytes:
        """Events sent together with the response headers, before any generation."""
        return b""

    def first_events(self) -> bytes:
        """Events sent immediately before the first token."""
        return b""

    def token_event(self, text: bytes, generated: int, last: bool, n: int = 1) -> bytes:
        """The event for ``n`` tokens (``text``) that bring the count to ``generated``."""
        raise NotImplementedError

    def tail_events(self) -> bytes:
        """Events after the last token (usage, ``[DONE]``)."""
        return b""

    def malformed_event(self) -> bytes:
        return b'data: {"id":"' + self.request_id.encode() + b'","choices":[{"index":0,"text":"\n\n'

    def error_event(self, message: str) -> bytes:
        return _sse(orjson.dumps({"error": message}))

    def full_json(self, text: bytes) -> bytes:
        raise NotImplementedError


class _OpenAIWire(Wire):
    """What completions and chat streams share: the finish reason, the usage chunk and ``[DONE]``."""

    _head = b""

    def _finish(self) -> bytes:
        return b'"length"' if self.req.output_tokens >= self.req.max_tokens else b'"stop"'

    def tail_events(self) -> bytes:
        if self.dialect == "transformers":
            return b""
        out = b""
        if self.req.include_usage:
            out += _sse(self._head + b'],"usage":' + _usage(self.req, self.req.output_tokens) + b"}")
        return out + b"data: [DONE]\n\n"


class CompletionsWire(_OpenAIWire):
    def __init__(self, req: GenRequest, dialect: str, request_id: str, created: int) -> None:
        super().__init__(req, dialect, request_id, created)
        self._head = b'{"id":"%s","object":"text_completion","created":%d,"model":%s,"choices":[' % (
            request_id.encode(),
            created,
            orjson.dumps(req.model),
        )
        self._pre = b"data: " + self._head + b'{"index":0,"text":"'
        self._post = b'","logprobs":null,"finish_reason":null,"stop_reason":null}]}\n\n'


    def head_events(self) -> bytes:
        if self.dialect == "sglang" and self.req.stream:
            return self._pre + self._post
        return b""

    def token_event(self, text: bytes, generated: int, last: bool, n: int = 1) -> bytes:
        if not last:
            return self._pre + text + self._post
        tail = b'","logprobs":null,"finish_reason":' + self._finish() + b',"stop_reason":null}]'
        if self.dialect == "transformers":
            tail += b',"usage":' + _usage(self.req, generated)
        return self._pre + text + tail + b"}\n\n"


    def full_json(self, text: bytes) -> bytes:
        choice = b'{"index":0,"text":"' + text + b'","logprobs":null,"finish_reason":' + self._finish() + b"}"
        return self._head + choice + b'],"usage":' + _usage(
            self.req, self.req.output_tokens
        ) + b"}"


class ChatWire(_OpenAIWire):
    def __init__(self, req: GenRequest, dialect: str, request_id: str, created: int) -> None:
        super().__init__(req, dialect, request_id, created)
        self._head = b'{"id":"%s","object":"chat.completion.chunk","created":%d,"model":%s,"choices":[' % (
            request_id.encode(),
            created,
            orjson.dumps(req.model),
        )
        self._pre = b"data: " + self._head + b'{"index":0,"delta":{"content":"'
        self._post = b'"},"logprobs":null,"finish_reason":null}]}\n\n'
        self._think = b"data: " + self._head + b'{"index":0,"delta":{"reasoning_content":"'
        self._reasoning = req.reasoning_tokens
        self._role = (
            b"data: " + self._head + b'{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,'
            b'"finish_reason":null}]}\n\n'
        )


    def head_events(self) -> bytes:
        if not self.req.stream:
            return b""
        if self.dialect == "transformers":
            return self._role
        if self.dialect == "sglang":
            return self._pre + self._post
        return b""

    def first_events(self) -> bytes:
        if self.req.stream and self.dialect in ("vllm", "max"):
            return self._role
        return b""

    def token_event(self, text: bytes, generated: int, last: bool, n: int = 1) -> bytes:
        """The chunk of tokens ``generated - n`` to ``generated``; reasoning tokens come first."""
        reasoning = self._reasoning
        if generated <= reasoning:
            pre = self._think + text
        elif generated - n < reasoning:  # the chunk holds the last reasoning tokens and the first answer ones
            req = self.req
            pre = (self._think + req.text(generated - n, reasoning - generated + n) + b'","content":"'
                   + req.text(reasoning, generated - reasoning))
        else:
            pre = self._pre + text
        if not last:
            return pre + self._post
        tail = b'"},"logprobs":null,"finish_reason":' + self._finish() + b"}]"
        if self.dialect == "transformers":
            tail += b',"usage":' + _usage(self.req, generated)
        return pre + tail + b"}\n\n"

    def full_json(self, text: bytes) -> bytes:
        head = self._head.replace(b"chat.completion.chunk", b"chat.completion", 1)
        req = self.req
        if req.reasoning_tokens:
            # vLLM's reasoning parser: content is null when the whole output is reasoning
            answer = req.output_tokens - req.reasoning_tokens
            content = b'"' + req.text(req.reasoning_tokens, answer) + b'"' if answer else _NULL
            message = (b'{"role":"assistant","reasoning_content":"' + req.text(0, req.reasoning_tokens)
                       + b'","content":' + content + b"}")
        else:
            message = b'{"role":"assistant","content":"' + text + b'"}'
        choice = b'{"index":0,"message":' + message + b',"logprobs":null,"finish_reason":' + self._finish() + b"}"
        return head + choice + b'],"usage":' + _usage(req, req.output_tokens) + b"}"


class ToolCallWire(ChatWire):
    """A chat answer that calls a function (:mod:`llmload.sim.tools`), as vLLM's tool parsers stream it: a chunk
    that opens the call (``delta.tool_calls[0]`` with its id, type and name, ``arguments: ""``; on vLLM and MAX
    with the role), then each token a piece of the arguments, the last chunk's ``finish_reason`` ``tool_calls``.
    Reasoning tokens (``--reasoning-tokens``) come first, as ``reasoning_content``, and the call opens after them.
    Unstreamed: ``message.tool_calls`` with the whole arguments, ``content`` null."""

    def __init__(self, req: GenRequest, dialect: str, request_id: str, created: int) -> None:
        super().__init__(req, dialect, request_id, created)
        self._call_id = b"chatcmpl-tool-" + hashlib.blake2b(request_id.encode(), digest_size=16).hexdigest().encode()
        self._name = orjson.dumps(req.tool)
        role = b'"role":"assistant",' if dialect in ("vllm", "max") and not req.reasoning_tokens else b""
        self._open = (b"data: " + self._head + b'{"index":0,"delta":{' + role + b'"tool_calls":[{"index":0,"id":"'
                      + self._call_id + b'","type":"function","function":{"name":' + self._name
                      + b',"arguments":""}}]},"logprobs":null,"finish_reason":null}]}\n\n')
        self._args = b"data: " + self._head + b'{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"'
        self._args_post = b'"}}]},"logprobs":null,"finish_reason":null}]}\n\n'

    def first_events(self) -> bytes:
        if not self.req.stream:
            return b""
        if self.req.reasoning_tokens:
            return super().first_events()  # the role chunk; the call opens after the reasoning
        return self._open

    def token_event(self, text: bytes, generated: int, last: bool, n: int = 1) -> bytes:
        """The chunk of tokens ``generated - n`` to ``generated``: reasoning, the call's opening once the
        reasoning is over, then argument pieces (the arguments keep at least the last token)."""
        reasoning = self._reasoning
        if generated <= reasoning:
            return super().token_event(text, generated, last, n)
        out = b""
        if reasoning and generated - n <= reasoning:
            if generated - n < reasoning:  # the chunk's first tokens are the last reasoning ones
                out = self._think + self.req.text(generated - n, reasoning - generated + n) + self._post
                text = self.req.text(reasoning, generated - reasoning)
            out += self._open
        if not last:
            return out + self._args + text + self._args_post
        tail = b'"}}]},"logprobs":null,"finish_reason":"tool_calls"}]'
        if self.dialect == "transformers":
            tail += b',"usage":' + _usage(self.req, generated)
        return out + self._args + text + tail + b"}\n\n"

    def full_json(self, text: bytes) -> bytes:
        head = self._head.replace(b"chat.completion.chunk", b"chat.completion", 1)
        req = self.req
        reasoning = req.reasoning_tokens
        thought = b'"reasoning_content":"' + req.text(0, reasoning) + b'",' if reasoning else b""
        call = (b'{"id":"' + self._call_id + b'","type":"function","function":{"name":' + self._name
                + b',"arguments":"' + req.text(reasoning, req.output_tokens - reasoning) + b'"}}')
        message = b'{"role":"assistant",' + thought + b'"content":null,"tool_calls":[' + call + b"]}"
        choice = b'{"index":0,"message":' + message + b',"logprobs":null,"finish_reason":"tool_calls"}'
        return head + choice + b'],"usage":' + _usage(req, req.output_tokens) + b"}"


class SGLangWire(Wire):
    """SGLang native ``/generate``: every event carries the cumulative text and token count."""

    def __init__(self, req: GenRequest, dialect: str, request_id: str, created: int) -> None:
        super().__init__(req, dialect, request_id, created)
        self._text = b""
        self._meta = b'"meta_info":{"id":"%s","prompt_tokens":%d,"completion_tokens":' % (
            request_id.encode(),
            req.prompt_tokens,
        )

    def _event(self, generated: int, finish: bytes) -> bytes:
        return (
            b'{"text":"' + self._text + b'",' + self._meta + b'%d,"cached_tokens":%d,"finish_reason":' % (
                generated, self.req.cached_tokens) + finish + b'},"index":0}'
        )

    def _finish(self, generated: int) -> bytes:
        kind = b"length" if self.req.output_tokens >= self.req.max_tokens else b"stop"
        return b'{"type":"' + kind + b'","length":%d}' % generated

    def token_event(self, text: bytes, generated: int, last: bool, n: int = 1) -> bytes:
        self._text += text
        return _sse(self._event(generated, self._finish(generated) if last else _NULL))

    def tail_events(self) -> bytes:
        return b"data: [DONE]\n\n"

    def full_json(self, text: bytes) -> bytes:
        self._text = text
        return self._event(self.req.output_tokens, self._finish(self.req.output_tokens))


class TGIWire(Wire):
    """TGI ``/generate_stream``: ``data:`` without a space, text in ``token.text``, no ``[DONE]``."""

    def __init__(self, req: GenRequest, dialect: str, request_id: str, created: int) -> None:
        super().__init__(req, dialect, request_id, created)
        self._text = b""

    def token_event(self, text: bytes, generated: int, last: bool, n: int = 1) -> bytes:
        self._text += text
        token = b'{"index":%d,"token":{"id":%d,"text":"' % (generated, generated) + text + b'","logprob":0.0,"special":false}'
        if last:
            finish = b"length" if self.req.output_tokens >= self.req.max_tokens else b"eos_token"
            tail = b',"generated_text":"' + self._text + b'","details":{"finish_reason":"' + finish
            tail += b'","generated_tokens":%d,"seed":null}}' % generated
        else:
            tail = b',"generated_text":null,"details":null}'
        return b"data:" + token + tail + b"\n\n"

    def full_json(self, text: bytes) -> bytes:
        return b'{"generated_text":"' + text + b'"}'


class TRTWire(Wire):
    """TensorRT-LLM's Triton ``generate_stream``: JSON events with ``text_output``, no ``[DONE]``."""

    def __init__(self, req: GenRequest, dialect: str, request_id: str, created: int) -> None:
        super().__init__(req, dialect, request_id, created)

    def token_event(self, text: bytes, generated: int, last: bool, n: int = 1) -> bytes:
        end = b"true" if last else b"false"
        return (
            b'data: {"model_name":"ensemble","model_version":"1","sequence_end":' + end
            + b',"sequence_id":0,"sequence_start":false,"text_output":"' + text + b'"}\n\n'
        )

    def full_json(self, text: bytes) -> bytes:
        return b'{"model_name":"ensemble","model_version":"1","text_output":"' + text + b'"}'


#: request kind -> wire, for the routes of this module (:func:`llmload.sim.typed_wire.make_wire` serves all)
WIRES: dict[str, type[Wire]] = {
    "completions": CompletionsWire,
    "chat": ChatWire,
    "sglang": SGLangWire,
    "tgi": TGIWire,
    "trt": TRTWire,
}
