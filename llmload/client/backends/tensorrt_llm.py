"""TensorRT-LLM behind Triton: ``/v2/models/ensemble/generate_stream``, events with ``text_output``.

``text_output`` is taken as this event's new text: the ensemble model streams deltas.
``accumulate_tokens`` (which vLLM's client sends) only changes the BLS model, where it makes
events cumulative, so it is not sent; ``ignore_eos`` is expressed as ``min_length``, as vLLM does.
No token counts on the wire: output tokens come from re-tokenizing.
"""

from __future__ import annotations

from typing import Any

from llmload.client.backends.base import Backend, StreamEvent, as_str, decode_response
from llmload.common.errors import EndpointError


class TensorRTLLM(Backend):
    name = "tensorrt-llm"
    default_path = "/v2/models/ensemble/generate_stream"

    def _body(
        self, prompt: str, output_len: int, *, model: str, ignore_eos: bool, messages: list[dict] | None
    ) -> dict:
        body: dict = {
            "text_input": prompt,
            "max_tokens": output_len,
            "temperature": 0.0,
            "top_p": 1.0,
            "stream": True,
        }
        if ignore_eos:
            body["min_length"] = output_len
        return body

    def _event(self, data: dict, state: Any) -> StreamEvent:
        text = as_str(data.get("text_output"))
        return StreamEvent(text, bool(text), "text_output" in data)

    def parse_response(self, body: bytes) -> tuple[str, int | None, int | None]:
        data = decode_response(body)
        if not isinstance(data, dict) or "text_output" not in data:
            raise EndpointError("tensorrt-llm: response has no 'text_output'")
        return as_str(data["text_output"]), None, None
