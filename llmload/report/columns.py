"""The per-request numbers a report draws and reasons from, gathered in one pass over a run's records.

A report of a million requests cannot hold a million records (issue 37). One pass over them
(:class:`~llmload.report.records.RecordsFile` decodes each as it is read) leaves a few float64 numbers a request
(send, first token, end, the latencies by their one definition in :mod:`llmload.metrics.definitions`, the token
counts) and the pooled ITLs in value columns that move to disk once they grow
(:class:`~llmload.metrics.spill.SpillColumn`). Tables keep coming from :func:`llmload.metrics.compute_metrics`
over the records, exactly; figures and findings read these columns.

Pooled values are drawn from a *picture* of them: every value while the column is small (every run below
:data:`~llmload.metrics.spill.SPILL_AFTER` gaps: exactly what the figures showed before), else every k-th value,
at most :data:`PICTURE` of them. Their median and count, where a finding states them, are the column's own,
exact.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from llmload.client.records import RequestRecord
from llmload.metrics import METRICS, is_completed, itl_array
from llmload.metrics.spill import Chunked, SpillColumn, summary

#: the most values a figure draws of a pooled metric
PICTURE = 1 << 19
_NAN = math.nan
#: the per-request latencies kept, by their key in METRICS (NaN where a request has none or it does not apply)
LATENCIES = ("ttft", "e2el", "tpot", "tpot_steady")


@dataclass
class Pooled:
    """A pooled metric's values (every ITL of a run) in a column that spills to disk."""

    column: SpillColumn = field(default_factory=SpillColumn)

    def __len__(self) -> int:
        return self.column.size

    def median(self) -> float:
        """The exact median (numpy's), 0 when empty."""
        return float(summary(Chunked([self.column]), (), scale=1.0)[2]) if self.column.size else 0.0

    def picture(self) -> np.ndarray:
        """Every value, or every k-th once the column spilled (at most :data:`PICTURE`)."""
        if not self.column.spilled:
            return self.column.array()
        step = max(1, math.ceil(self.column.size / PICTURE))
        parts, skip = [], 0
        for chunk in self.column.chunks():
            parts.append(chunk[skip::step])
            skip = (skip - chunk.size) % step
        return np.concatenate(parts) if parts else np.zeros(0)


_FLOATS = ("start", "end", "first_token", "intended", "output_tokens", "input_tokens", "chunks",
           "itl1", "itl1_vs_next", "turn", *LATENCIES)
_FLAGS = ("completed", "failed", "success")


class RecordColumns:
    """One float64 (or bool) array a field, one entry a record, in the records' order; NaN where a record has
    no such time or value (``itl1`` and ``itl1_vs_next``: completed requests only)."""

    start: np.ndarray
    end: np.ndarray
    first_token: np.ndarray
    intended: np.ndarray
    output_tokens: np.ndarray
    input_tokens: np.ndarray
    chunks: np.ndarray
    itl1: np.ndarray
    itl1_vs_next: np.ndarray
    turn: np.ndarray
    ttft: np.ndarray
    e2el: np.ndarray
    tpot: np.ndarray
    tpot_steady: np.ndarray
    completed: np.ndarray
    failed: np.ndarray
    success: np.ndarray

    def __init__(self, records: Iterable[RequestRecord]) -> None:
        cols = {name: array("d") for name in _FLOATS}
        flags = {name: bytearray() for name in _FLAGS}
        self.itl, self.itl_later = Pooled(), Pooled()
        metrics = [(key, METRICS[key]) for key in LATENCIES]
        for r in records:
            done = is_completed(r)
            flags["completed"].append(done)
            flags["success"].append(bool(r.success))
            flags["failed"].append(not r.success and not r.cut_off)
            cols["start"].append(r.start)
            cols["end"].append(_NAN if r.end is None else r.end)
            cols["first_token"].append(_NAN if r.first_token is None else r.first_token)
            cols["intended"].append(_NAN if r.intended_send is None else r.intended_send)
            cols["output_tokens"].append(r.output_tokens)
            cols["input_tokens"].append(r.prompt_len)
            cols["chunks"].append(len(r.chunk_times))
            cols["turn"].append(r.turn)
            for key, metric in metrics:
                value = metric.value(r) if metric.applies(r) else None
                cols[key].append(_NAN if value is None else value)
            gaps = itl_array(r) if done else None
            cols["itl1"].append(float(gaps[0]) if gaps is not None and gaps.size else _NAN)
            cols["itl1_vs_next"].append(_ratio(gaps))
            if gaps is not None and gaps.size:
                self.itl.column.extend(gaps)
                if gaps.size > 1:
                    self.itl_later.column.extend(gaps[1:])
        for name, values in cols.items():
            setattr(self, name, np.frombuffer(values, dtype=np.float64) if len(values) else np.zeros(0))
        for name, bits in flags.items():
            setattr(self, name, np.frombuffer(bytes(bits), dtype=np.bool_))

    def __len__(self) -> int:
        return int(self.start.size)

    def values(self, key: str) -> np.ndarray:
        """A per-request field over the requests that have it (its NaNs left out), in the records' order."""
        column: np.ndarray = getattr(self, key)
        return column[~np.isnan(column)]


def _ratio(gaps: np.ndarray | None) -> float:
    """ITL₁ / median(ITL₂..ITL₄), for a request with at least 3 ITLs and a non-zero median; else NaN."""
    if gaps is None or gaps.size < 3:
        return _NAN
    later = sorted(gaps[1:4].tolist())  # 2 or 3 values: np.median's answer without its cost per request
    nxt = later[1] if len(later) == 3 else (later[0] + later[1]) / 2
    return float(gaps[0]) / nxt if nxt > 0 else _NAN


#: chunk times gathered before they are handed on as one array
_BATCH = 1 << 16


def chunk_batches(records: Iterable[RequestRecord], t0: float) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Every chunk of ``records`` as ``(time since t0, tokens it carried)``, a batch of arrays at a time (a
    figure's histogram over time adds them up without holding a run's chunks)."""
    times: list[float] = []
    tokens: list[int] = []
    for r in records:
        n = len(r.chunk_times)
        times.extend(r.chunk_times)
        tokens.extend(r.chunk_tokens if len(r.chunk_tokens) == n else [1] * n)
        if len(times) >= _BATCH:
            yield np.asarray(times, dtype=float) - t0, np.asarray(tokens, dtype=float)
            times, tokens = [], []
    if times:
        yield np.asarray(times, dtype=float) - t0, np.asarray(tokens, dtype=float)


def histogram_of(batches: Iterable[tuple[np.ndarray, np.ndarray]], edges: np.ndarray) -> np.ndarray:
    """``np.histogram(times, edges, weights=tokens)`` over every batch."""
    total = np.zeros(max(edges.size - 1, 0))
    for times, weights in batches:
        total += np.histogram(times, bins=edges, weights=weights)[0]
    return total


def gap_sample(records: Sequence[RequestRecord], total_gaps: int, t0: float,
               limit: int = PICTURE) -> tuple[np.ndarray, np.ndarray]:
    """``(end of each ITL since t0, the ITL)`` for the ITLs of ``records`` (completed ones): all of them, or
    those of every k-th request when there are more than ``limit`` (a figure's binned medians)."""
    step = max(1, math.ceil(total_gaps / limit)) if limit else 1
    ends: list[np.ndarray] = []
    gaps: list[np.ndarray] = []
    for k, r in enumerate(records):
        if k % step:
            continue
        ends.append(np.asarray(r.chunk_times[1:], dtype=float) - t0)
        gaps.append(itl_array(r))
    if not ends:
        return np.zeros(0), np.zeros(0)
    return np.concatenate(ends), np.concatenate(gaps)


#: the most steps a requests-in-flight curve draws (more: each step is the highest of its stretch)
IN_FLIGHT_STEPS = 1 << 16


def in_flight(starts: np.ndarray, stops: np.ndarray, limit: int = IN_FLIGHT_STEPS) -> tuple[np.ndarray, np.ndarray]:
    """Requests in flight over time: a step at every send (+1) and end (-1), an end first where they tie, from
    0 at time 0. Past ``limit`` steps, every stretch of k steps is drawn as its highest (a peak is never lost)."""
    times = np.concatenate([starts, stops])
    deltas = np.concatenate([np.ones(starts.size, dtype=np.int64), -np.ones(stops.size, dtype=np.int64)])
    order = np.lexsort((deltas, times))
    xs = np.concatenate([[0.0], times[order]])
    ys = np.concatenate([[0], np.cumsum(deltas[order])])
    if xs.size > limit:
        at = np.arange(0, xs.size, math.ceil(xs.size / limit))
        xs, ys = xs[at], np.maximum.reduceat(ys, at)
    return xs, ys
