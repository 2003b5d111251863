"""The LLM tab in Locust's web UI: live TTFT/ITL/TPOT/E2E, tokens/s, in-flight, goodput, errors, charts,
steering of the open-loop rate, and downloads of the run's records and result JSON.

Installed by ``llmload.locust`` (any locustfile that imports it). Nothing happens at import time;
:func:`install` adds listeners to Locust's events. See ``docs/webui.md``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["install"]

_installed = False
#: the tab of this process (master or local runner with a web UI); None elsewhere
tab: Any = None


def install() -> None:
    """Add the tab's listeners to Locust's events (once)."""
    global _installed
    if _installed:
        return
    _installed = True
    from locust import events

    events.init.add_listener(_on_init)
    events.test_start.add_listener(_on_test_start)


def _on_init(environment: Any, **_: Any) -> None:
    global tab
    from locust.runners import MasterRunner, WorkerRunner

    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        _start_worker_side(runner, environment)
        return
    from llmload import plugin
    from llmload.webui.server import LLMTab, register_routes

    if environment.web_ui is None:
        if isinstance(runner, MasterRunner):
            runner.register_message("llm_live", lambda msg, **_kw: None)  # headless: nobody shows it
        return
    import gevent

    tab = LLMTab(environment, plugin.records)
    if isinstance(runner, MasterRunner):
        from time import perf_counter

        def live(msg: Any, **_kw: Any) -> None:
            tab.worker_live[msg.node_id] = (int(msg.data.get("in_flight", 0)), perf_counter())

        runner.register_message("llm_live", live)
    register_routes(tab, environment.web_ui)
    gevent.spawn(tab.sample_forever)


def _on_test_start(environment: Any, **_: Any) -> None:
    if tab is not None and environment is tab.environment:
        tab.stats.reset()


def _start_worker_side(runner: Any, environment: Any) -> None:
    """A worker reports its in-flight requests once a second and takes the master's steering."""
    import gevent

    from llmload.users import in_flight

    def steer(msg: Any, **_kw: Any) -> None:
        opts = environment.parsed_options
        if opts is None:
            return
        if (rate := msg.data.get("request_rate")) is not None:
            opts.request_rate = float(rate)
        if users := msg.data.get("num_users"):
            opts.num_users = int(users)  # the test's total, for the open-loop per-user share

    runner.register_message("llm_set", steer)

    def report_forever() -> None:
        while True:
            gevent.sleep(1.0)
            if runner.state in ("spawning", "running", "stopping") or in_flight.count:
                try:
                    runner.send_message("llm_live", {"in_flight": int(in_flight.count)})
                except Exception:  # the master is gone or reconnecting: the next report will do
                    pass

    gevent.spawn(report_forever)
