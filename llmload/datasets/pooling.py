"""Workloads of pooling requests, with vLLM's meanings (docs/multimodal.md, "Embeddings and rerank").

* ``--dataset-name random --random-batch-size B``: the ``random`` requests grouped ``B`` at a time, in order, into
  one embeddings request each (``"input": [...]``): ``ceil(N / B)`` requests, ``prompt_len`` the batch's sum.
* ``--dataset-name random-rerank``: one random query shared by every request, ``--num-prompts`` random documents
  (the count is of documents, as vLLM's), ``B`` documents a request with the query in front. A cross-encoder reads the
  query beside each document with a separator: the query takes ``input_len // 2 - 1`` tokens, each document what
  is left of ``input_len`` after the query and the separator, and ``prompt_len`` counts the query and separator once
  a document. ``--no-reranker`` (an embedding model behind ``/rerank``) gives query and documents ``input_len``
  each, makes the query one of the ``B`` slots (``B >= 2``, ``num_prompts - 1`` documents) and counts it once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from llmload.common.errors import DatasetError
from llmload.datasets.base import SampleRequest, Tokenizer
from llmload.datasets.random_dataset import (
    DEFAULT_INPUT_LEN,
    DEFAULT_OUTPUT_LEN,
    DEFAULT_RANGE_RATIO,
    sample_random,
)


def batched(samples: Sequence[SampleRequest], batch_size: int, name: str = "random-batch") -> list[SampleRequest]:
    """``samples`` grouped ``batch_size`` at a time into one request each (the last may be shorter; its output
    length is the first's, which only a generation class of a mixed run uses)."""
    if batch_size < 1:
        raise DatasetError(f"--random-batch-size must be >= 1, got {batch_size}")
    out = []
    for j, start in enumerate(range(0, len(samples), batch_size)):
        group = [samples[k] for k in range(start, min(start + batch_size, len(samples)))]
        out.append(SampleRequest(prompt=group[0].prompt, prompt_len=sum(s.prompt_len for s in group),
                                 expected_output_len=group[0].expected_output_len, request_id=f"{name}-{j}",
                                 inputs=[s.prompt for s in group]))
    return out


def sample_random_rerank(tokenizer: Tokenizer, num_prompts: int, seed: int = 0, *,
                         input_len: int = DEFAULT_INPUT_LEN, range_ratio: float | tuple[float, float] =
                         DEFAULT_RANGE_RATIO, batch_size: int = 1, reranker: bool = True,
                         output_len: int = DEFAULT_OUTPUT_LEN) -> list[SampleRequest]:
    """Rerank requests of one query and ``batch_size`` documents each (the module docstring's rules); ``output_len``
    is what a generation class of a mixed run asks for with them (a RAG workload's answer), unused by rerank."""
    ratio = range_ratio[0] if isinstance(range_ratio, tuple | list) else range_ratio
    rng = np.random.RandomState(seed)
    separator = 1 if reranker else 0
    n_docs, per_request = num_prompts, batch_size
    if not reranker:
        if num_prompts < 2 or batch_size < 2:
            raise DatasetError("--no-reranker puts the query in one of the --random-batch-size slots: it needs "
                               "--num-prompts >= 2 and --random-batch-size >= 2")
        n_docs, per_request = num_prompts - 1, batch_size - 1
    query_param = input_len // 2 - separator if reranker else input_len
    if query_param < 1:
        raise DatasetError(f"--random-input-len {input_len} leaves no room for a rerank query")
    query = sample_random(tokenizer, 1, rng, input_len=query_param, output_len=1, range_ratio=ratio)[0]
    doc_param = input_len - query.prompt_len - separator if reranker else input_len
    if doc_param < 1:
        raise DatasetError(f"--random-input-len {input_len} leaves no room for documents after a "
                           f"{query.prompt_len}-token query")
    docs = sample_random(tokenizer, n_docs, rng, input_len=doc_param, output_len=1, range_ratio=ratio)
    out = []
    for j, start in enumerate(range(0, n_docs, per_request)):
        group = [docs[k] for k in range(start, min(start + per_request, n_docs))]
        doc_tokens = sum(d.prompt_len for d in group)
        prompt_len = ((query.prompt_len + separator) * len(group) + doc_tokens if reranker
                      else query.prompt_len + doc_tokens)
        out.append(SampleRequest(prompt=query.prompt, prompt_len=prompt_len, expected_output_len=output_len,
                                 request_id=f"random-rerank-{j}", inputs=[query.prompt, *(d.prompt for d in group)]))
    return out
