"""The report's multi-turn parts: the "TTFT and cached fraction by turn index" figure and one per-turn table per
run, shown only when some run has turns (``turn > 0``).

The figure draws, per run and turn row (turns from 16 on pooled, as everywhere: :data:`TURN_ROWS`), the median
TTFT with its p25-p75 band over that turn's completed requests, and the cached fraction of the prompt
(``cached_tokens / server prompt tokens``, from :mod:`llmload.metrics.conversations`) on a second axis;
``llmload compare`` overlays the runs, one colour each. The tables hold the numbers of the result JSON's
``turns`` entries.
"""

from __future__ import annotations

import numpy as np

from llmload.metrics import TURN_ROWS, TurnStats, ttft_s, turn_row
from llmload.report.parts import num, tables_html, tables_markdown
from llmload.report.stats import RunStats

#: (file stem, title) of the figure
TURNS_FIGURE = ("turns", "TTFT and cached fraction by turn index")
#: the per-turn table's columns: (header, function of a TurnStats row)
_COLUMNS = (
    ("turn", lambda t: t.label),
    ("requests", lambda t: str(t.requests)),
    ("completed", lambda t: str(t.completed)),
    ("TTFT median (ms)", lambda t: num(t.ttft.median_ms if t.completed else None)),
    ("TTFT p99 (ms)", lambda t: num(dict(t.ttft.percentiles_ms).get(99.0) if t.completed else None)),
    ("TPOT median (ms)", lambda t: num(t.tpot.median_ms if t.tpot.count else None)),
    ("ITL median (ms)", lambda t: num(t.itl.median_ms if t.itl.count else None)),
    ("prompt tokens (mean)", lambda t: num(t.mean_prompt_tokens, ".1f")),
    ("server prompt tokens (mean)", lambda t: num(t.mean_prompt_tokens_server, ".1f")),
    ("cached %", lambda t: num(None if t.cached_fraction is None else t.cached_fraction * 100.0, ".1f")),
)


def turns_of(stats: RunStats) -> tuple[TurnStats, ...]:
    """The run's per-turn rows (empty for a run without turns)."""
    extra = stats.metrics.conversations
    return extra.turns if extra is not None else ()


def any_turns(stats: list[RunStats]) -> bool:
    return any(turns_of(s) for s in stats)


def ttft_by_turn(stats: RunStats) -> dict[int, np.ndarray]:
    """TTFT (seconds) of the completed requests of each turn row, rows in order."""
    rows: dict[int, list[float]] = {}
    for r in stats.done:
        if r.turn > 0 and (ttft := ttft_s(r)) is not None:
            rows.setdefault(turn_row(r.turn), []).append(ttft)
    return {k: np.asarray(v, dtype=float) for k, v in sorted(rows.items())}


def fig_turns(plt, stats: list[RunStats]):
    """Median TTFT per turn with its p25-p75 band (left axis), cached fraction per turn (right axis, dashed)."""
    from llmload.report.plotting import colour

    fig, ax = plt.subplots(figsize=(11, 4.2))
    cx = ax.twinx()
    cached_any = False
    for i, s in enumerate(stats):
        rows = ttft_by_turn(s)
        if not rows:
            continue
        x = np.asarray(list(rows), dtype=float)
        q25, q50, q75 = (np.asarray([np.percentile(v, p) * 1000.0 for v in rows.values()]) for p in (25, 50, 75))
        ax.fill_between(x, q25, q75, color=colour(i), alpha=0.18, linewidth=0)
        ax.plot(x, q50, "o-", color=colour(i), linewidth=1.6, markersize=4, label=f"{s.run.label}: TTFT median")
        cached = [(t.turn, t.cached_fraction * 100.0) for t in turns_of(s) if t.cached_fraction is not None]
        if cached:
            cached_any = True
            cx.plot(*zip(*cached, strict=True), "s--", color=colour(i), linewidth=1.2, markersize=4, alpha=0.8,
                    label=f"{s.run.label}: cached %")
    ticks = sorted({t.turn for s in stats for t in turns_of(s)})
    ax.set_xticks(ticks, [f"{t}+" if t == TURN_ROWS else str(t) for t in ticks])
    ax.set(title="median TTFT per turn (band: p25-p75)", xlabel="turn index", ylabel="TTFT (ms)")
    ax.set_ylim(bottom=0)
    cx.set_ylim(0, 100)
    cx.set_ylabel("cached fraction of the prompt (%)" if cached_any else "cached % (not reported by the server)")
    handles = [h for a in (ax, cx) for h in a.get_legend_handles_labels()[0]]
    labels = [label for a in (ax, cx) for label in a.get_legend_handles_labels()[1]]
    if handles:
        ax.legend(handles, labels, fontsize=8, frameon=False, loc="upper left")
    fig.tight_layout()
    return fig


def turn_tables_markdown(stats: list[RunStats]) -> list[str]:
    """One Markdown table per run with turns, under a "Per turn" heading; no lines when no run has turns."""
    return tables_markdown("Per turn", stats, turns_of, _COLUMNS)


def turn_tables_html(stats: list[RunStats]) -> str:
    """The same tables as HTML, under an ``<h2>Per turn</h2>``; empty when no run has turns."""
    return tables_html("Per turn", "turns", stats, turns_of, _COLUMNS)
