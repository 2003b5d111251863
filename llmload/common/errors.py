"""Errors that reach the user as one line.

    LLMLoadError               any failure we explain to the user (exit 1)
    ├── ConfigError            bad flags or settings (exit 2)
    ├── DatasetError           a dataset or trace file that cannot be used (exit 2: bad input)
    ├── TokenizerError         a tokenizer that cannot be loaded (offline, missing) (exit 2: bad input)
    └── EndpointError          the server is unreachable or answers in a way we cannot use (exit 1)

Foreign exceptions are translated into these at the boundary that sees them; the CLI prints
``llmload: error: <message>`` and exits. Set ``LLMLOAD_DEBUG=1`` for the traceback.
"""

from __future__ import annotations


class LLMLoadError(Exception):
    """A failure explained to the user in one line."""

    exit_code = 1


class ConfigError(LLMLoadError):
    """A flag, option or setting is wrong; the message names it."""

    exit_code = 2


class DatasetError(LLMLoadError):
    """A dataset, trace or records file cannot be read or has no usable rows."""

    exit_code = 2


class TokenizerError(LLMLoadError):
    """A tokenizer cannot be loaded; the message says how to fix it."""

    exit_code = 2


class EndpointError(LLMLoadError):
    """The target server is unreachable or speaks a dialect we cannot use."""
