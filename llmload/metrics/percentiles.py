"""The one percentile implementation over raw values, and the one over bucket counts.

Raw values (final results, and every live number while it is exact): vLLM's ``np.percentile`` with linear
interpolation between the closest ranks, ``x[floor(r)] + (r - floor(r)) * (x[floor(r)+1] - x[floor(r)])`` at
rank ``r = p / 100 * (n - 1)`` of the sorted values; an empty list gives 0 (vLLM's ``np.mean(x or 0)``).

Bucket counts (:class:`llmload.metrics.histogram.LogHistogram`, the simulator's lateness histogram): the
bucket holding the value of rank ``floor(p / 100 * (n - 1))``, the lower of the two values the linear rule
interpolates between.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from itertools import accumulate
from typing import Any


def linear_percentiles(values: Sequence[float] | Any, ps: Sequence[float]) -> list[float]:
    """``np.percentile(values, p)`` (linear) for each p in ``ps``; zeros for an empty list."""
    import numpy as np  # here, not at the top: the simulator imports this module and runs without numpy

    if not len(values):
        return [0.0 for _ in ps]
    return [float(v) for v in np.percentile(np.asarray(values, dtype=float), list(ps))]


def rank_bucket(counts: Sequence[int], p: float) -> int | None:
    """Index of the bucket that holds the value of rank ``floor(p / 100 * (n - 1))`` (0-based) among the
    ``n = sum(counts)`` values; None when there are none. Pure Python: the simulator imports no numpy."""
    cum = list(accumulate(int(c) for c in counts))
    if not cum or cum[-1] == 0:
        return None
    return bisect_right(cum, math.floor(p / 100.0 * (cum[-1] - 1)))
