"""``llmload bench``'s :class:`~llmload.core.observe.RunObserver`: which endpoint to scrape, with which
credentials, and whether the saturation test applies (docs/observability.md)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from llmload.bench.console import log
from llmload.core.observe import RunObserver
from llmload.core.saturation import SaturationRule


def same_origin(a: str, b: str) -> bool:
    """Whether two URLs name the same scheme, host and port: only then does the API key go along."""
    pa, pb = urlsplit(a), urlsplit(b)
    return (pa.scheme, pa.hostname, pa.port) == (pb.scheme, pb.hostname, pb.port)


def server_scraper(options: Any, base_url: str, api_key: str | None, say: Any = log) -> Any | None:
    """A :class:`~llmload.servermetrics.Scraper` for the run, or None: off (``--no-server-metrics``), or the
    endpoint does not answer with metrics (a warning when it was named with ``--server-metrics-url``; the default
    ``<base-url>/metrics`` is tried quietly). Never fatal."""
    if getattr(options, "no_server_metrics", False) or not base_url:
        return None
    from llmload.servermetrics import Scraper, metrics_url, probe
    from llmload.urls import redact_url

    named = getattr(options, "server_metrics_url", "") or ""
    url = named or metrics_url(base_url)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key and same_origin(url, base_url) else None
    interval = float(getattr(options, "server_metrics_interval", 1.0) or 1.0)
    answer = probe(url, timeout=min(5.0, max(1.0, 2 * interval)), headers=headers)
    if answer is not True:
        if named:
            say(f"warning: --server-metrics-url {redact_url(url)}: {answer}; the run goes on without server metrics")
        else:
            say(f"No server metrics at {redact_url(url)} ({answer}); --server-metrics-url names another endpoint")
        return None
    say(f"Scraping the server's metrics at {redact_url(url)} every {interval:g} s")
    return Scraper(url, interval, headers=headers)


def bench_observer(plan: Any, base_url: str, env: Any, master: Any, interrupts: Any) -> RunObserver:
    """The observer of one bench run: scraping (unless off or unanswered), the saturation test in open loop."""
    from llmload.core.state import state_of
    from llmload.exporter.wiring import master_in_flight

    args = plan.args
    scraper = server_scraper(args, base_url, plan.api_key)
    rule = SaturationRule(window_s=args.saturation_window) if plan.think is None else None
    if master is None:
        run_state = state_of(env)

        def in_flight() -> int:
            return run_state.in_flight
    else:
        def in_flight() -> int:
            return master_in_flight(master.bench)
    return RunObserver(scraper, rule, in_flight, interrupts.stop, bool(args.stop_on_saturation), log)
