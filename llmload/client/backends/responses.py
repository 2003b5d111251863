"""The OpenAI Responses API (``/v1/responses``), as OpenAI, vLLM and SGLang serve it.

A stream is typed events, each one SSE ``event:`` line (ignored) and a ``data:`` object with the same ``type``:
``response.created``, ``response.output_item.added``, ``response.content_part.added``, then one
``response.output_text.delta`` per chunk (``delta``: the new text), reasoning as
``response.reasoning_text.delta`` / ``response.reasoning_summary_text.delta``, tool calls as
``response.function_call_arguments.delta``, the ``.done`` events, and last ``response.completed`` (or
``response.incomplete`` when ``max_output_tokens`` ran out, ``response.failed`` on an engine error) whose
``response.usage`` holds ``input_tokens``, ``output_tokens`` and ``input_tokens_details.cached_tokens``.
Under the content rule the first output-text, reasoning or tool-call delta is the first token.
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
    one_line,
    with_parts,
)
from llmload.common.errors import EndpointError

#: delta events that carry generated output, and whether it is reasoning
_TEXT = "response.output_text.delta"
_REASONING = ("response.reasoning_text.delta", "response.reasoning_summary_text.delta")
_TOOL = "response.function_call_arguments.delta"
#: the events that end a response with its usage, and the finish reason each stands for
_ENDS = {"response.completed": "stop", "response.incomplete": "length"}


def _usage(response: Any) -> tuple[int | None, int | None, int | None]:
    """``(output_tokens, input_tokens, cached_tokens)`` of a response object."""
    usage = response.get("usage") if isinstance(response, dict) else None
    if not isinstance(usage, dict):
        return None, None, None
    details = usage.get("input_tokens_details")
    cached = as_int(details.get("cached_tokens")) if isinstance(details, dict) else None
    return as_int(usage.get("output_tokens")), as_int(usage.get("input_tokens")), cached


class OpenAIResponses(Backend):
    """``/v1/responses`` with ``stream: true``; a conversation's history goes in ``input`` as messages."""

    name = "openai-responses"
    default_path = "/v1/responses"
    chat = True

    def _body(
        self, prompt: str, output_len: int, *, model: str, ignore_eos: bool, messages: list[dict] | None
    ) -> dict:
        body: dict = {
            "model": model,
            "input": messages if messages is not None else prompt,
            "max_output_tokens": output_len,
            "temperature": 0.0,
            "stream": True,
        }
        if ignore_eos:
            body["ignore_eos"] = True
        return body

    def add_images(self, body: dict, images: list[str]) -> None:
        """Responses' parts: ``input_text`` then ``{"type": "input_image", "image_url": url}`` each."""
        given = body["input"]
        messages = [{"role": "user", "content": given}] if isinstance(given, str) else given
        body["input"] = with_parts(messages, "input_text", [{"type": "input_image", "image_url": url} for url in images])

    def _event(self, data: dict, state: Any) -> StreamEvent:
        kind = data.get("type")
        if kind == _TEXT:
            text = as_str(data.get("delta"))
            return StreamEvent(text, bool(text), True)
        if kind in _REASONING:
            reasoning = as_str(data.get("delta"))
            return StreamEvent("", bool(reasoning), True, reasoning=reasoning)
        if kind == _TOOL:
            return StreamEvent("", True, True)
        if kind in _ENDS:
            output, prompt, cached = _usage(data.get("response"))
            return StreamEvent(completion_tokens=output, prompt_tokens=prompt, finish_reason=_ENDS[kind],
                               cached_tokens=cached)
        if kind == "response.failed":
            error = (data.get("response") or {}).get("error")
            message = error.get("message") if isinstance(error, dict) else error
            return StreamEvent(error=one_line(message or "response.failed"))
        if kind == "error":
            return StreamEvent(error=one_line(data.get("message") or data.get("code") or "error event"))
        return EMPTY

    def parse_response(self, body: bytes) -> tuple[str, int | None, int | None]:
        data = decode_response(body)
        try:
            texts = [as_str(part.get("text")) for item in data["output"] if item.get("type") == "message"
                     for part in item.get("content") or [] if part.get("type") == "output_text"]
        except (TypeError, KeyError, AttributeError):
            raise EndpointError(f"{self.name}: response has no output") from None
        output, prompt, _ = _usage(data)
        return "".join(texts), output, prompt
