"""Per-request values and summary metrics of one :class:`Run`, recomputed from its records.

Every number in a report comes from here: the latency lists (seconds, from the definitions in
:mod:`llmload.metrics.definitions`, over the requests each applies to) and
:func:`llmload.metrics.compute_metrics` over the records, so a report agrees with ``llmload bench``'s summary
and with anything recomputed from the records file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from llmload.client.records import RequestRecord
from llmload.common.errors import LLMLoadError
from llmload.metrics import METRICS, BenchmarkMetrics, Deployment, compute_metrics
from llmload.report.columns import RecordColumns
from llmload.report.loader import Run
from llmload.report.records import RecordsView
from llmload.report.server import ServerSeries, server_series, server_summary


@dataclass
class RunStats:
    run: Run
    #: recompute goodput with these SLOs (ms, :func:`llmload.metrics.parse_goodput`'s structure) instead of
    #: the run's own
    goodput_slos: dict[str, Any] | None = None

    @cached_property
    def columns(self) -> RecordColumns:
        """The per-request numbers (one pass over the records; :mod:`llmload.report.columns`)."""
        return RecordColumns(self.run.records)

    @cached_property
    def done(self) -> Sequence[RequestRecord]:
        """The completed requests, read from the records as they are iterated."""
        return RecordsView(self.run.records, np.flatnonzero(self.columns.completed))

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
        pooled metrics (ITL) one value per gap (a picture of them past a spilled column:
        :class:`~llmload.report.columns.Pooled`)."""
        if METRICS[key].pooled:
            return self.columns.itl.picture()
        return self.columns.values(key)

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
    def itl1(self) -> np.ndarray:
        """ITL₁: the gap between the first and the second counted event, one per request that has it."""
        return self.columns.values("itl1")

    @cached_property
    def itl_later(self) -> np.ndarray:
        """Every ITL after the first, pooled (a picture of them past a spilled column)."""
        return self.columns.itl_later.picture()

    @property
    def itl_later_median(self) -> float:
        """The exact median of every ITL after the first (0 without any)."""
        return self.columns.itl_later.median()

    @property
    def itl_later_count(self) -> int:
        return len(self.columns.itl_later)

    @cached_property
    def itl1_vs_next(self) -> np.ndarray:
        """Per request: ITL₁ / median(ITL₂..ITL₄) (the gaps right after it), for requests with at least 3 ITLs
        and a non-zero median."""
        return self.columns.values("itl1_vs_next")

    @cached_property
    def input_lens(self) -> np.ndarray:
        """Prompt lengths of the completed requests (the dataset's, as ``total_input_tokens``)."""
        return self.columns.input_tokens[self.columns.completed]

    @cached_property
    def output_lens(self) -> np.ndarray:
        return self.columns.output_tokens[self.columns.completed]

    @cached_property
    def t0(self) -> float:
        """The run's time zero: the earliest intended or actual send."""
        c = self.columns
        times = np.concatenate([c.start, c.intended[~np.isnan(c.intended)]])
        return float(times.min()) if times.size else 0.0

    @cached_property
    def failed(self) -> Sequence[RequestRecord]:
        """The failed requests (not those cut off by the end of the run), read as they are iterated."""
        return RecordsView(self.run.records, np.flatnonzero(self.columns.failed))

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
