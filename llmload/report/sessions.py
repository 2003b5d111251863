"""The report's per-session table (conversations and agentic sessions alike): one table per run with sessions,
a first row over every session of the run, then a row per chain type (``main``, each sub-agent type) for agentic
sessions. The numbers are :mod:`llmload.metrics.sessions`' (docs/agentic.md)."""

from __future__ import annotations

from dataclasses import dataclass

from llmload.metrics.sessions import ChainStats, SessionStats
from llmload.report.parts import num, tables_html, tables_markdown
from llmload.report.stats import RunStats


@dataclass(frozen=True)
class _Row:
    """One line of the table: the run's sessions (``chain`` None) or one chain type."""

    label: str
    sessions: SessionStats
    chain: ChainStats | None = None


def _pct(value: float | None) -> str:
    return num(None if value is None else value * 100.0, ".1f")


def _p99(chain: ChainStats | None, which: str) -> str:
    if chain is None:
        return "-"
    dist = getattr(chain, which)
    return num(dict(dist.percentiles_ms).get(99.0) if dist.count else None)


_COLUMNS = (
    ("sessions / chain", lambda r: r.label),
    ("calls", lambda r: str(r.chain.calls if r.chain else r.sessions.calls)),
    ("completed", lambda r: str(r.chain.completed if r.chain else r.sessions.calls_completed)),
    ("duration mean (s)", lambda r: "-" if r.chain else num(r.sessions.duration_s.mean)),
    ("server time mean (s)", lambda r: "-" if r.chain else num(r.sessions.server_time_s.mean)),
    ("tool/think mean (s)", lambda r: "-" if r.chain else num(r.sessions.idle_time_s.mean)),
    ("TTFT median (ms)", lambda r: num(r.chain.ttft.median_ms if r.chain and r.chain.ttft.count else None)),
    ("TTFT p99 (ms)", lambda r: _p99(r.chain, "ttft")),
    ("E2E p99 (ms)", lambda r: _p99(r.chain, "e2el")),
    ("cached %", lambda r: _pct(r.chain.cached_fraction if r.chain else r.sessions.cached_fraction)),
)


def session_rows(stats: RunStats) -> list[_Row]:
    """The run's rows (none for a run without sessions)."""
    extra = stats.metrics.conversations
    sessions = extra.sessions if extra is not None else None
    if sessions is None:
        return []
    rows = [_Row(f"{sessions.sessions} sessions ({sessions.completed} completed)", sessions)]
    return rows + [_Row(c.agent_type, sessions, c) for c in sessions.chains]


def session_tables_markdown(stats: list[RunStats]) -> list[str]:
    """One Markdown table per run with sessions, under a "Sessions" heading."""
    return tables_markdown("Sessions", stats, session_rows, _COLUMNS)


def session_tables_html(stats: list[RunStats]) -> str:
    return tables_html("Sessions", "sessions", stats, session_rows, _COLUMNS)
