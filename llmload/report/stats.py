"""Per-request values and summary metrics of one :class:`Run`, recomputed from its records.

Every number in a report comes from here: the latency lists (seconds, from the definitions in
:mod:`llmload.metrics.definitions`, over the requests each applies to) and
:func:`llmload.metrics.compute_metrics` over the records, so a report agrees with ``llmload bench``'s summary
and with anything recomputed from the records file.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from llmload.client.records import RequestRecord
from llmload.common.errors import LLMLoadError
from llmload.metrics import (
    METRICS,
    SENT,
    BenchmarkMetrics,
    Deployment,
    compute_metrics,
    input_tokens,
    is_completed,
    itls_s,
)
from llmload.report.loader import Run
from llmload.report.server import ServerSeries, server_series, server_summary


@dataclass
class RunStats:
    run: Run
    #: recompute goodput with these SLOs (ms, :func:`llmload.metrics.parse_goodput`'s structure) instead of
    #: the run's own
    goodput_slos: dict[str, Any] | None = None

    @cached_property
    def done(self) -> list[RequestRecord]:
        return [r for r in self.run.records if is_completed(r)]

    @cached_property
    def deployment(self) -> Deployment:
        """The GPUs the run says it ran on (``gpus``, ``gpu_type``, ``gpu_hour_cost`` of its result JSON)."""
        summary = self.run.summary
        try:
            return Deployment(int(summary.get("gpus") or 1), summary.get("gpu_type") or None,
                              None if summary.get("gpu_hour_cost") is None else float(summary["gpu_hour_cost"]))
        except (TypeError, ValueError, LLMLoadError):
            return Deployment()

    @property
    def slice_duration(self) -> float | None:
        """The run's ``--slice-duration`` (its result JSON's ``slice_duration``); None without one."""
        value = self.run.summary.get("slice_duration")
        return float(value) if isinstance(value, (int, float)) and value > 0 else None

    @cached_property
    def metrics(self) -> BenchmarkMetrics:
        """The run's metrics, and its time slices when it was measured with them and has per-request times."""
        return compute_metrics(
            self.run.records, self.run.duration, goodput_slos=self.goodput_slos or self.run.goodput_slos,
            selected_percentiles=self.run.percentiles, selected_metrics=("ttft", "tpot", "itl", "e2el"),
            slice_duration_s=self.slice_duration if self.run.has_timestamps else None,
        )

    def values(self, key: str) -> np.ndarray:
        """Metric ``key`` of :data:`llmload.metrics.METRICS` (seconds) over the requests it applies to;
        pooled metrics (ITL) one value per gap."""
        metric = METRICS[key]
        records = self.run.records if metric.applies_to == SENT else self.done
        if metric.pooled:
            parts = [metric.value(r) for r in records]
            return np.concatenate(parts) if parts else np.zeros(0)
        return np.asarray([v for r in records if (v := metric.value(r)) is not None], dtype=float)

    @cached_property
    def ttft(self) -> np.ndarray:
        return self.values("ttft")

    @cached_property
    def e2el(self) -> np.ndarray:
        return self.values("e2el")

    @cached_property
    def tpot(self) -> np.ndarray:
        return self.values("tpot")

    @cached_property
    def tpot_steady(self) -> np.ndarray:
        return self.values("tpot_steady")

    @cached_property
    def itl(self) -> np.ndarray:
        return self.values("itl")

    @cached_property
    def _itls(self) -> list[list[float]]:
        return [itls_s(r) for r in self.done]

    @cached_property
    def itl1(self) -> np.ndarray:
        """ITL₁: the gap between the first and the second counted event, one per request that has it."""
        return np.asarray([gaps[0] for gaps in self._itls if gaps], dtype=float)

    @cached_property
    def itl_later(self) -> np.ndarray:
        """Every ITL after the first, pooled."""
        return np.asarray([g for gaps in self._itls for g in gaps[1:]], dtype=float)

    @cached_property
    def itl1_vs_next(self) -> np.ndarray:
        """Per request: ITL₁ / median(ITL₂..ITL₄) (the gaps right after it), for requests with at least 3 ITLs
        and a non-zero median."""
        out = []
        for gaps in self._itls:
            if len(gaps) >= 3:
                nxt = float(np.median(gaps[1:4]))
                if nxt > 0:
                    out.append(gaps[0] / nxt)
        return np.asarray(out, dtype=float)

    @cached_property
    def input_lens(self) -> np.ndarray:
        """Prompt lengths of the completed requests (the dataset's, as ``total_input_tokens``)."""
        return np.asarray([input_tokens(r) for r in self.done], dtype=float)

    @cached_property
    def output_lens(self) -> np.ndarray:
        return np.asarray([r.output_tokens for r in self.done], dtype=float)

    @cached_property
    def t0(self) -> float:
        """The run's time zero: the earliest intended or actual send."""
        starts = [r.start for r in self.run.records]
        starts += [r.intended_send for r in self.run.records if r.intended_send is not None]
        return min(starts) if starts else 0.0

    @cached_property
    def failed(self) -> list[RequestRecord]:
        return [r for r in self.run.records if not r.success and not r.cut_off]

    @cached_property
    def server(self) -> ServerSeries | None:
        """The server's scraped series on the report's time axis (None without a series file)."""
        return server_series(self)

    @cached_property
    def server_summary(self) -> dict[str, Any] | None:
        """The server's summary: the result JSON's ``server_metrics``, else computed from the series."""
        return server_summary(self)

    def goodput_value(self) -> float | None:
        """Recomputed goodput (req/s) when SLOs are known, else the run's stored value."""
        m = self.metrics
        if m.request_goodput is not None:
            return m.request_goodput
        value = self.run.summary.get("request_goodput")
        return float(value) if isinstance(value, int | float) else None
