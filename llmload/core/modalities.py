"""Which backends take which workloads: images need a chat dialect that sends them, pooling dialects need text
(and rerank a query with documents; a generation dialect sends a rerank sample as its documents and query, the
last step of a RAG workload). Each mismatch is one line and exit 2 before the first request
(docs/multimodal.md), where vLLM's benchmark would fail every request or stop with a traceback."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llmload.common.choices import SESSION_DATASETS, TRACE_DATASETS
from llmload.common.errors import ConfigError
from llmload.options import option_value

#: vLLM's check of a pooling backend's ``--endpoint``, by what the path must end with
_ENDPOINT_API = {"embeddings": "OpenAI Embeddings API", "pooling": "vLLM Pooling API", "rerank": "vLLM score API"}


def image_backends() -> list[str]:
    """The ``--backend`` names that send images, sorted."""
    from llmload.client.backends import BACKENDS, get_backend

    return sorted(name for name in BACKENDS if get_backend(name).sends_images)


def _images_refused(backend: str) -> ConfigError:
    return ConfigError(f"Multi-modal content (images) is not supported on backend {backend!r}; use one of "
                       f"{image_backends()}.")


def check_modalities(options: Any) -> None:
    """The flags' checks: ``--dataset-name`` against ``--backend``, ``--random-batch-size``, ``--no-reranker``,
    a pooling backend's ``--endpoint``."""
    from llmload.client.backends import get_backend

    backend = get_backend(option_value(options, "backend"))
    name = option_value(options, "dataset_name")
    batch = int(option_value(options, "random_batch_size"))
    if batch != 1 and name != "random-rerank" and not backend.pooling:
        raise ConfigError("--random-batch-size puts several prompts into one pooling request: it needs a pooling "
                          "--backend (openai-embeddings, vllm-pooling, vllm-rerank)")
    if batch != 1 and name not in ("random", "random-rerank"):
        raise ConfigError(f"--random-batch-size applies to --dataset-name random and random-rerank, not {name}")
    if option_value(options, "no_reranker") and name != "random-rerank":
        raise ConfigError("--no-reranker applies to --dataset-name random-rerank")
    if backend.pooling:
        _check_pooling(backend, name, options)
        return
    if name == "random-mm" and not backend.sends_images:
        raise _images_refused(backend.name)
    if name == "random-mm":
        from llmload.common.errors import DatasetError

        try:
            multimodal_spec(options).checked()  # said now, not after the server was reached
        except DatasetError as exc:
            raise ConfigError(str(exc)) from None


def _check_pooling(backend: Any, name: str, options: Any) -> None:
    if name == "random-mm":
        raise _images_refused(backend.name)
    if name in SESSION_DATASETS or name in TRACE_DATASETS or option_value(options, "multi_turn"):
        what = "conversations" if option_value(options, "multi_turn") else f"--dataset-name {name}"
        raise ConfigError(f"--backend {backend.name} embeds or ranks text: {what} has no single texts to send (use "
                          "random, random-rerank, custom, sharegpt, sonnet, hf...)")
    if backend.name == "vllm-rerank" and name != "random-rerank":
        raise ConfigError(f"--backend vllm-rerank sends a query and documents: --dataset-name {name} has none "
                          "(use --dataset-name random-rerank)")
    endpoint = option_value(options, "endpoint")
    suffix = backend.endpoint_suffix
    if endpoint and suffix and not endpoint.rstrip("/").endswith(suffix):
        raise ConfigError(f"--endpoint {endpoint}: {_ENDPOINT_API[suffix]} URL must end with one of: {{'{suffix}'}}.")


def multimodal_spec(options: Any) -> Any:
    """The ``--random-mm-*`` flags as a :class:`~llmload.datasets.random_mm.MultiModalSpec` (vLLM's defaults)."""
    from llmload.datasets.random_mm import MultiModalSpec

    default = MultiModalSpec()
    return MultiModalSpec(base_items=int(option_value(options, "random_mm_base_items_per_request")),
                          items_range_ratio=float(option_value(options, "random_mm_num_mm_items_range_ratio")),
                          limits=option_value(options, "random_mm_limit_mm_per_prompt") or default.limits,
                          buckets=option_value(options, "random_mm_bucket_config") or default.buckets)


def check_samples(samples: Sequence[Any], backend_name: str) -> None:
    """After the dataset is read: a dataset whose rows carry images (custom ``images``, ShareGPT-4V ``image``) needs
    a backend that sends them. Samples made as they are read (random prompts) carry none and are not read here."""
    from llmload.client.backends import get_backend
    from llmload.datasets.base import SamplesOnRead

    backend = get_backend(backend_name)
    if backend.sends_images or isinstance(samples, SamplesOnRead):
        return
    if any(getattr(s, "images", None) for s in samples):
        raise _images_refused(backend_name)
