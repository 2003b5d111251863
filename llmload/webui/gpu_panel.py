"""The ``gpu`` key of ``GET /llm/stats``: what the run's GPU telemetry (docs/energy.md) has read so far, for the
tab's GPU panel: the latest power (all GPUs together) and mean utilisation, and the energy since the test began.
Only readings already taken are read; nothing here fetches."""

from __future__ import annotations

from typing import Any

from llmload.energy.summary import energy_keys


def _scrapes(run: Any) -> list[Any]:
    observer = getattr(run, "observer", None)
    telemetry = getattr(observer, "telemetry", None) if observer is not None else None
    if telemetry is not None:
        return telemetry.scrapes
    observed = getattr(run, "observed", None)
    return list(getattr(observed, "gpu_scrapes", None) or [])


def gpu_payload(run: Any, output_tokens: int) -> dict[str, Any] | None:
    """``{gpus, power_w, util_pct, energy_j, energy_per_output_token_j, energy_source}``; None without
    telemetry. ``output_tokens``: the test's so far."""
    scrapes = _scrapes(run) if run is not None else []
    if not scrapes:
        return None
    latest = scrapes[-1].gpus.values()
    powers = [r.values["power_w"] for r in latest if "power_w" in r.values]
    utils = [r.values["util_pct"] for r in latest if "util_pct" in r.values]
    keys = energy_keys(scrapes, output_tokens=output_tokens, completed=0)
    return {"gpus": len(scrapes[-1].gpus), "power_w": sum(powers) if powers else None,
            "util_pct": sum(utils) / len(utils) if utils else None, "energy_j": keys.get("gpu_energy_j"),
            "energy_per_output_token_j": keys.get("gpu_energy_per_output_token_j"),
            "energy_source": keys.get("energy_source")}
