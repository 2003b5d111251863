"""OpenAI-compatible streams: ``/v1/completions`` (vllm, openai) and ``/v1/chat/completions``.

One parser reads both: completion choices carry ``text``, chat choices carry ``delta``. Usage is
read from any event that has it: a usage-only last chunk (vLLM) or the finish chunk together with
``choices`` (transformers serve), so neither placement counts 0 output tokens.
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


def _usage(data: dict) -> tuple[int | None, int | None]:
    usage = data.get("usage")
    if not usage:
        return None, None
    return as_int(usage.get("completion_tokens")), as_int(usage.get("prompt_tokens"))


def cached_tokens(data: dict) -> int | None:
    """``usage.prompt_tokens_details.cached_tokens``: vLLM and OpenAI report prefix-cache hits there."""
    details = (data.get("usage") or {}).get("prompt_tokens_details")
    return as_int(details.get("cached_tokens")) if isinstance(details, dict) else None


class OpenAICompletions(Backend):
    """``/v1/completions`` as vLLM's benchmark client sends it (minus vLLM-only sampling fields). No
    ``temperature``, as today's ``vllm bench serve``: sampling comes from :mod:`llmload.core.shaping`."""

    name = "openai"
    default_path = "/v1/completions"

    def _body(
        self, prompt: str, output_len: int, *, model: str, ignore_eos: bool, messages: list[dict] | None
    ) -> dict:
        body: dict = {
            "model": model,
            "prompt": prompt,
            "max_tokens": output_len,
            "logprobs": None,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if ignore_eos:  # only when asked: strict servers answer unknown fields with 422
            body["ignore_eos"] = True
        return body

    @property
    def openai_wire(self) -> bool:
        # a subclass that reads events its own way is not the OpenAI wire the compiled reader knows
        cls = type(self)
        return cls._event is OpenAICompletions._event and cls.parse_event is Backend.parse_event

    def _event(self, data: dict, state: Any) -> StreamEvent:
        completion_tokens, prompt_tokens = _usage(data)
        choices = data.get("choices")
        if not choices:
            if completion_tokens is None and prompt_tokens is None:
                return EMPTY
            return StreamEvent(completion_tokens=completion_tokens, prompt_tokens=prompt_tokens,
                               cached_tokens=cached_tokens(data))
        choice = choices[0]
        delta = choice.get("delta")
        if delta is None:  # completions
            text = as_str(choice.get("text"))
            reasoning = ""
            content = bool(text)
        else:  # chat: a role-only delta is not content
            text = as_str(delta.get("content"))
            reasoning = as_str(delta.get("reasoning_content")) or as_str(delta.get("reasoning"))
            content = bool(text or reasoning or delta.get("tool_calls"))
        finish = choice.get("finish_reason")
        return StreamEvent(
            text,
            content,
            True,
            None,
            completion_tokens,
            prompt_tokens,
            finish if isinstance(finish, str) else None,
            None,
            reasoning,
            cached_tokens(data) if completion_tokens is not None or prompt_tokens is not None else None,
        )

    def parse_response(self, body: bytes) -> tuple[str, int | None, int | None]:
        data = decode_response(body)
        try:
            choice = data["choices"][0]
            message = choice.get("message")
            text = as_str(choice.get("text")) if message is None else as_str(message.get("content"))
        except (TypeError, KeyError, IndexError, AttributeError):
            raise EndpointError(f"{self.name}: response has no choices[0] text") from None
        return (text, *_usage(data))

    def response_cached_tokens(self, body: bytes) -> int | None:
        try:
            data = decode_response(body)
        except EndpointError:
            return None
        return cached_tokens(data) if isinstance(data, dict) else None


class VLLMCompletions(OpenAICompletions):
    """vLLM's ``/v1/completions``: the same wire as OpenAI's, named for vLLM-style runs."""

    name = "vllm"


class OpenAIChat(OpenAICompletions):
    """``/v1/chat/completions``; vLLM sends a role-only first chunk, which is not content."""

    name = "openai-chat"
    default_path = "/v1/chat/completions"
    chat = True

    def _body(
        self, prompt: str, output_len: int, *, model: str, ignore_eos: bool, messages: list[dict] | None
    ) -> dict:
        body: dict = {
            "model": model,
            "messages": messages if messages is not None else [{"role": "user", "content": prompt}],
            "max_completion_tokens": output_len,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if ignore_eos:
            body["ignore_eos"] = True
        return body

    def add_images(self, body: dict, images: list[str]) -> None:
        add_image_urls(body, images)


def add_image_urls(body: dict, images: list[str]) -> None:
    """OpenAI chat's image parts, ``{"type": "image_url", "image_url": {"url": ...}}``, after the text."""
    body["messages"] = with_parts(body["messages"], "text",
                                  [{"type": "image_url", "image_url": {"url": url}} for url in images])
