"""The "Server metrics" table: the result JSON's ``server_metrics`` (what ``llmload bench`` printed), or the
summary of the loaded series over the run's window when the JSON has none. ``llmload compare`` also adds the
keys that tell runs apart most (:data:`COMPARE_KEYS`) to its headline table."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

from llmload.report.server import number
from llmload.report.tables import Row, Table, to_html, to_markdown

if TYPE_CHECKING:
    from llmload.report.stats import RunStats


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
