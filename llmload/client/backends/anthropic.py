"""The Anthropic Messages API (``/v1/messages``), as Anthropic, vLLM and SGLang serve it.

A stream is typed events (an SSE ``event:`` line, ignored, and a ``data:`` object with the same ``type``):
``message_start`` (``message.usage.input_tokens`` and ``cache_read_input_tokens``), ``content_block_start``,
``ping``, one ``content_block_delta`` per chunk (``delta.type`` ``text_delta`` with ``text``, ``thinking_delta``
with ``thinking``, ``input_json_delta`` for a tool call), ``content_block_stop``, ``message_delta`` (``usage
.output_tokens``, ``delta.stop_reason``) and ``message_stop``; an ``error`` event carries ``error.message``.
The prompt's tokens are ``input_tokens`` plus the cached and cache-creation ones (Anthropic counts them apart).
Under the content rule the first text, thinking or tool-call delta is the first token.
"""

from __future__ import annotations

from typing import Any

from llmload.client.backends.base import (
    EMPTY,
    Backend,
    StreamEvent,
    as_int,
    as_str,
    decode_response,
    with_parts,
)
from llmload.common.errors import EndpointError

#: the API version header Anthropic requires (vLLM and SGLang accept it)
API_VERSION = "2023-06-01"
#: stop reasons as OpenAI's finish reasons
_FINISH = {"max_tokens": "length", "end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls"}


def _prompt_usage(usage: Any) -> tuple[int | None, int | None]:
    """``(prompt tokens, cached tokens)`` of a usage object: input + cache read + cache creation."""
    if not isinstance(usage, dict):
        return None, None
    uncached = as_int(usage.get("input_tokens"))
    if uncached is None:
        return None, None
    cached = as_int(usage.get("cache_read_input_tokens"))
    created = as_int(usage.get("cache_creation_input_tokens")) or 0
    return uncached + (cached or 0) + created, cached


def _split_system(messages: list[dict]) -> tuple[str, list[dict]]:
    """Anthropic takes the system prompt apart from the messages."""
    system = "\n".join(as_str(m.get("content")) for m in messages if m.get("role") == "system")
    return system, [m for m in messages if m.get("role") != "system"]


def _image_block(url: str) -> dict:
    if url.startswith("data:"):
        head, _, data = url.partition(",")
        media_type = head[5:].split(";", 1)[0]
        return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


class AnthropicMessages(Backend):
    """``/v1/messages`` with ``stream: true``; the API key goes as ``x-api-key`` (and as a Bearer token, which
    vLLM's and SGLang's servers check)."""

    name = "anthropic-messages"
    default_path = "/v1/messages"
    chat = True

    def auth_headers(self, api_key: str) -> dict[str, str]:
        return {"x-api-key": api_key, "Authorization": f"Bearer {api_key}"}

    def extra_headers(self) -> dict[str, str]:
        return {"anthropic-version": API_VERSION}

    def _body(
        self, prompt: str, output_len: int, *, model: str, ignore_eos: bool, messages: list[dict] | None
    ) -> dict:
        system, turns = _split_system(messages) if messages is not None else ("", [{"role": "user",
                                                                                    "content": prompt}])
        body: dict = {"model": model, "messages": turns, "max_tokens": output_len, "temperature": 0.0,
                      "stream": True}
        if system:
            body["system"] = system
        if ignore_eos:
            body["ignore_eos"] = True
        return body

    def add_images(self, body: dict, images: list[str]) -> None:
        """Anthropic's image blocks after the text: a ``data:`` URL as a ``base64`` source (its media type and
        data), another URL as a ``url`` source."""
        body["messages"] = with_parts(body["messages"], "text", [_image_block(url) for url in images])

    def _event(self, data: dict, state: Any) -> StreamEvent:
        kind = data.get("type")
        if kind == "content_block_delta":
            delta = data.get("delta") or {}
            step = delta.get("type")
            if step == "text_delta":
                text = as_str(delta.get("text"))
                return StreamEvent(text, bool(text), True)
            if step == "thinking_delta":
                thinking = as_str(delta.get("thinking"))
                return StreamEvent("", bool(thinking), True, reasoning=thinking)
            if step == "input_json_delta":
                return StreamEvent("", True, True)
            return EMPTY
        if kind == "message_start":
            prompt, cached = _prompt_usage((data.get("message") or {}).get("usage"))
            return StreamEvent(prompt_tokens=prompt, cached_tokens=cached) if prompt is not None else EMPTY
        if kind == "message_delta":
            usage = data.get("usage") or {}
            stop = (data.get("delta") or {}).get("stop_reason")
            return StreamEvent(completion_tokens=as_int(usage.get("output_tokens")),
                               finish_reason=_FINISH.get(stop, stop) if isinstance(stop, str) else None)
        return EMPTY

    def parse_response(self, body: bytes) -> tuple[str, int | None, int | None]:
        data = decode_response(body)
        try:
            text = "".join(as_str(block.get("text")) for block in data["content"] if block.get("type") == "text")
        except (TypeError, KeyError, AttributeError):
            raise EndpointError(f"{self.name}: response has no content") from None
        usage = data.get("usage") or {}
        prompt, _ = _prompt_usage(usage)
        return text, as_int(usage.get("output_tokens")) if isinstance(usage, dict) else None, prompt
