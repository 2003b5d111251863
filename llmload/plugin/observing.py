"""``locust -f``'s :class:`~llmload.core.observe.RunObserver` (master or local runner): the server's metrics
scraped during each test, the saturation test in open loop, ``--stop-on-saturation`` ending the test, and the
series file next to ``--llm-records`` (docs/observability.md)."""

from __future__ import annotations

import sys
from typing import Any

import gevent
from gevent.event import Event

from llmload.core.observe import Observed, RunObserver, server_scraper
from llmload.core.saturation import SaturationRule
from llmload.options import option_value


def _say(message: str) -> None:
    sys.stderr.write(f"llmload: {message}\n")


def start_observer(run: Any) -> RunObserver:
    """Begin watching one test of ``run`` (a :class:`~llmload.plugin.run.LocustRun`)."""
    from llmload.exporter.wiring import locust_in_flight
    from llmload.options import api_key

    opts = run.options
    host = (run.environment.host or "").rstrip("/")
    scraper = server_scraper(opts, host, api_key(opts), _say)
    rule = SaturationRule(window_s=float(option_value(opts, "saturation_window"))) if run.open_loop else None
    stop = Event()
    observer = RunObserver(scraper, rule, lambda: int(locust_in_flight(run) or 0), stop,
                           bool(getattr(opts, "stop_on_saturation", False)), _say)
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
