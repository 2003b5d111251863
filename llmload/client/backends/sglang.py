"""SGLang's native ``/generate``: cumulative text and token counts per event.

Each event repeats the whole text so far and ``meta_info.completion_tokens`` so far; the state turns
both into per-event deltas. One event may carry several tokens, and the first may have empty text.
A server started with incremental streaming output sends deltas instead: the first event whose text
does not extend the previous one switches the state to taking text as is.
"""

from __future__ import annotations

from llmload.client.backends.base import Backend, StreamEvent, as_int, as_str, decode_response
from llmload.common.errors import EndpointError


class SGLangState:
    """Per-request: the previous cumulative text and token count."""

    __slots__ = ("incremental", "text", "tokens")

    def __init__(self) -> None:
        self.text = ""
        self.tokens = 0
        self.incremental = False


def _finish(meta: dict) -> str | None:
    reason = meta.get("finish_reason")
    if isinstance(reason, dict):  # {"type": "length", "length": 128}
        reason = reason.get("type")
    return reason if isinstance(reason, str) else None


class SGLangNative(Backend):
    name = "sglang"
    default_path = "/generate"
    tokens_per_event_known = True

    def _body(
        self, prompt: str, output_len: int, *, model: str, ignore_eos: bool, messages: list[dict] | None
    ) -> dict:
        return {
            "text": prompt,
            "sampling_params": {"max_new_tokens": output_len, "temperature": 0.0, "ignore_eos": ignore_eos},
            "stream": True,
        }

    def new_state(self) -> SGLangState:
        return SGLangState()

    def _event(self, data: dict, state: SGLangState) -> StreamEvent:
        full = as_str(data.get("text"))
        if state.incremental:
            text = full
        elif full.startswith(state.text):
            text = full[len(state.text) :]
            state.text = full
        else:
            state.incremental = True
            text = full
        meta = data.get("meta_info") or {}
        total = as_int(meta.get("completion_tokens"))
        tokens = None
        if total is not None:
            tokens = max(total - state.tokens, 0)
            state.tokens = total
        return StreamEvent(
            text, bool(text), True, tokens, total, as_int(meta.get("prompt_tokens")), _finish(meta),
            cached_tokens=as_int(meta.get("cached_tokens")),
        )

    def parse_response(self, body: bytes) -> tuple[str, int | None, int | None]:
        data = decode_response(body)
        if isinstance(data, list) and data:
            data = data[0]
        if not isinstance(data, dict) or "text" not in data:
            raise EndpointError("sglang: response has no 'text'")
        meta = data.get("meta_info") or {}
        if not isinstance(meta, dict):
            meta = {}
        return (
            as_str(data["text"]),
            as_int(meta.get("completion_tokens")),
            as_int(meta.get("prompt_tokens")),
        )
