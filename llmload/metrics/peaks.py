"""vLLM's run-level peaks: ``max_output_tokens_per_s`` and ``max_concurrent_requests``.

One-second buckets from the earliest start of a request that ended: ``k = int(t - t0)``. A token counts in the
bucket of its reconstructed time (vLLM's: ``start + TTFT``, then ``+ ITL`` for each counted event); for vLLM
0.7's ``max_concurrent_requests`` a request is active in every bucket from its start to its end (``start +
E2EL``). Today's ``vllm bench serve`` counts it exactly instead (:func:`peak_overlap`): the most completed
requests whose ``[start, start + E2EL)`` overlap at one instant.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

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
