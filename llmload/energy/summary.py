"""Energy over a run from GPU readings: joules per GPU, then per output token, per request and per dollar.

Energy comes from each GPU's energy counter where the readings have one (DCGM's
``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``, NVML's total energy: millijoules since boot) as its increase over the
scrapes: the sum of the steps between consecutive readings, where a step down is a reset (a driver reload, an
exporter restart) and counts the new value, as Prometheus' ``increase()`` does. A GPU without the counter gets the
trapezoid integral of its power over the scrape times, and the result says which (``energy_source``). The
interval is the first scrape's to the last's (``gpu_energy_duration_s``), which brackets the run: telemetry is
scraped at the run's start, on the server-metrics clock, and once more at its end.

The keys vLLM's benchmark writes (``gpu_energy_j``, ``gpu_energy_duration_s``, ``gpu_avg_power_w``,
``gpu_energy_per_output_token_j``) are sums over every GPU of every node; ``gpu_avg_power_w`` is the energy over the
interval (all GPUs together).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llmload.energy.dcgm import GpuReading
from llmload.servermetrics.summarize import increase

#: memory use above this share of a GPU's memory is "near full" (a finding)
FB_NEAR_FULL = 0.95
#: joules in a kilowatt-hour
J_PER_KWH = 3.6e6


@dataclass(slots=True)
class GpuScrape:
    """One scrape of one telemetry source: when (``perf_counter`` and wall clock) and each GPU's reading."""

    t: float
    wall: float
    gpus: dict[str, GpuReading]


def power_integral(times: Sequence[float], watts: Sequence[float]) -> float:
    """Joules: the trapezoid integral of power (W) over the times (s)."""
    return sum((t1 - t0) * (w0 + w1) / 2.0 for t0, t1, w0, w1 in zip(times, times[1:], watts, watts[1:], strict=False))


def _series(scrapes: Sequence[GpuScrape]) -> dict[str, list[tuple[float, GpuReading]]]:
    out: dict[str, list[tuple[float, GpuReading]]] = {}
    for scrape in scrapes:
        for key, reading in scrape.gpus.items():
            out.setdefault(key, []).append((scrape.t, reading))
    for points in out.values():
        points.sort(key=lambda p: p[0])
    return out


def _column(points: list[tuple[float, GpuReading]], name: str) -> tuple[list[float], list[float]]:
    rows = [(t, r.values[name]) for t, r in points if name in r.values]
    return [t for t, _ in rows], [v for _, v in rows]


def gpu_summary(points: list[tuple[float, GpuReading]]) -> dict[str, Any]:
    """One GPU's energy (and how it was found), power, utilisation, memory, temperature and error counters."""
    out: dict[str, Any] = {"model": points[-1][1].model}
    _, counter = _column(points, "energy_mj")
    times, watts = _column(points, "power_w")
    if len(counter) >= 2:
        out["energy_j"], out["energy_source"] = increase(counter) / 1000.0, "counter"
    elif len(watts) >= 2:
        out["energy_j"], out["energy_source"] = power_integral(times, watts), "power"
    span = points[-1][0] - points[0][0]
    if "energy_j" in out and span > 0:
        out["avg_power_w"] = out["energy_j"] / span
    for name, key, how in (("power_w", "max_power_w", max), ("util_pct", "mean_util_pct", None),
                           ("util_pct", "max_util_pct", max), ("sm_active", "mean_sm_active", None),
                           ("fb_used_mib", "max_fb_used_mib", max), ("temp_c", "max_temp_c", max)):
        _, values = _column(points, name)
        if values:
            out[key] = how(values) if how is not None else sum(values) / len(values)
    used, free = _column(points, "fb_used_mib")[1], _column(points, "fb_free_mib")[1]
    if used and free:
        out["fb_total_mib"] = used[-1] + free[-1]
    _, xids = _column(points, "xid")
    out["xid_errors"] = sorted({int(x) for x in xids if x})
    for name in ("power_violation_us", "thermal_violation_us"):
        _, values = _column(points, name)
        if len(values) >= 2:
            out[name] = increase(values)
    return out


def energy_keys(scrapes: Sequence[GpuScrape], *, output_tokens: int, completed: int,
                price_kwh: float | None = None) -> dict[str, Any]:
    """The result JSON's energy keys over the scrapes ({} when no GPU reported power or energy)."""
    per_gpu = {key: gpu_summary(points) for key, points in sorted(_series(scrapes).items())}
    measured = {k: g for k, g in per_gpu.items() if "energy_j" in g}
    if not measured:
        return {}
    times = [s.t for s in scrapes]
    duration = max(times) - min(times)
    energy = sum(g["energy_j"] for g in measured.values())
    sources = sorted({g["energy_source"] for g in measured.values()})
    out: dict[str, Any] = {
        "gpu_energy_j": energy,
        "gpu_energy_duration_s": duration,
        "gpu_avg_power_w": energy / duration if duration > 0 else None,
        "gpu_energy_per_output_token_j": energy / output_tokens if output_tokens else None,
        "energy_per_request_j": energy / completed if completed else None,
        "output_tokens_per_joule": output_tokens / energy if energy > 0 else None,
        "energy_source": sources[0] if len(sources) == 1 else "mixed",
    }
    if price_kwh is not None:
        cost = energy / J_PER_KWH * price_kwh
        out["energy_cost_usd"] = cost
        out["energy_cost_per_million_output_tokens_usd"] = cost / output_tokens * 1e6 if output_tokens else None
    out["gpus"] = per_gpu
    return out


def findings(keys: dict[str, Any], *, waiting_peak: float | None = None) -> list[str]:
    """What a reader should look at: a GPU that idled while requests queued, memory near full, XID errors."""
    lines = []
    for key, g in (keys.get("gpus") or {}).items():
        if g.get("xid_errors"):
            lines.append(f"GPU {key} reported XID errors {g['xid_errors']}: a driver or hardware fault")
        total, used = g.get("fb_total_mib"), g.get("max_fb_used_mib")
        if total and used is not None and used >= FB_NEAR_FULL * total:
            lines.append(f"GPU {key} memory near full: {used:.0f} of {total:.0f} MiB at peak")
        if waiting_peak and g.get("mean_util_pct") is not None and g["mean_util_pct"] < 50.0:
            lines.append(f"GPU {key} was busy {g['mean_util_pct']:.0f} % of the time while up to {waiting_peak:.0f} "
                         "requests waited in the server's queue: the engine, not the GPU, held them")
    return lines
