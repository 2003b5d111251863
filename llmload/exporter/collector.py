"""The value stores behind :class:`llmload.exporter.LiveExporter`: plain counters and bucket histograms that
turn into prometheus_client metric families only when scraped.

Why not prometheus_client's ``Histogram``: a request brings hundreds of inter-token latencies, and observing each
one through a Python call (a lock and a linear bucket scan each) would cost the event loop that timestamps every
token a few hundred microseconds per record. :meth:`BucketCounts.observe_many` files a whole array in one numpy
call. Nothing here is exported with a ``_created`` series (prometheus_client's counters add one each).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence

import numpy as np
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString


class BucketCounts:
    """One histogram series: how many values fell at or below each upper bound (Prometheus' ``le``), their
    sum and count. A value equal to a bound is counted in that bound's bucket, as Prometheus does."""

    __slots__ = ("_array", "bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(sorted(float(b) for b in bounds))
        self._array = np.asarray(self.bounds, dtype=float)
        #: per bucket (not cumulative); the last one is +Inf
        self.counts = np.zeros(len(self.bounds) + 1, dtype=np.int64)
        self.sum = 0.0

    @property
    def count(self) -> int:
        return int(self.counts.sum())

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def observe_many(self, values: np.ndarray) -> None:
        """File every value of ``values`` at once (same buckets as :meth:`observe`)."""
        if not len(values):
            return
        index = np.searchsorted(self._array, values, side="left")
        self.counts += np.bincount(index, minlength=len(self.counts))
        self.sum += float(np.sum(values))

    def cumulative(self) -> list[tuple[str, float]]:
        """``[(le, values <= le), ...]`` ending with ``+Inf``: the buckets as the exposition format has them."""
        running = np.cumsum(self.counts).tolist()
        return [(floatToGoString(b), float(n)) for b, n in zip((*self.bounds, float("inf")), running, strict=True)]


class Family:
    """One metric family's series, keyed by their label values, in the order they were first seen."""

    def __init__(self, name: str, help_text: str, labels: Sequence[str],
                 buckets: Sequence[float] | None = None) -> None:
        self.name = name
        self.help = help_text
        self.labels = tuple(labels)
        #: None: a counter
        self.buckets = None if buckets is None else tuple(buckets)
        self.series: dict[tuple[str, ...], float | BucketCounts] = {}

    @property
    def is_histogram(self) -> bool:
        return self.buckets is not None

    def touch(self, values: tuple[str, ...]) -> float | BucketCounts:
        """The series for ``values``, created at zero if new (so ``rate()`` sees its first increase)."""
        series = self.series.get(values)
        if series is None:
            series = self.series[values] = 0.0 if self.buckets is None else BucketCounts(self.buckets)
        return series

    def inc(self, values: tuple[str, ...], amount: float = 1.0) -> None:
        self.series[values] = float(self.touch(values)) + amount  # type: ignore[arg-type]

    def histogram(self, values: tuple[str, ...]) -> BucketCounts:
        series = self.touch(values)
        assert isinstance(series, BucketCounts), self.name
        return series

    def family(self) -> CounterMetricFamily | HistogramMetricFamily:
        """A snapshot as prometheus_client's family (copied: later observations do not change it)."""
        if self.buckets is None:
            counter = CounterMetricFamily(self.name, self.help, labels=self.labels)
            for values, total in self.series.items():
                counter.add_metric(values, float(total))  # type: ignore[arg-type]
            return counter
        histogram = HistogramMetricFamily(self.name, self.help, labels=self.labels)
        for values, series in self.series.items():
            assert isinstance(series, BucketCounts)
            histogram.add_metric(values, series.cumulative(), series.sum)
        return histogram


def snapshot(families: Iterable[Family]) -> list[CounterMetricFamily | HistogramMetricFamily]:
    return [f.family() for f in families]
