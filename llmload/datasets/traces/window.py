"""The replay window: which trace rows are sent, and when (their scaled offsets from the window's first)."""

from __future__ import annotations

import math

import numpy as np

from llmload.common.errors import ConfigError
from llmload.datasets.traces.formats import TraceRow


def select_window(
    rows: list[TraceRow],
    *,
    time_scale: float = 1.0,
    trace_start: float = 0.0,
    trace_duration: float | None = None,
    num_prompts: int | None = None,
) -> tuple[list[TraceRow], np.ndarray]:
    """The rows in the window (at most ``num_prompts``) and their scaled send offsets (first at 0)."""
    if not (math.isfinite(time_scale) and time_scale > 0):
        raise ConfigError(f"--time-scale must be a positive number, got {time_scale}")
    if not (math.isfinite(trace_start) and trace_start >= 0):
        raise ConfigError(f"--trace-start must be >= 0 seconds, got {trace_start}")
    if trace_duration is not None and not trace_duration > 0:
        raise ConfigError(f"--trace-duration must be > 0 seconds, got {trace_duration}")
    if num_prompts is not None and num_prompts < 0:
        raise ConfigError(f"--num-prompts must be >= 0, got {num_prompts}")
    times = np.fromiter((r.t for r in rows), dtype=np.float64, count=len(rows))
    lo = times[0] + trace_start
    keep = times >= lo
    if trace_duration is not None:
        keep &= times < lo + trace_duration
    index = np.flatnonzero(keep)
    if num_prompts is not None:
        index = index[:num_prompts]
    chosen = [rows[i] for i in index]
    if not len(index):
        return chosen, np.zeros(0)
    offsets = (times[index] - times[index[0]]) / time_scale
    return chosen, offsets
