"""Work around Locust behaviour that costs a distributed run its schedule.

A Locust worker handles each ``spawn`` message by keeping the master's options that are not Locust's own: it tests
every option name against ``locust.argument_parser.default_args_dict()``, and that function builds and parses
Locust's whole argument parser on every call (Locust 2.47: about 1.6 ms). A run has ~190 option names (llmload adds
~130 of them), so a worker spent 0.4-0.6 s of CPU on one ``spawn`` message before its ``test_start`` fired, several
seconds on a busy machine: longer than the master's start lead (:data:`llmload.core.protocol.START_LEAD_S`), so a
worker began its share late and sent what was due at once (docs/design.md, "Distributed protocol").

The defaults do not change within a process (no custom arguments are in them, and no config file is read), so
the dict is built once and each caller gets its own copy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: marks a ``default_args_dict`` that already keeps its answer
CACHED_MARK = "llmload_cached"


def cache_default_args(argument_parser: Any) -> None:
    """Make ``argument_parser.default_args_dict`` (Locust's module) build its dict once per process."""
    original: Callable[[], dict[str, Any]] = argument_parser.default_args_dict
    if getattr(original, CACHED_MARK, False):
        return
    built: list[dict[str, Any]] = []

    def default_args_dict() -> dict[str, Any]:
        if not built:
            built.append(original())
        return dict(built[0])

    setattr(default_args_dict, CACHED_MARK, True)
    default_args_dict.__doc__ = original.__doc__
    argument_parser.default_args_dict = default_args_dict
