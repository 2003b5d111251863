"""``llmload bench``'s :class:`~llmload.core.observe.RunObserver`: which endpoint to scrape, with which
credentials, and whether the saturation test applies (docs/observability.md)."""

from __future__ import annotations

from typing import Any

from llmload.bench.console import log
from llmload.core.observe import RunObserver, server_scraper
from llmload.core.saturation import SaturationRule


def bench_observer(plan: Any, base_url: str, env: Any, master: Any, interrupts: Any,
                   built_in_sim: bool = False) -> RunObserver:
    """The observer of one bench run: scraping (unless off or unanswered), GPU telemetry (docs/energy.md), the
    saturation test in open loop."""
    from llmload.core.state import state_of
    from llmload.energy import gpu_telemetry
    from llmload.exporter.wiring import master_in_flight

    args = plan.args
    scraper = server_scraper(args, base_url, plan.api_key, log)
    rule = SaturationRule(window_s=args.saturation_window) if plan.config.think is None else None
    if master is None:
        run_state = state_of(env)

        def in_flight() -> int:
            return run_state.in_flight
    else:
        def in_flight() -> int:
            return master_in_flight(master.bench)
    telemetry = gpu_telemetry(args, base_url, built_in_sim, log)
    return RunObserver(scraper, rule, in_flight, interrupts.stop, bool(args.stop_on_saturation), log,
                       telemetry=telemetry, energy_price_kwh=getattr(args, "energy_price_kwh", None))
