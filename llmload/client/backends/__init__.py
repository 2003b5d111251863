"""Wire dialects by ``--backend`` name: build the request body, read one stream event.

A new dialect is one module here with a :class:`Backend` subclass, plus one line in ``_CLASSES``.
"""

from __future__ import annotations

from llmload.client.backends.anthropic import AnthropicMessages
from llmload.client.backends.base import Backend, StreamEvent
from llmload.client.backends.modular import ModularChat, ModularCompletions
from llmload.client.backends.openai import OpenAIChat, OpenAICompletions, VLLMCompletions
from llmload.client.backends.pooling import OpenAIEmbeddings, OpenAIEmbeddingsChat, VLLMPooling, VLLMRerank
from llmload.client.backends.responses import OpenAIResponses
from llmload.client.backends.sglang import SGLangNative
from llmload.client.backends.tensorrt_llm import TensorRTLLM
from llmload.client.backends.tgi import TGI
from llmload.common.errors import ConfigError

__all__ = ["BACKENDS", "POOLING_BACKENDS", "Backend", "StreamEvent", "get_backend"]

_CLASSES: tuple[type[Backend], ...] = (
    VLLMCompletions,
    OpenAICompletions,
    OpenAIChat,
    OpenAIResponses,
    AnthropicMessages,
    SGLangNative,
    ModularCompletions,
    ModularChat,
    TGI,
    TensorRTLLM,
    OpenAIEmbeddings,
    OpenAIEmbeddingsChat,
    VLLMPooling,
    VLLMRerank,
)
_INSTANCES: dict[str, Backend] = {cls.name: cls() for cls in _CLASSES}

#: valid ``--backend`` names
BACKENDS: tuple[str, ...] = tuple(_INSTANCES)
#: the pooling dialects (no generation: one JSON answer a request)
POOLING_BACKENDS: tuple[str, ...] = tuple(name for name, b in _INSTANCES.items() if b.pooling)


def get_backend(name: str) -> Backend:
    """The (stateless, shared) backend for ``name``; :class:`ConfigError` names the valid ones."""
    try:
        return _INSTANCES[name]
    except KeyError:
        raise ConfigError(f"--backend: unknown backend {name!r}; valid: {', '.join(BACKENDS)}") from None
