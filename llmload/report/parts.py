"""The report's per-part tables: one table per run over the parts of its requests (its turns, its models),
under one heading, in Markdown and HTML; nothing when no run has such parts."""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from typing import Any

from llmload.report.stats import RunStats

#: a table's columns: (header, the cell of one part)
Columns = Sequence[tuple[str, Callable[[Any], str]]]


def num(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def tables_markdown(heading: str, stats: list[RunStats], parts_of: Callable[[RunStats], Sequence[Any]],
                    columns: Columns) -> list[str]:
    """One Markdown table per run with parts, under ``## heading``."""
    if not any(parts_of(s) for s in stats):
        return []
    lines = [f"## {heading}", ""]
    for s in stats:
        parts = parts_of(s)
        if not parts:
            continue
        lines += [f"**{s.run.label}**", "", "| " + " | ".join(h for h, _ in columns) + " |",
                  "|" + "|".join(["---:"] * len(columns)) + "|"]
        lines += ["| " + " | ".join(cell(p) for _, cell in columns) + " |" for p in parts]
        lines.append("")
    return lines


def tables_html(heading: str, css: str, stats: list[RunStats], parts_of: Callable[[RunStats], Sequence[Any]],
                columns: Columns) -> str:
    """The same tables as HTML, under an ``<h2>``."""
    if not any(parts_of(s) for s in stats):
        return ""
    out = [f"<h2>{html.escape(heading)}</h2>"]
    for s in stats:
        parts = parts_of(s)
        if not parts:
            continue
        out.append(f'<p><b>{html.escape(s.run.label)}</b></p><table class="metrics {css}"><thead><tr>')
        out += [f"<th>{html.escape(h)}</th>" for h, _ in columns]
        out.append("</tr></thead><tbody>")
        for p in parts:
            out.append("<tr>" + "".join(f'<td class="num">{html.escape(cell(p))}</td>' for _, cell in columns)
                       + "</tr>")
        out.append("</tbody></table>")
    return "".join(out)


def _models(stats: RunStats) -> list[tuple[str, Any]]:
    return list(stats.metrics.by_model.items())


#: the per-model table (``by_model``: a run whose requests named several models or LoRA adapters)
MODEL_COLUMNS: Columns = (
    ("model", lambda p: p[0] or "(none)"),
    ("completed", lambda p: str(p[1].completed)),
    ("failed", lambda p: str(p[1].failed)),
    ("cancelled", lambda p: str(p[1].cancelled)),
    ("TTFT median (ms)", lambda p: num(p[1].ttft.median_ms if p[1].completed else None)),
    ("TTFT p99 (ms)", lambda p: num(dict(p[1].ttft.percentiles_ms).get(99.0) if p[1].completed else None)),
    ("TPOT median (ms)", lambda p: num(p[1].tpot.median_ms if p[1].completed else None)),
    ("ITL median (ms)", lambda p: num(p[1].itl.median_ms if p[1].completed else None)),
    ("output tok/s", lambda p: num(p[1].output_throughput, ".1f")),
)


def model_tables_markdown(stats: list[RunStats]) -> list[str]:
    return tables_markdown("Per model", stats, _models, MODEL_COLUMNS)


def model_tables_html(stats: list[RunStats]) -> str:
    return tables_html("Per model", "models", stats, _models, MODEL_COLUMNS)
