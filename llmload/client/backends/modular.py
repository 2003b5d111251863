"""Modular MAX serve: OpenAI wire, with the body MAX's own benchmark client sends.

MAX accepts ``ignore_eos`` on both routes, so it is always sent (its client does the same).
The completions route sends no ``stream_options``, so output tokens come from re-tokenizing.
"""

from __future__ import annotations

from llmload.client.backends.openai import OpenAICompletions, add_image_urls


class ModularCompletions(OpenAICompletions):
    name = "modular"
    default_path = "/v1/completions"

    def _body(
        self, prompt: str, output_len: int, *, model: str, ignore_eos: bool, messages: list[dict] | None
    ) -> dict:
        return {
            "model": model,
            "prompt": prompt,
            "max_tokens": output_len,
            "stream": True,
            "ignore_eos": ignore_eos,
        }


class ModularChat(OpenAICompletions):
    name = "modular-chat"
    default_path = "/v1/chat/completions"
    chat = True

    def _body(
        self, prompt: str, output_len: int, *, model: str, ignore_eos: bool, messages: list[dict] | None
    ) -> dict:
        return {
            "model": model,
            "messages": messages if messages is not None else [{"role": "user", "content": prompt}],
            "max_tokens": output_len,
            "stream": True,
            "ignore_eos": ignore_eos,
            "stream_options": {"include_usage": True},
        }

    def add_images(self, body: dict, images: list[str]) -> None:
        add_image_urls(body, images)
