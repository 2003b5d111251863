"""The energy block of the summary, and the GPU series file next to the records (``X.gpu_metrics.jsonl``: one
line a scrape, ``{"t", "wall", "gpus": {"host/gpu": {"model", reading: value...}}}``, ``t`` on the records'
clock) that ``llmload report`` draws power and utilisation from."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

from llmload.energy.dcgm import GpuReading
from llmload.energy.summary import GpuScrape
from llmload.servermetrics.store import series_path_for
from llmload.summary.lines import float_line, heading, int_line

#: the series file's suffix, in place of the records file's ``.records.jsonl``
SERIES_SUFFIX = ".gpu_metrics.jsonl"


def format_energy_block(energy: dict[str, Any]) -> str:
    """``GPU energy``: the GPUs, where the energy came from, joules, watts, joules per output token and per
    request, tokens per joule and, with a price, the energy's cost."""
    gpus = energy.get("gpus") or {}
    lines = [heading(" GPU energy "), int_line("GPUs measured:", f"{len(gpus)} ({energy['energy_source']})"),
             float_line("GPU energy (J):", energy["gpu_energy_j"]),
             float_line("Energy interval (s):", energy["gpu_energy_duration_s"])]
    per_token = energy.get("gpu_energy_per_output_token_j")
    if per_token is not None:  # often well under a joule: four decimals
        lines.append(f"{'Energy per output token (J):':<40} {per_token:<10.4f}")
    for label, key in (("Average power, all GPUs (W):", "gpu_avg_power_w"),
                       ("Energy per request (J):", "energy_per_request_j"),
                       ("Output tokens per joule:", "output_tokens_per_joule"),
                       ("Energy cost (USD):", "energy_cost_usd"),
                       ("Energy cost per 1M output tokens (USD):", "energy_cost_per_million_output_tokens_usd")):
        if energy.get(key) is not None:
            lines.append(float_line(label, energy[key]))
    for key, g in gpus.items():
        parts = [f"{g['avg_power_w']:.0f} W avg" if "avg_power_w" in g else "",
                 f"{g['mean_util_pct']:.0f} % busy" if "mean_util_pct" in g else "",
                 f"XID {g['xid_errors']}" if g.get("xid_errors") else ""]
        lines.append(int_line(f"  {key}:", ", ".join(p for p in parts if p) or "-"))
    lines.append("=" * 50)
    return "\n".join(lines)


def gpu_series_path(records_path: Path) -> Path:
    """``X.gpu_metrics.jsonl`` beside the records, named as the server's series is."""
    return series_path_for(records_path, SERIES_SUFFIX)


def save_gpu_series(scrapes: Sequence[GpuScrape], records_path: Path, say: Callable[[str], None]) -> Path | None:
    """The GPU series next to the records file; a failure is one line (the records stay)."""
    path = gpu_series_path(records_path)
    try:
        with path.open("wb") as out:
            for s in scrapes:
                gpus = {k: {"model": r.model, **r.values} for k, r in s.gpus.items()}
                out.write(orjson.dumps({"t": s.t, "wall": s.wall, "gpus": gpus}) + b"\n")
    except OSError as exc:
        say(f"error: cannot write the GPU telemetry to {path}: {exc.strerror or exc}")
        return None
    say(f"wrote the GPU telemetry ({len(scrapes)} scrapes) to {path}")
    return path


def read_gpu_series(path: Path) -> list[GpuScrape]:
    """The scrapes of a series file (none when it is missing)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_bytes().splitlines():
        if not line.strip():
            continue
        row = orjson.loads(line)
        gpus = {}
        for key, values in row["gpus"].items():
            host, _, gpu = key.rpartition("/")
            model = values.pop("model", "")
            gpus[key] = GpuReading(host, gpu, model, values)
        out.append(GpuScrape(float(row["t"]), float(row["wall"]), gpus))
    return out
