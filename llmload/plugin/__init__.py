"""Wire llmload into a ``locust -f`` run: options, the run core, record collection and the final summary.

A locustfile only needs ``from llmload.locust import ShareGPTUser``; importing it calls :func:`install`, which
adds listeners to Locust's events and does nothing else. Each Locust environment gets its own
:class:`~llmload.plugin.run.LocustRun` (``environment.llmload``) at ``init``; nothing lives in module globals.
"""

from __future__ import annotations

from typing import Any

from llmload.plugin.console import tell

__all__ = ["install", "tell"]


def install(events: Any = None) -> None:
    """Add llmload's listeners to ``events`` (Locust's global ``locust.events`` unless given: an environment
    built with its own ``Events()`` needs them there), once however often it is called."""
    if events is None:
        from locust import events
    if getattr(events, "llmload_plugin_installed", False):
        return
    events.llmload_plugin_installed = True
    from locust import argument_parser

    from llmload.options import add_options
    from llmload.plugin.locust_fixes import cache_default_args

    cache_default_args(argument_parser)  # a worker's spawn message cost it seconds otherwise
    events.init_command_line_parser.add_listener(add_options)
    events.init.add_listener(_on_init)
    events.test_start.add_listener(_forward("on_test_start"))
    events.test_stopping.add_listener(_forward("on_test_stopping"))
    events.test_stop.add_listener(_forward("on_test_stop"))
    events.quitting.add_listener(_forward("on_quitting"))


def _on_init(environment: Any, **_: Any) -> None:
    from llmload.plugin.run import attach

    attach(environment)


def _forward(method: str) -> Any:
    """A listener that calls ``method`` on the environment's run, if it has one."""

    def listener(environment: Any, **_: Any) -> None:
        run = getattr(environment, "llmload", None)
        handler = getattr(run, method, None)
        if handler is not None:
            handler()

    listener.__name__ = f"llmload_{method}"
    return listener
