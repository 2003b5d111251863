"""Ready-made user classes for locustfiles; importing this module installs llmload's options and hooks."""

from __future__ import annotations

from llmload.client.users import (
    ChatUser,
    CompletionsUser,
    ConversationUser,
    EmbeddingsUser,
    LLMUser,
    PoolingUser,
    RerankUser,
)
from llmload.plugin import install

install()
__import__("llmload.webui", fromlist=["install"]).install()  # the LLM tab in the web UI


class ShareGPTUser(LLMUser):
    """Replays ShareGPT prompts (or ``--dataset-name``'s) as streaming requests; configured by llmload's
    options (``--backend``, ``--model``, ``--dataset-path``, ``--tokenizer``, ``--max-tokens``, ...)."""

    abstract = True


__all__ = ["ChatUser", "CompletionsUser", "ConversationUser", "EmbeddingsUser", "LLMUser", "PoolingUser",
           "RerankUser", "ShareGPTUser"]
