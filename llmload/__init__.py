"""llmload: a distributed load generator for LLM inference servers, built on Locust."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
