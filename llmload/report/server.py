"""The server's side of a report: its scraped series on the report's time axis, its summary and its table.

A run of ``llmload bench`` that scraped the server's ``/metrics`` leaves ``X.server_metrics.jsonl`` next to its
records (:mod:`llmload.servermetrics.store`) and ``server_metrics`` / ``saturation`` in its result JSON. Both
clocks are the same (:mod:`llmload.report.loader` puts the series on the records' clock), so here every scrape
time becomes seconds since the run's first send, the x axis of every figure over time.

The "Server metrics" table shows the result JSON's ``server_metrics`` (what ``llmload bench`` printed), or the
summary of the loaded series over the run's window when the JSON has none. ``llmload compare`` also adds the
keys that tell runs apart most (:data:`COMPARE_KEYS`) to its headline table.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from llmload.report.tables import Row, Table, to_html, to_markdown

if TYPE_CHECKING:
    from llmload.report.stats import RunStats


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


def server_series(stats: RunStats) -> ServerSeries | None:
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


def server_summary(stats: RunStats) -> dict[str, Any] | None:
    """The result JSON's ``server_metrics``, else the summary of the loaded series over the run's window
    (first send to first send + duration); None when the run has neither."""
    stored = stats.run.summary.get("server_metrics")
    if isinstance(stored, dict) and stored:
        return stored
    if not stats.run.server:
        return None
    from llmload.servermetrics.summarize import summarize

    return summarize(stats.run.server, stats.t0, stats.t0 + stats.run.duration)


def saturation(stats: RunStats) -> dict[str, Any] | None:
    """The result JSON's ``saturation`` verdict, when the run has one."""
    verdict = stats.run.summary.get("saturation")
    return verdict if isinstance(verdict, dict) else None


def number(summary: dict[str, Any] | None, key: str) -> float | None:
    """A finite number of a summary, or None (absent, ``null``, a string like ``"inf"``)."""
    value = (summary or {}).get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


#: (summary key, label, unit, scale, integer, better) of the "Server metrics" rows, in order
ROWS = (
    ("scrapes", "Scrapes during the run", "", 1.0, True, None),
    ("mean_running", "Running requests mean", "", 1.0, False, None),
    ("peak_running", "Running requests peak", "", 1.0, False, None),
    ("mean_waiting", "Waiting requests mean", "", 1.0, False, "lower"),
    ("peak_waiting", "Waiting requests peak", "", 1.0, False, "lower"),
    ("mean_kv_cache_usage", "KV-cache usage mean", "%", 100.0, False, None),
    ("peak_kv_cache_usage", "KV-cache usage peak", "%", 100.0, False, None),
    ("preemptions", "Preemptions", "", 1.0, True, "lower"),
    ("prefix_cache_hit_rate", "Prefix-cache hit rate", "%", 100.0, False, "higher"),
    ("prompt_tokens", "Server prompt tokens", "", 1.0, True, None),
    ("generation_tokens", "Server generated tokens", "", 1.0, True, None),
    ("prompt_tokens_per_s", "Server prompt throughput", "tok/s", 1.0, False, "higher"),
    ("generation_tokens_per_s", "Server output throughput", "tok/s", 1.0, False, "higher"),
    ("requests_finished", "Server finished requests", "", 1.0, True, None),
    ("mean_ttft_ms", "Server TTFT mean", "ms", 1.0, False, "lower"),
    ("mean_queue_time_ms", "Server queue time mean", "ms", 1.0, False, "lower"),
    ("mean_e2el_ms", "Server E2E latency mean", "ms", 1.0, False, "lower"),
    ("mean_itl_ms", "Server ITL mean", "ms", 1.0, False, "lower"),
    ("mean_tpot_ms", "Server TPOT mean", "ms", 1.0, False, "lower"),
)
#: the keys ``llmload compare`` adds to its headline table
COMPARE_KEYS = ("peak_running", "peak_waiting", "peak_kv_cache_usage", "preemptions", "prefix_cache_hit_rate")


def _rows(summaries: list[dict[str, Any] | None], keys: tuple[str, ...] | None = None) -> list[Row]:
    """One row per key some run has (keys prefixed ``server_``: the client's ``mean_ttft_ms`` is another)."""
    rows = []
    for key, label, unit, scale, integer, better in ROWS:
        if keys is not None and key not in keys:
            continue
        values = [number(s, key) for s in summaries]
        if any(v is not None for v in values):
            scaled = tuple(None if v is None else v * scale for v in values)
            rows.append(Row(f"server_{key}", label, unit, scaled, better, integer))
    return rows


def server_table(stats: list[RunStats], baseline: int = 0) -> Table | None:
    """Every server key some run has, one column per run; None when no run has server metrics."""
    summaries = [s.server_summary for s in stats]
    if not any(summaries):
        return None
    return Table(labels=tuple(s.run.label for s in stats), baseline=baseline, rows=tuple(_rows(summaries)))


def with_server_rows(table: Table, stats: list[RunStats]) -> Table:
    """``table`` with the :data:`COMPARE_KEYS` rows added (``llmload compare``), when some run has them."""
    extra = _rows([s.server_summary for s in stats], COMPARE_KEYS)
    return Table(table.labels, table.baseline, table.rows + tuple(extra)) if extra else table


def _about(stats: list[RunStats]) -> list[str]:
    """One line per run with server metrics: engine, scrape interval, scrape failures."""
    lines = []
    for s in stats:
        summary = s.server_summary
        if not summary:
            continue
        parts = [f"engine {summary.get('engine') or 'not recognised'}"]
        series = s.server
        if series is not None and series.interval_s > 0:
            parts.append(f"scraped every {series.interval_s:.2g} s")
        failed = summary.get("failures")
        if isinstance(failed, dict) and failed:
            parts.append("scrape failures: " + ", ".join(f"{k} {v}" for k, v in sorted(failed.items())))
        lines.append(f"{s.run.label}: {'; '.join(parts)}")
    return lines


def server_markdown(stats: list[RunStats], table: Table | None) -> list[str]:
    """The "Server metrics" section's lines; none when no run has server metrics."""
    if table is None:
        return []
    return ["## Server metrics", "", *[f"- {line}" for line in _about(stats)], "", to_markdown(table)]


def server_html(stats: list[RunStats], table: Table | None) -> str:
    """The same section as HTML; empty when no run has server metrics."""
    if table is None:
        return ""
    about = "".join(f'<p class="note">{html.escape(line)}</p>' for line in _about(stats))
    return f"<h2>Server metrics</h2>{about}{to_html(table)}"
