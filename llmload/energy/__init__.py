"""Energy per token: GPU telemetry while a run goes (DCGM exporter pages, local NVML), the energy over the run,
and what the result, the summary and the report say of it (docs/energy.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llmload.options import option_value


def gpu_telemetry(options: Any, base_url: str, built_in_sim: bool, say: Callable[[str], None]) -> Any | None:
    """The run's GPU telemetry (:class:`~llmload.energy.telemetry.GpuTelemetry`), or None.

    Sources: each ``--gpu-metrics-url`` (``auto``: dcgm-exporter's default port on this host), else the built-in
    simulator's own DCGM page (``llmload bench`` with no ``--base-url``: the first command shows energy; a simulator
    named by URL is scraped when its ``/dcgm/metrics`` is named, as any server's page: a second scraper costs the
    client's loop a little on every interval); and ``--energy-gpu-ids`` through NVML. A source that does not answer
    with GPU power or energy is one line, and left out."""
    from llmload.common.urls import redact_url
    from llmload.energy.telemetry import AUTO_URL, SIM_PATH, DcgmScraper, GpuTelemetry, open_nvml, probe_dcgm

    interval = float(option_value(options, "server_metrics_interval"))
    urls = list(option_value(options, "gpu_metrics_url") or [])
    sources: list[Any] = []
    if not urls and built_in_sim and base_url:
        url = base_url.rstrip("/") + SIM_PATH
        if probe_dcgm(url) is None:
            say(f"Reading GPU telemetry from the simulator's DCGM page {redact_url(url)} every {interval:g} s")
            sources.append(DcgmScraper(url, interval))
    for url in urls:
        named = AUTO_URL if url == "auto" else url
        reason = probe_dcgm(named)
        if reason is None:
            say(f"Reading GPU telemetry from {redact_url(named)} every {interval:g} s")
            sources.append(DcgmScraper(named, interval))
        elif url == "auto":
            say(f"--gpu-metrics-url auto: no DCGM exporter at {AUTO_URL} ({reason}); the run goes on without it")
        else:
            say(f"warning: --gpu-metrics-url {redact_url(url)}: {reason}; the run goes on without it")
    ids = option_value(options, "energy_gpu_ids")
    if ids:
        sampler = open_nvml(ids, interval, say)
        if sampler is not None:
            say(f"Reading GPUs {','.join(map(str, ids))} through NVML every {interval:g} s")
            sources.append(sampler)
    return GpuTelemetry(sources) if sources else None
