"""``wall - perf_counter`` on this host, read so that a preempted moment cannot skew it.

Two back-to-back clock reads are one instant only if nothing runs between them; on a busy machine the OS can
stop the process between them for tens of milliseconds (seen: 24 ms on a loaded CI host, which moved one
worker's whole schedule by that much against the other's). The tightest of a few ``perf_counter`` brackets
around a ``time.time()`` is the reading the OS did not interrupt.
"""

from __future__ import annotations

import math
import time
from time import perf_counter

#: brackets read; the tightest one wins
READINGS = 5


def clock_offset() -> float:
    """``time.time() - perf_counter()``: adding it turns a perf_counter time into wall-clock time."""
    best_width, best = math.inf, 0.0
    for _ in range(READINGS):
        before = perf_counter()
        wall = time.time()
        after = perf_counter()
        if after - before < best_width:
            best_width, best = after - before, wall - (before + after) / 2
    return best
