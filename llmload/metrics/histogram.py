"""The one mergeable histogram: live numbers over more values than are worth keeping exactly."""

from __future__ import annotations

import math

import numpy as np

from llmload.metrics.percentiles import rank_bucket


class LogHistogram:
    """Mergeable histogram of positive seconds with 1 % relative buckets from 1 µs: bucket ``k`` holds
    ``[BASE * GROWTH^k, BASE * GROWTH^(k+1))`` and reports its geometric middle, so a percentile is within
    0.5 % of the exact one. The live tab's run-wide ITLs go here past the exact limit."""

    BASE = 1e-6
    GROWTH = math.log(1.01)

    def __init__(self) -> None:
        self.counts = np.zeros(0, dtype=np.int64)
        self.total = 0
        self.sum = 0.0

    @classmethod
    def of(cls, values: np.ndarray) -> LogHistogram:
        hist = cls()
        hist.add(values)
        return hist

    def add(self, values: np.ndarray) -> None:
        """Count ``values`` (seconds; anything under 1 µs in the first bucket)."""
        values = np.asarray(values, dtype=float)
        if values.size == 0:
            return
        idx = np.floor(np.log(np.maximum(values, self.BASE) / self.BASE) / self.GROWTH).astype(np.int64)
        self._add_counts(np.bincount(idx))
        self.total += int(values.size)
        self.sum += float(values.sum())

    def merge(self, other: LogHistogram) -> None:
        """Add ``other``'s counts to this histogram (same buckets, so merging loses nothing)."""
        self._add_counts(other.counts)
        self.total += other.total
        self.sum += other.sum

    def _add_counts(self, counts: np.ndarray) -> None:
        if counts.size > self.counts.size:
            counts = counts.copy()
            counts[: self.counts.size] += self.counts
            self.counts = counts
        else:
            self.counts[: counts.size] += counts

    @property
    def mean(self) -> float:
        return self.sum / self.total if self.total else 0.0

    def percentile(self, p: float) -> float:
        """The p-th percentile (seconds): the middle of the bucket :func:`rank_bucket` picks; 0 when empty."""
        k = rank_bucket(self.counts.tolist(), p)
        return 0.0 if k is None else self.BASE * math.exp((k + 0.5) * self.GROWTH)
