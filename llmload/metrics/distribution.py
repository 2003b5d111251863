"""One latency list's summary in milliseconds (:class:`Distribution`), with vLLM's key names: what a run's result
and a conversation's result are both made of."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from llmload.metrics.percentiles import linear_percentiles
from llmload.metrics.spill import Chunked, summary


def percentile_label(p: float) -> str:
    """vLLM's percentile word: 99.0 -> "99", 99.9 -> "99.9"."""
    return str(int(p)) if int(p) == p else str(p)


@dataclass(frozen=True, slots=True)
class Distribution:
    """Summary statistics of one latency list, in milliseconds."""

    count: int
    mean_ms: float
    median_ms: float
    std_ms: float
    max_ms: float
    percentiles_ms: tuple[tuple[float, float], ...]

    @classmethod
    def of(cls, values_s: Sequence[float] | np.ndarray | Chunked, percentiles: Sequence[float]) -> Distribution:
        """numpy mean, median, population std, max and :func:`linear_percentiles` of ``values_s`` (seconds);
        an empty list gives zeros, as vLLM's ``np.mean(x or 0)``. A :class:`Chunked` source (values on disk)
        gives the same numbers read a chunk at a time (:func:`llmload.metrics.spill.summary`)."""
        if isinstance(values_s, Chunked):
            count, mean, median, std, top, pcts = summary(values_s, percentiles)
            return cls(count=count, mean_ms=mean, median_ms=median, std_ms=std, max_ms=top,
                       percentiles_ms=tuple((float(p), v) for p, v in zip(percentiles, pcts, strict=True)))
        arr = np.asarray(values_s, dtype=float) * 1000.0 if len(values_s) else np.zeros(1)
        pcts = linear_percentiles(arr, percentiles)
        return cls(
            count=len(values_s),
            mean_ms=float(np.mean(arr)),
            median_ms=float(np.median(arr)),
            std_ms=float(np.std(arr)),
            max_ms=float(np.max(arr)),
            percentiles_ms=tuple((float(p), v) for p, v in zip(percentiles, pcts, strict=True)),
        )

    def keys(self, name: str, *, with_max: bool = False) -> dict[str, float]:
        """Result keys in vLLM's order: ``mean_``, ``median_``, ``std_``, ``p{p}_{name}_ms`` (+ ``max_``)."""
        out = {
            f"mean_{name}_ms": self.mean_ms,
            f"median_{name}_ms": self.median_ms,
            f"std_{name}_ms": self.std_ms,
        }
        for p, value in self.percentiles_ms:
            out[f"p{percentile_label(p)}_{name}_ms"] = value
        if with_max:
            out[f"max_{name}_ms"] = self.max_ms
        return out
