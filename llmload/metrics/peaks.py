"""vLLM's run-level peaks: ``max_output_tokens_per_s`` and ``max_concurrent_requests``.

One-second buckets from the earliest start of a request that ended: ``k = int(t - t0)``. A token counts in the
bucket of its reconstructed time (vLLM's: ``start + TTFT``, then ``+ ITL`` for each counted event); for vLLM
0.7's ``max_concurrent_requests`` a request is active in every bucket from its start to its end (``start +
E2EL``). Today's ``vllm bench serve`` counts it exactly instead (:func:`peak_overlap`): the most completed
requests whose ``[start, start + E2EL)`` overlap at one instant.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from llmload.metrics.definitions import e2el_s, itls_s

if TYPE_CHECKING:
    from llmload.metrics.request import MeasuredRequest


def token_times(record: MeasuredRequest) -> list[float]:
    """vLLM's reconstruction of when each counted event came: first_token, then + each ITL."""
    if record.first_token is None:
        return []
    times = [record.first_token]
    for gap in itls_s(record):
        times.append(times[-1] + gap)
    return times


def peak_per_second(records: Iterable[MeasuredRequest]) -> tuple[float, int]:
    """``(max_output_tokens_per_s, max_concurrent_requests)`` over ``records`` (formulas in the module
    docstring); ``(0.0, 0)`` when none ended."""
    done = [(r, e2el) for r in records if (e2el := e2el_s(r)) is not None]
    if not done:
        return 0.0, 0
    t0 = min(r.start for r, _ in done)
    t1 = max(r.start + e2el for r, e2el in done)
    buckets = int(np.ceil(t1 - t0)) + 1
    tokens = np.zeros(buckets)
    active = np.zeros(buckets)
    for r, e2el in done:
        for t in token_times(r):
            k = int(t - t0)
            if 0 <= k < buckets:
                tokens[k] += 1
        for k in range(int(r.start - t0), min(int(r.start + e2el - t0) + 1, buckets)):
            active[k] += 1
    return float(np.max(tokens)), int(np.max(active))


def peak_overlap(records: Iterable[MeasuredRequest]) -> int:
    """Today's ``max_concurrent_requests``: the exact peak of overlapping ``[start, start + E2EL)`` intervals
    of the completed requests (a sweep line; at equal times an end comes before a start)."""
    from llmload.metrics.definitions import is_completed

    events = [(t, d) for r in records if is_completed(r) and (e2el := e2el_s(r)) is not None
              for t, d in ((r.start, 1), (r.start + e2el, -1))]
    events.sort(key=lambda e: (e[0], e[1]))
    peak = active = 0
    for _, d in events:
        active += d
        peak = max(peak, active)
    return peak


# -- the same peaks from value columns (a run's records are not in memory: issue 37) ------------------------

#: events :func:`overlap_of_columns` sorts at once (more: in windows of time, one pass over the columns each)
OVERLAP_GATHER = 1 << 17
#: time bins :func:`overlap_of_columns` splits a large run into before it forms its windows
_OVERLAP_BINS = 1 << 16


class PeakColumns:
    """What the peaks need of each completed request that ended, one value (or one a token) per column: its
    start, ``start + E2EL`` and vLLM's reconstructed token times (:func:`token_times`)."""

    def __init__(self) -> None:
        from llmload.metrics.spill import SpillColumn

        self.starts = SpillColumn()
        self.ends = SpillColumn()
        self.tokens = SpillColumn()

    def add(self, record: MeasuredRequest, gaps: np.ndarray | None = None) -> None:
        """Take a completed record (the caller checked); ``gaps``: its ITLs when the caller has them already."""
        e2el = e2el_s(record)
        if e2el is None:
            return
        self.starts.append(record.start)
        self.ends.append(record.start + e2el)
        if record.first_token is not None:
            if gaps is None:
                gaps = np.diff(np.asarray(record.chunk_times, dtype=np.float64))
            times = np.empty(gaps.size + 1)
            times[0] = record.first_token
            times[1:] = gaps
            self.tokens.extend(np.cumsum(times))  # one after the other, as token_times adds them


def peaks_of_columns(parts: list[PeakColumns]) -> tuple[float, int, int]:
    """``(max_output_tokens_per_s, 0.7's max_concurrent_requests, today's max_concurrent_requests)`` over the
    requests of ``parts``: :func:`peak_per_second` and :func:`peak_overlap`'s numbers, read a chunk at a time."""
    from llmload.metrics.spill import Chunked

    starts = Chunked([p.starts for p in parts])
    ends = Chunked([p.ends for p in parts])
    if not len(starts):
        return 0.0, 0, 0
    t0 = min(float(c.min()) for c in starts.chunks() if c.size)
    t1 = max(float(c.max()) for c in ends.chunks() if c.size)
    buckets = int(np.ceil(t1 - t0)) + 1
    tokens = np.zeros(buckets)
    for chunk in Chunked([p.tokens for p in parts]).chunks():
        k = (chunk - t0).astype(np.int64)  # int(): toward zero, as the per-record loop
        k = k[(k >= 0) & (k < buckets)]
        tokens += np.bincount(k, minlength=buckets)
    change = np.zeros(buckets + 1)
    for first, last in zip(starts.chunks(), ends.chunks(), strict=True):
        lo = (first - t0).astype(np.int64)
        hi = np.minimum((last - t0).astype(np.int64) + 1, buckets)
        keep = hi > lo
        np.add.at(change, lo[keep], 1)
        np.add.at(change, hi[keep], -1)
    active = np.cumsum(change)[:buckets]
    return float(np.max(tokens)), int(np.max(active)), overlap_of_columns(starts, ends, t0, t1)


def overlap_of_columns(starts: Any, ends: Any, lo: float, hi: float, max_gather: int = OVERLAP_GATHER) -> int:
    """:func:`peak_overlap` over the intervals ``[starts, ends)`` (:class:`~llmload.metrics.spill.Chunked`
    sources that line up), all within ``[lo, hi]``. Up to ``max_gather`` events are sorted at once; more are
    split by time into windows of at most that many (a bin of equal times is never split), each gathered in one
    pass, the count of open intervals carried from one window to the next."""
    n = len(starts)
    if 2 * n <= max_gather:
        return _sweep(np.concatenate([c for c in starts.chunks()]), np.concatenate([c for c in ends.chunks()]), 0)[0]
    width = (hi - lo) / _OVERLAP_BINS or 1.0

    def bins(t: np.ndarray) -> np.ndarray:
        return np.clip(((t - lo) / width).astype(np.int64), 0, _OVERLAP_BINS - 1)

    counts = np.zeros(_OVERLAP_BINS, dtype=np.int64)
    for chunk in (*starts.chunks(), *ends.chunks()):
        counts += np.bincount(bins(chunk), minlength=_OVERLAP_BINS)
    windows, first, held = [], 0, 0
    for b, c in enumerate(counts.tolist()):
        if held and held + c > max_gather:
            windows.append((first, b))
            first, held = b, 0
        held += c
    windows.append((first, _OVERLAP_BINS))
    peak = open_ = 0
    for a, b in windows:
        mine_s = [c[(k >= a) & (k < b)] for c in starts.chunks() if (k := bins(c)) is not None]
        mine_e = [c[(k >= a) & (k < b)] for c in ends.chunks() if (k := bins(c)) is not None]
        top, open_ = _sweep(np.concatenate(mine_s), np.concatenate(mine_e), open_)
        peak = max(peak, top)
    return peak


def _sweep(starts: np.ndarray, ends: np.ndarray, open_: int) -> tuple[int, int]:
    """The most intervals open at once (``open_`` already open before these events; an end before a start at
    equal times), and how many are open after them."""
    times = np.concatenate([starts, ends])
    deltas = np.concatenate([np.ones(starts.size, dtype=np.int64), -np.ones(ends.size, dtype=np.int64)])
    if not times.size:
        return open_, open_
    running = open_ + np.cumsum(deltas[np.lexsort((deltas, times))])
    return max(open_, int(running.max())), int(running[-1])
