"""Time-sliced metrics (``--slice-duration S``, AIPerf's idea): how latency and throughput move during a run —
warm-up, a cache filling, a server slowing down — which one overall percentile hides.

The run is cut into slices of ``S`` seconds from its first send, on the records' clock (the last slice ends
with the run, so it may be shorter). A request belongs to the slice it was *sent* in: its TTFT, ITL, TPOT and
E2E latency are that slice's, with the definitions of :mod:`llmload.metrics.definitions`, and so is its
outcome, so the slices' ``requests`` add up to the run's. Rates are over what happened *in* the slice:
``output_throughput`` = output tokens that arrived in it / its length (each chunk's tokens at its arrival),
``request_throughput`` = requests that completed in it / its length; ``request_goodput`` = requests sent in it
that met every SLO / its length. docs/metrics.md, "Time slices".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from llmload.metrics.accumulator import MetricsAccumulator
from llmload.metrics.definitions import is_completed

if TYPE_CHECKING:
    from llmload.metrics.request import MeasuredRequest

#: the latency metrics a slice reports, and the statistics of each
SLICE_METRICS = ("ttft", "itl", "tpot", "e2el")
SLICE_PERCENTILES = (50.0, 90.0, 99.0)


def time_slices(records: Sequence[MeasuredRequest], slice_s: float, *, end: float | None = None,
                goodput_slos: Mapping[str, Any] | None = None,
                percentiles: Sequence[float] = SLICE_PERCENTILES) -> list[dict[str, Any]]:
    """One dict per slice of ``slice_s`` seconds from the first send to ``end`` (default: the last event of
    any record): ``index``, ``start_s``/``end_s`` (since the first send), ``requests``, ``completed``, ``failed``,
    ``cancelled``, ``cut_off``, the rates of the module docstring, ``good_requests`` (None without SLOs) and
    ``{metric}_ms`` as ``{mean, p50, p90, p99}`` (empty when no request of the slice had that metric)."""
    if not slice_s > 0 or not records:
        return []
    origin = min(r.start for r in records)
    last = end if end is not None else max((_last_event(r) for r in records), default=origin)
    count = max(1, math.ceil((last - origin) / slice_s - 1e-9))
    accs = [MetricsAccumulator() for _ in range(count)]
    tokens = [0] * count
    finished = [0] * count

    def index(t: float) -> int:
        return min(count - 1, max(0, int((t - origin) // slice_s)))

    for r in records:
        accs[index(r.start)].add(r)
        if is_completed(r):
            finished[index(_last_event(r))] += 1
            counts = r.chunk_tokens if len(r.chunk_tokens) == len(r.chunk_times) else [1] * len(r.chunk_times)
            for t, n in zip(r.chunk_times, counts, strict=True):
                tokens[index(t)] += n
    out = []
    for k, acc in enumerate(accs):
        start = k * slice_s
        length = min(slice_s, last - origin - start) if k == count - 1 else slice_s
        length = max(length, 1e-9)
        m = acc.result(length, goodput_slos=goodput_slos, selected_percentiles=percentiles,
                       selected_metrics=SLICE_METRICS) if acc.total.records else None
        row: dict[str, Any] = {
            "index": k, "start_s": start, "end_s": start + length,
            "requests": acc.total.records, "completed": acc.total.completed, "failed": acc.total.failed,
            "cancelled": acc.total.cancelled, "cut_off": acc.total.cut_off,
            "request_throughput": finished[k] / length, "output_throughput": tokens[k] / length,
            "request_goodput": m.request_goodput if m is not None else None,
            "good_requests": m.good_requests if m is not None else None,
        }
        for name in SLICE_METRICS:
            dist = getattr(m, name) if m is not None else None
            row[f"{name}_ms"] = ({"mean": dist.mean_ms, **{f"p{p:g}": v for p, v in dist.percentiles_ms}}
                                 if dist is not None and dist.count else {})
        out.append(row)
    return out


def _last_event(r: MeasuredRequest) -> float:
    return r.end if r.end is not None else r.start
