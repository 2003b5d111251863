"""``sweep.json``: one row per point of a sweep, the answer of an SLO search, and the settings they share.

The file is the sweep's one summary (docs/sweep.md has the key reference); every row points at its point's own
result JSON, whose numbers it copies (a row never computes a latency the per-point JSON does not hold).

Top level::

    kind "llmload-sweep", version 1, date, label, backend, model_id, base_url, dataset_name, num_prompts,
    warmup, simulated (bool), sim_profile (str | None), mode ("rates" | "concurrencies" | "auto" | "search"),
    dimension ("request_rate" | "max_concurrency"), slo ({metric: ms} | None), goodput_target (float | None),
    precision (float | None), ceiling (the unlimited-rate run's request throughput | None),
    answer (see :class:`llmload.sweep.search.Answer`'s ``to_dict`` | None), interrupted (bool), finished (bool:
    False while the sweep runs, the file being rewritten after every point), points [row...]

A row (``point_row``)::

    index (1-based, run order), role ("ceiling" | "sweep" | "search"), request_rate (float | "inf"),
    max_concurrency (int | None), offered_rate (req/s, None for "inf"), achieved_rate (completed / duration),
    request_throughput, output_throughput, total_token_throughput, completed, failed, cut_off, not_sent,
    duration, ttft_ms / tpot_ms / itl_ms / e2el_ms ({"mean", "median", "p50", "p90", "p99"}: whichever the
    point's JSON has), goodput (fraction of requests sent that met every SLO | None), meets_target (bool | None),
    client_limited (bool), client_reason (str), saturated (bool), stopped_on_saturation (bool),
    server ({peak_running, peak_waiting, peak_kv_cache_usage, preemptions} | None), result_file, records_file,
    output_throughput_per_gpu, output_throughput_per_user (1000 / median TPOT ms: one user's token rate),
    cost_per_million_output_tokens, cost_per_million_total_tokens (USD; None without --gpu-hour-cost)

The top level also has gpus, gpu_type and gpu_hour_cost (docs/metrics.md, "Per GPU and cost").
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

SWEEP_KIND = "llmload-sweep"
SWEEP_VERSION = 1
#: the latency metrics a row carries, and their statistics
ROW_METRICS = ("ttft", "tpot", "itl", "e2el")
ROW_STATS = ("mean", "median", "p50", "p90", "p95", "p99")
_SERVER_KEYS = ("peak_running", "peak_waiting", "peak_kv_cache_usage", "preemptions")


def latency_block(result: Mapping[str, Any], metric: str) -> dict[str, float]:
    """``{"mean": ..., "median": ..., "p99": ...}`` of one metric, from a result JSON's ``*_{metric}_ms`` keys."""
    out: dict[str, float] = {}
    for stat in ROW_STATS:
        value = result.get(f"{stat}_{metric}_ms")
        if isinstance(value, (int, float)) and math.isfinite(value):
            out[stat] = float(value)
    if "p50" not in out and "median" in out:
        out["p50"] = out["median"]
    return out


def point_row(index: int, role: str, result: Mapping[str, Any], *, goodput: float | None,
              meets_target: bool | None, result_file: str | None, records_file: str | None) -> dict[str, Any]:
    """One ``sweep.json`` row from a point's result JSON (the dict ``llmload bench`` writes)."""
    rate = result.get("request_rate")
    offered = None if rate in (None, "inf") or (isinstance(rate, float) and math.isinf(rate)) else float(rate)
    health = result.get("client_health") or {}
    saturation = result.get("saturation") or {}
    server = result.get("server_metrics")
    row: dict[str, Any] = {
        "index": index,
        "role": role,
        "request_rate": "inf" if offered is None else offered,
        "max_concurrency": result.get("max_concurrency"),
        "offered_rate": offered,
        "achieved_rate": result.get("request_throughput"),
        "request_throughput": result.get("request_throughput"),
        "output_throughput": result.get("output_throughput"),
        "total_token_throughput": result.get("total_token_throughput"),
        "completed": result.get("completed", 0),
        "failed": result.get("failed", 0),
        "cut_off": result.get("cut_off", 0),
        "not_sent": result.get("not_sent", 0),
        "duration": result.get("duration"),
    }
    for metric in ROW_METRICS:
        row[f"{metric}_ms"] = latency_block(result, metric)
    row.update({
        "goodput": goodput,
        "meets_target": meets_target,
        "client_limited": bool(health.get("bottleneck")),
        "client_reason": health.get("reason") or "",
        "saturated": bool(saturation.get("saturated")),
        "stopped_on_saturation": bool(saturation.get("stopped_run")),
        "server": {k: server[k] for k in _SERVER_KEYS if k in server} if server else None,
        "result_file": result_file,
        "records_file": records_file,
        "output_throughput_per_gpu": result.get("output_throughput_per_gpu"),
        "output_throughput_per_user": per_user_rate(row["tpot_ms"].get("median")),
        "cost_per_million_output_tokens": result.get("cost_per_million_output_tokens"),
        "cost_per_million_total_tokens": result.get("cost_per_million_total_tokens"),
        # with GPU telemetry (docs/energy.md): the point's energy, an axis of the Pareto figures
        "gpu_energy_per_output_token_j": result.get("gpu_energy_per_output_token_j"),
        "gpu_avg_power_w": result.get("gpu_avg_power_w"),
        "output_tokens_per_joule": result.get("output_tokens_per_joule"),
    })
    return row


def per_user_rate(tpot_ms: float | None) -> float | None:
    """Output tokens per second one user sees while its answer streams: 1000 / TPOT (ms); None without one."""
    return 1000.0 / tpot_ms if tpot_ms else None


def write_sweep(path: Path, data: Mapping[str, Any]) -> None:
    """Write ``sweep.json`` whole (a temporary file renamed over it: a reader never sees half a file)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, allow_nan=False) + "\n")
    tmp.replace(path)


def is_sweep(data: Any) -> bool:
    return isinstance(data, dict) and data.get("kind") == SWEEP_KIND


def read_sweep(path: Path) -> dict[str, Any]:
    """A ``sweep.json`` (or the directory holding one); ValueError when it is not one."""
    path = Path(path)
    if path.is_dir():
        path = path / "sweep.json"
    data = json.loads(path.read_text())
    if not is_sweep(data):
        raise ValueError(f"{path} is not an llmload sweep.json (no \"kind\": \"{SWEEP_KIND}\")")
    return data
