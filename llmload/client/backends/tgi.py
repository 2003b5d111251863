"""Hugging Face TGI ``/generate_stream``: one token per event, ``data:`` without a space.

Body as vLLM's TGI client sends it (TGI rejects temperature 0 and top_p 1), plus ``details`` so the
final event reports ``generated_tokens`` and ``finish_reason``. Special tokens (EOS) carry no text,
as in TGI's own ``generated_text``.
"""

from __future__ import annotations

from typing import Any

from llmload.client.backends.base import Backend, StreamEvent, as_int, as_str, decode_response
from llmload.common.errors import EndpointError


class TGI(Backend):
    name = "tgi"
    default_path = "/generate_stream"
    tokens_per_event_known = True

    def _body(
        self, prompt: str, output_len: int, *, model: str, ignore_eos: bool, messages: list[dict] | None
    ) -> dict:
        params: dict = {
            "max_new_tokens": output_len,
            "do_sample": True,
            "temperature": 0.01,
            "top_p": 0.99,
            "details": True,
        }
        if ignore_eos:
            params["ignore_eos_token"] = True
        return {"inputs": prompt, "parameters": params}

    def _event(self, data: dict, state: Any) -> StreamEvent:
        token = data.get("token")
        text = ""
        if token:
            text = "" if token.get("special") else as_str(token.get("text"))
        details = data.get("details") or {}
        finish = details.get("finish_reason")
        return StreamEvent(
            text,
            bool(text),
            bool(token),
            1 if token else None,
            as_int(details.get("generated_tokens")),
            None,
            finish if isinstance(finish, str) else None,
        )

    def parse_response(self, body: bytes) -> tuple[str, int | None, int | None]:
        data = decode_response(body)
        if isinstance(data, list) and data:  # the "/" route answers a list
            data = data[0]
        if not isinstance(data, dict) or "generated_text" not in data:
            raise EndpointError("tgi: response has no 'generated_text'")
        details = data.get("details") or {}
        if not isinstance(details, dict):
            details = {}
        return as_str(data["generated_text"]), as_int(details.get("generated_tokens")), None
