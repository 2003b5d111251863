"""What ``locust -f`` watches during each test: the :class:`~llmload.core.observe.RunObserver` (master or local
runner: the server's metrics, the saturation test in open loop, ``--stop-on-saturation`` ending the test;
docs/observability.md) and each load process's client health (:class:`~llmload.core.health.HealthMonitor`)."""

from __future__ import annotations

from typing import Any

import gevent
from gevent.event import Event

from llmload.core.observe import Observed, RunObserver, server_scraper
from llmload.core.saturation import SaturationRule
from llmload.options import option_value
from llmload.plugin.console import tell


def start_observer(run: Any) -> RunObserver:
    """Begin watching one test of ``run`` (a :class:`~llmload.plugin.run.LocustRun`)."""
    from llmload.exporter.wiring import locust_in_flight
    from llmload.options import api_key

    opts = run.options
    host = (run.environment.host or "").rstrip("/")
    scraper = server_scraper(opts, host, api_key(opts), tell)
    rule = SaturationRule(window_s=float(option_value(opts, "saturation_window"))) if run.open_loop else None
    stop = Event()
    from llmload.energy import gpu_telemetry

    observer = RunObserver(scraper, rule, lambda: int(locust_in_flight(run) or 0), stop,
                           bool(getattr(opts, "stop_on_saturation", False)), tell,
                           telemetry=gpu_telemetry(opts, host, False, tell),
                           energy_price_kwh=getattr(opts, "energy_price_kwh", None))
    run.records.listeners.append(observer.on_record)

    def end_test() -> None:
        stop.wait()
        if run.headless:
            run.runner.quit()
        else:
            run.runner.stop()

    observer.ender = gevent.spawn(end_test)
    observer.begin()
    return observer


def finish_observer(run: Any, observer: RunObserver | None) -> Observed | None:
    """Stop watching: what was seen in the test that just ended."""
    if observer is None:
        return None
    if observer.on_record in run.records.listeners:
        run.records.listeners.remove(observer.on_record)
    ender = getattr(observer, "ender", None)
    if ender is not None and gevent.getcurrent() is not ender:
        ender.kill(block=False)
    return observer.finish()


def say(line: str) -> None:
    """What setting the run up says (loading the workload), in Locust's log."""
    import logging

    logging.getLogger("llmload").info(line)


def watch_health(run: Any) -> None:
    """Sample this process's loop lag, CPU and read lag while the test runs (core/health.HealthMonitor)."""
    from llmload.core.health import HealthMonitor

    if run.health is not None:
        run.health.stop()
    run.health = HealthMonitor(reactor=run.reactor)
    run.health.start()
    run.health_report = None


def health_report(run: Any) -> dict[str, Any] | None:
    """This process's client health for the test that ended: its own schedule lags count in an open loop whose
    requests are not all due at once (re-assigned requests, sent late on purpose, do not)."""
    if run.health is None:
        return None
    run.health.stop()
    counts = run.core.config.spec.open_loop_lag_counts if run.core is not None else True
    report = run.health.report(run.tally.schedule_lags_s if run.open_loop and counts else None)
    run.health = None
    return report
