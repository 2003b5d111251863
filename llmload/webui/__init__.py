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
    from locust.runners import MasterRunner, WorkerRunner

    runner = environment.runner
    run = getattr(environment, "llmload", None)
    if run is None:
        return
    if isinstance(runner, WorkerRunner):
        _start_worker_side(runner, run)
        return
    from llmload.webui.server import LLMTab, register_routes

    if environment.web_ui is None:
        if isinstance(runner, MasterRunner):
            # headless: no tab, but the saturation test and --prometheus-port read the workers' in-flight counts
            _keep_worker_live(runner, run)
        return
    import gevent

    tab = LLMTab(environment, run.records.records)
    run.tab = tab
    if isinstance(runner, MasterRunner):
        from time import perf_counter

        def live(msg: Any, **_kw: Any) -> None:
            tab.worker_live[msg.node_id] = (int(msg.data.get("in_flight", 0)), perf_counter())

        runner.register_message("llm_live", live)
    register_routes(tab, environment.web_ui)
    gevent.spawn(tab.sample_forever)


def _keep_worker_live(runner: Any, run: Any) -> None:
    """A headless master keeps each worker's last ``llm_live`` report on the run (``run.worker_live``)."""
    from time import perf_counter

    live: dict[str, tuple[int, float]] = {}
    run.worker_live = live

    def keep(msg: Any, **_kw: Any) -> None:
        live[msg.node_id] = (int((msg.data or {}).get("in_flight", 0)), perf_counter())

    runner.register_message("llm_live", keep)


def _on_test_start(environment: Any, **_: Any) -> None:
    tab = getattr(getattr(environment, "llmload", None), "tab", None)
    if tab is not None:
        tab.stats.reset()


def _start_worker_side(runner: Any, run: Any) -> None:
    """A worker reports its in-flight requests once a second (steering reaches it through the run)."""
    import gevent

    def report_forever() -> None:
        while True:
            gevent.sleep(1.0)
            if runner.state in ("spawning", "running", "stopping") or run.in_flight:
                try:
                    runner.send_message("llm_live", {"in_flight": int(run.in_flight)})
                except Exception:  # the master is gone or reconnecting: the next report will do
                    pass

    gevent.spawn(report_forever)
