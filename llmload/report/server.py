"""The server's side of a report: its scraped series on the report's time axis, its summary and its table.

A run of ``llmload bench`` that scraped the server's ``/metrics`` leaves ``X.server_metrics.jsonl`` next to its
records (:mod:`llmload.servermetrics.store`) and ``server_metrics`` / ``saturation`` in its result JSON. Both
clocks are the same (:mod:`llmload.report.loader` puts the series on the records' clock), so here every scrape
time becomes seconds since the run's first send, the x axis of every figure over time.

Its "Server metrics" table: :mod:`llmload.report.server_tables`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from llmload.report.loader import Run


class OnTheAxis(Protocol):
    """What the server's part of a report reads of a run: the run itself and its time origin (a
    :class:`~llmload.report.stats.RunStats` is one; the server's part never needs the rest)."""

    @property
    def run(self) -> Run: ...

    @property
    def t0(self) -> float: ...


@dataclass(frozen=True)
class ServerSeries:
    """A run's scrapes as arrays, ``t`` in seconds since the run's first send; NaN where a scrape lacks the
    series (the engine does not export it)."""

    t: np.ndarray
    running: np.ndarray
    waiting: np.ndarray
    #: fraction 0..1 of the KV cache in use
    kv: np.ndarray
    #: the preemption counter as scraped (cumulative)
    preemptions: np.ndarray
    #: the finished-requests counter as scraped (cumulative)
    finished: np.ndarray

    def has(self, name: str) -> bool:
        return bool(np.isfinite(getattr(self, name)).any())

    @property
    def interval_s(self) -> float:
        """The median time between two scrapes (0 with fewer than two)."""
        return float(np.median(np.diff(self.t))) if len(self.t) > 1 else 0.0

    def during(self, duration: float) -> np.ndarray:
        """Per scrape ``k``: the interval ``(t[k-1], t[k]]`` overlaps the run ``[0, duration]`` (for ``k = 0``: the
        scrape lies in it), so that counts over the series agree with the summary of the run's window."""
        before = np.concatenate([self.t[:1], self.t[:-1]])
        return (self.t >= 0.0) & (before <= duration)

    def admissions(self) -> np.ndarray:
        """Per scrape ``k``: over the interval ``(t[k-1], t[k]]`` queued requests entered the running batch: the
        waiting queue dropped by at least one while running rose, or held (a full batch, at its
        ``max-num-seqs``, replaces finished requests with queued ones and stays the same size), or fell by less
        than the requests that finished. ``False`` for ``k = 0``."""
        out = np.zeros(len(self.t), dtype=bool)
        if len(self.t) > 1:
            finished = np.nan_to_num(np.clip(np.diff(self.finished), 0.0, None))
            grew = np.diff(self.running)
            with np.errstate(invalid="ignore"):
                out[1:] = (np.diff(self.waiting) <= -1.0) & ((grew >= 0.0) | (grew + finished >= 1.0))
        return out

    def preempting(self) -> np.ndarray:
        """Per scrape ``k``: the preemption counter rose over ``(t[k-1], t[k]]`` (a drop is a restart: no)."""
        out = np.zeros(len(self.t), dtype=bool)
        if len(self.t) > 1:
            with np.errstate(invalid="ignore"):
                out[1:] = np.diff(self.preemptions) > 0.0
        return out

    def overlapping(self, flags: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(covered, hit)`` for the windows ``[a[i], b[i]]``: covered when the scrapes span the window, hit when
        it overlaps a scrape interval ``(t[k-1], t[k]]`` whose ``flags[k]`` is set."""
        a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
        if len(self.t) < 2 or not len(a):
            return np.zeros(len(a), dtype=bool), np.zeros(len(a), dtype=bool)
        covered = (a >= self.t[0]) & (b <= self.t[-1])
        first = np.clip(np.searchsorted(self.t, a, side="right"), 1, len(self.t) - 1)
        last = np.clip(np.searchsorted(self.t, b, side="left"), 1, len(self.t) - 1)
        counts = np.cumsum(flags.astype(int))
        hit = covered & (counts[last] - counts[first - 1] > 0)
        return covered, hit


def _column(snapshots: list, name: str) -> np.ndarray:
    return np.asarray([s.series.get(name, math.nan) for s in snapshots], dtype=float)


def server_series(stats: OnTheAxis) -> ServerSeries | None:
    """The run's scrapes on the report's time axis; None when the run has no series file."""
    snapshots = stats.run.server
    if not snapshots:
        return None
    return ServerSeries(
        t=np.asarray([s.t for s in snapshots], dtype=float) - stats.t0,
        running=_column(snapshots, "running"), waiting=_column(snapshots, "waiting"),
        kv=_column(snapshots, "kv_cache_usage"), preemptions=_column(snapshots, "preemptions_total"),
        finished=_column(snapshots, "requests_finished_total"),
    )


def server_summary(stats: OnTheAxis) -> dict[str, Any] | None:
    """The result JSON's ``server_metrics``, else the summary of the loaded series over the run's window
    (first send to first send + duration); None when the run has neither."""
    stored = stats.run.summary.get("server_metrics")
    if isinstance(stored, dict) and stored:
        return stored
    if not stats.run.server:
        return None
    from llmload.servermetrics.summarize import summarize

    return summarize(stats.run.server, stats.t0, stats.t0 + stats.run.duration)


def saturation(stats: OnTheAxis) -> dict[str, Any] | None:
    """The result JSON's ``saturation`` verdict, when the run has one."""
    verdict = stats.run.summary.get("saturation")
    return verdict if isinstance(verdict, dict) else None


def number(summary: dict[str, Any] | None, key: str) -> float | None:
    """A finite number of a summary, or None (absent, ``null``, a string like ``"inf"``)."""
    value = (summary or {}).get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)
