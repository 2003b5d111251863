"""A long run's share goes to each worker in parts, each sent a while before its first request is due.

A job that held a worker's whole share held every prompt of it: a soak of a million requests put half a million
prompts into each worker, and built them all on the master before the first send (issue 37). The master cuts the
schedule into parts of ``PART_S`` seconds of offsets instead: the first goes with the job that starts the run,
each later one ``PART_LEAD_S`` before its first request is due, and the worker's open loop takes them in turn
(:class:`~llmload.core.dispatch.RequestFeed`). A run shorter than one part is one job, as before; so is a
closed loop (its users take requests in turn, not at offsets) and a schedule whose offsets are not in order.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator

import numpy as np

from llmload.common.errors import ConfigError

#: the schedule seconds one part covers (``LLMLOAD_PART_S`` sets another: a test cuts a short run into parts)
PART_S = 30.0
PART_S_VARIABLE = "LLMLOAD_PART_S"
#: how long before its first request is due a part is sent (room for a busy master and a slow link)
PART_LEAD_S = 15.0


def part_seconds() -> float:
    """``LLMLOAD_PART_S`` when set, else :data:`PART_S`; ConfigError (one line) unless a number > 0 (a run's
    configuration checks it before the first request)."""
    text = os.environ.get(PART_S_VARIABLE, "").strip()
    if not text:
        return PART_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"{PART_S_VARIABLE}={text!r}: expected a number of seconds > 0")
    return value


class RunParts:
    """Where a schedule is cut: part ``k`` is the global indices ``[cuts[k], cuts[k + 1])``."""

    def __init__(self, offsets: np.ndarray, part_s: float = PART_S, lead_s: float = PART_LEAD_S) -> None:
        lead_s = min(lead_s, part_s / 2)  # a short part (a test's) still goes out before it is due
        n = int(offsets.size)
        self.part_s = part_s
        self._offsets = offsets
        self._lead_s = lead_s
        cuts = [0, n]
        if n and part_s > 0 and float(offsets[-1]) > part_s and bool(np.all(np.diff(offsets) >= 0)):
            edges = np.searchsorted(offsets, np.arange(part_s, float(offsets[-1]), part_s), side="left")
            cuts = sorted({0, n, *(int(e) for e in edges if 0 < e < n)})
        self.cuts = cuts
        #: parts handed out so far (the first goes with the job that starts the run)
        self.sent = 1

    @classmethod
    def whole(cls, count: int) -> RunParts:
        """One part: the run's whole share in its first job."""
        return cls(np.zeros(count))

    @property
    def count(self) -> int:
        return len(self.cuts) - 1

    @property
    def first(self) -> tuple[int, int]:
        return self.cuts[0], self.cuts[1]

    @property
    def more(self) -> bool:
        """Parts follow the first."""
        return self.count > 1

    def due(self, elapsed: float) -> Iterator[tuple[int, int, bool]]:
        """The parts to send now, ``elapsed`` seconds into the run: ``(lo, hi, last)`` each, in order."""
        while self.sent < self.count and float(self._offsets[self.cuts[self.sent]]) - self._lead_s <= elapsed:
            k = self.sent
            self.sent += 1
            yield self.cuts[k], self.cuts[k + 1], k == self.count - 1
