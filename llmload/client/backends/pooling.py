"""Pooling dialects, as ``vllm bench serve`` sends them: embeddings, vLLM's ``/pooling`` and ``/v1/rerank``.

A pooling request is not streamed: one JSON answer, no tokens generated. Its record has an end-to-end latency (from
the bytes going out to the whole answer read, as vLLM's) and the server's ``usage.prompt_tokens``, and no TTFT, ITL or
TPOT. The bodies are vLLM's (``truncate_prompt_tokens: -1``: never cut the input); ``ignore_eos`` is never sent (it
means nothing here, and strict servers refuse unknown fields). vLLM's rerank client ignores ``--extra-body``; so does
llmload's, so the same command line sends the same bytes.
"""

from __future__ import annotations

from typing import Any

from llmload.client.backends.base import Backend, StreamEvent, as_int, decode_response
from llmload.common.errors import EndpointError


def _usage_prompt_tokens(data: Any) -> int | None:
    """``usage.prompt_tokens``; a rerank answer that reports only ``usage.total_tokens`` gives that (its tokens are
    all input: vLLM's benchmark would count 0 there)."""
    usage = data.get("usage") if isinstance(data, dict) else None
    if not isinstance(usage, dict):
        return None
    prompt = as_int(usage.get("prompt_tokens"))
    return prompt if prompt is not None else as_int(usage.get("total_tokens"))


class PoolingBackend(Backend):
    """What the pooling dialects share: not streamed, so an event stream is a wrong answer."""

    pooling = True
    streams = False

    def _event(self, data: dict, state: Any) -> StreamEvent:
        return StreamEvent(error=f"{self.name}: a pooling endpoint answered with an event stream")


class OpenAIEmbeddings(PoolingBackend):
    """``/v1/embeddings``: ``input`` is the prompt, or the batch of ``--random-batch-size`` prompts."""

    name = "openai-embeddings"
    default_path = "/v1/embeddings"
    endpoint_suffix = "embeddings"
    #: where the answer's vectors are
    answer_key = "data"

    def _pooling_body(self, prompt: str, inputs: list[str] | None, *, model: str) -> dict:
        return {"model": model, "input": inputs if inputs is not None else prompt, "truncate_prompt_tokens": -1}

    def parse_pooling(self, body: bytes) -> int | None:
        data = decode_response(body)
        if not isinstance(data, dict) or not isinstance(data.get(self.answer_key), list):
            raise EndpointError(f"{self.name}: the answer has no '{self.answer_key}' list")
        return _usage_prompt_tokens(data)


class OpenAIEmbeddingsChat(OpenAIEmbeddings):
    """``/v1/embeddings`` with chat ``messages`` (vLLM's embeddings-chat: the server applies the chat template)."""

    name = "openai-embeddings-chat"

    def _pooling_body(self, prompt: str, inputs: list[str] | None, *, model: str) -> dict:
        text = "\n".join(inputs) if inputs is not None else prompt
        return {"model": model, "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}],
                "truncate_prompt_tokens": -1}


class VLLMPooling(OpenAIEmbeddings):
    """vLLM's ``/pooling`` (a reward or classification model's raw pooled output)."""

    name = "vllm-pooling"
    default_path = "/pooling"
    endpoint_suffix = "pooling"


class VLLMRerank(PoolingBackend):
    """vLLM's ``/v1/rerank``: the sample's first input is the query, the rest its documents."""

    name = "vllm-rerank"
    default_path = "/v1/rerank"
    endpoint_suffix = "rerank"

    def build_body(self, prompt: str, output_len: int, *, model: str, ignore_eos: bool, extra: dict | None = None,
                   messages: list[dict] | None = None, images: list[str] | None = None,
                   inputs: list[str] | None = None) -> dict:
        if not inputs or len(inputs) < 2:
            raise EndpointError("vllm-rerank needs a query and documents (--dataset-name random-rerank)")
        return {"model": model, "query": inputs[0], "documents": inputs[1:], "truncate_prompt_tokens": -1}

    def parse_pooling(self, body: bytes) -> int | None:
        data = decode_response(body)
        if not isinstance(data, dict) or not isinstance(data.get("results"), list):
            raise EndpointError(f"{self.name}: the answer has no 'results' list")
        return _usage_prompt_tokens(data)


def grounded_prompt(inputs: list[str]) -> str:
    """A generation request made of a rerank sample (a RAG workload's last step): its documents as context, then its
    query. The record keeps the dataset's ``prompt_len`` (the rerank's count); the server's usage says what was read."""
    documents = "\n\n".join(inputs[1:])
    return f"Answer from these documents.\n\n{documents}\n\nQuestion: {inputs[0]}"


def pooled_inputs(backend: str, inputs: list[str] | None) -> int:
    """vLLM's ``num_input_sequences`` of a pooling request: a rerank's documents, an embeddings batch's prompts
    (1 for a single prompt; the chat form is one conversation)."""
    if backend == "vllm-rerank":
        return len(inputs) - 1 if inputs else 0
    if backend == "openai-embeddings-chat" or not inputs:
        return 1
    return len(inputs)
