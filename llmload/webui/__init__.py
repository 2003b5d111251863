"""The LLM tab in Locust's web UI: live TTFT/ITL/TPOT/E2E, tokens/s, in-flight, goodput, errors, charts,
steering of the open-loop rate, and downloads of the run's records and result JSON.

Installed by ``llmload.locust`` (any locustfile that imports it). Nothing happens at import time;
:func:`install` adds listeners to Locust's events. See ``docs/webui.md``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["install"]


def install(events: Any = None) -> None:
    """Add the tab's listeners to ``events`` (Locust's global ``locust.events`` unless given), once however
    often it is called."""
    if events is None:
        from locust import events
    if getattr(events, "llmload_tab_installed", False):
        return
    events.llmload_tab_installed = True
    events.init.add_listener(_on_init)
    events.test_start.add_listener(_on_test_start)


def _on_init(environment: Any, **_: Any) -> None:
    from locust.runners import WorkerRunner

    run = getattr(environment, "llmload", None)
    if run is None or isinstance(environment.runner, WorkerRunner) or environment.web_ui is None:
        return
    import gevent

    from llmload.webui.server import LLMTab, register_routes

    tab = LLMTab(environment, run.records)
    run.tab = tab
    register_routes(tab, environment.web_ui)
    gevent.spawn(tab.sample_forever)


def _on_test_start(environment: Any, **_: Any) -> None:
    tab = getattr(getattr(environment, "llmload", None), "tab", None)
    if tab is not None:
        tab.stats.reset()
