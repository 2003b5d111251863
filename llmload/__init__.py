"""llmload: a distributed load generator for LLM inference servers, built on Locust.

The public API. Names that need Locust (and so gevent's monkey-patching) load on first use, so
``import llmload`` stays cheap and the simulator, which runs its own epoll loop, never imports gevent.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "LLMUser": "llmload.client.users",
    "CompletionsUser": "llmload.client.users",
    "ChatUser": "llmload.client.users",
    "llm_events": "llmload.client.events",
    "RequestRecord": "llmload.client.records",
    "SampleRequest": "llmload.datasets.base",
    "load_samples": "llmload.datasets",
    "load_tokenizer": "llmload.tokenizer",
    "compute_metrics": "llmload.metrics",
    "get_backend": "llmload.client.backends",
    "LLMLoadError": "llmload.common.errors",
    "ConfigError": "llmload.common.errors",
    "DatasetError": "llmload.common.errors",
    "TokenizerError": "llmload.common.errors",
    "EndpointError": "llmload.common.errors",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'llmload' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
