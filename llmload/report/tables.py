"""The headline table: one column per run, relative differences against a baseline run.

    relative difference = (run - baseline) / baseline        shown as +12.3%; none when the baseline is 0

Rendered as an aligned terminal table, Markdown, CSV (full-precision values, one column of differences per
non-baseline run) and an HTML fragment (differences coloured better/worse by each metric's direction).
"""

from __future__ import annotations

import csv
import html
import io
from dataclasses import dataclass

from llmload.report.stats import RunStats


@dataclass(frozen=True, slots=True)
class Row:
    key: str
    label: str
    unit: str
    values: tuple[float | None, ...]
    #: "lower" or "higher" is better; None: neither
    better: str | None
    integer: bool = False

    @property
    def name(self) -> str:
        return f"{self.label} ({self.unit})" if self.unit else self.label


@dataclass(frozen=True, slots=True)
class Table:
    labels: tuple[str, ...]
    baseline: int
    rows: tuple[Row, ...]

    def diff(self, row: Row, i: int) -> float | None:
        """Relative difference of run ``i`` against the baseline; None for the baseline itself or a 0 base."""
        base, value = row.values[self.baseline], row.values[i]
        if i == self.baseline or base is None or value is None or base == 0:
            return None
        return (value - base) / abs(base)

    def row(self, key: str) -> Row:
        for row in self.rows:
            if row.key == key:
                return row
        raise KeyError(key)


def build_table(stats: list[RunStats], baseline: int = 0) -> Table:
    """Rows in the issue's order: duration, throughput, TTFT, TPOT, TPOT excl. 1st ITL, ITL, E2E, goodput,
    failures. Latency statistics come from :func:`llmload.metrics.compute_metrics` over the records."""
    ms = [s.metrics for s in stats]
    rows: list[Row] = []

    def add(key: str, label: str, unit: str, values, better: str | None, integer: bool = False) -> None:
        rows.append(Row(key, label, unit, tuple(None if v is None else float(v) for v in values), better, integer))

    add("duration", "Duration", "s", [m.duration for m in ms], "lower")
    add("completed", "Completed requests", "", [m.completed for m in ms], "higher", True)
    add("request_throughput", "Request throughput", "req/s", [m.request_throughput for m in ms], "higher")
    add("output_throughput", "Output token throughput", "tok/s", [m.output_throughput for m in ms], "higher")
    add("total_token_throughput", "Total token throughput", "tok/s", [m.total_token_throughput for m in ms],
        "higher")
    for name, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("tpot_steady", "TPOT excl. 1st ITL"),
                        ("itl", "ITL"), ("e2el", "E2E latency")):
        # a run without such values (a pooling run has no first token) shows "-", not 0
        dists = [d if (d := getattr(m, name)).count else None for m in ms]
        if not any(dists):
            continue
        add(f"mean_{name}_ms", f"{label} mean", "ms", [d and d.mean_ms for d in dists], "lower")
        add(f"median_{name}_ms", f"{label} median", "ms", [d and d.median_ms for d in dists], "lower")
        add(f"p99_{name}_ms", f"{label} p99", "ms", [d and dict(d.percentiles_ms).get(99.0, 0.0) for d in dists],
            "lower")
        if name == "ttft":
            add("std_ttft_ms", "TTFT std", "ms", [d and d.std_ms for d in dists], "lower")
    if any(len(s.itl1) for s in stats):
        add("median_itl1_ms", "First ITL (ITL₁) median", "ms",
            [float(_median(s.itl1)) * 1000.0 for s in stats], "lower")
    goodput = [s.goodput_value() for s in stats]
    if any(g is not None for g in goodput):
        add("request_goodput", "Goodput", "req/s", goodput, "higher")
    deployments = [s.deployment for s in stats]
    if any(d.described for d in deployments):
        add("output_throughput_per_gpu", "Output token throughput per GPU", "tok/s",
            [d.per_gpu(m.output_throughput) for d, m in zip(deployments, ms, strict=True)], "higher")
    if any(d.gpu_hour_cost is not None for d in deployments):
        for key, label, attr in (("cost_per_million_output_tokens", "Cost per 1M output tokens", "output_throughput"),
                                 ("cost_per_million_total_tokens", "Cost per 1M total tokens",
                                  "total_token_throughput")):
            add(key, label, "USD", [d.cost_per_million(getattr(m, attr)) for d, m in zip(deployments, ms, strict=True)],
                "lower")
    add("failed", "Failed requests", "", [m.failed for m in ms], "lower", True)
    if any(m.cut_off for m in ms):
        add("cut_off", "Cut off by end of run", "", [m.cut_off for m in ms], "lower", True)
    return Table(labels=tuple(s.run.label for s in stats), baseline=baseline, rows=tuple(rows))


def _median(values) -> float:
    import numpy as np

    return float(np.median(values)) if len(values) else 0.0


def format_value(row: Row, value: float | None) -> str:
    if value is None:
        return "-"
    if row.integer:
        return f"{value:.0f}"
    return f"{value:.2f}"


def format_diff(diff: float | None) -> str:
    return "" if diff is None else f"{diff * 100:+.1f}%"


def _cells(table: Table) -> tuple[list[str], list[list[str]]]:
    header = ["Metric"]
    for i, label in enumerate(table.labels):
        header.append(f"{label} (baseline)" if len(table.labels) > 1 and i == table.baseline else label)
    body = []
    for row in table.rows:
        cells = [row.name]
        for i, value in enumerate(row.values):
            text = format_value(row, value)
            diff = table.diff(row, i)
            if diff is not None:
                text += f" ({format_diff(diff)})"
            cells.append(text)
        body.append(cells)
    return header, body


def to_terminal(table: Table) -> str:
    header, body = _cells(table)
    widths = [max(len(r[c]) for r in [header, *body]) for c in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(x.ljust(w) if c == 0 else x.rjust(w)
                         for c, (x, w) in enumerate(zip(cells, widths, strict=True)))

    return "\n".join([line(header), "  ".join("-" * w for w in widths), *(line(cells) for cells in body)])


def to_markdown(table: Table) -> str:
    header, body = _cells(table)

    def esc(text: str) -> str:
        return text.replace("|", "\\|")

    lines = ["| " + " | ".join(esc(h) for h in header) + " |",
             "|" + "|".join([":---"] + ["---:"] * (len(header) - 1)) + "|"]
    lines += ["| " + " | ".join(esc(c) for c in cells) + " |" for cells in body]
    return "\n".join(lines) + "\n"


def to_csv(table: Table) -> str:
    """Full-precision values; differences as fractions (0.123 = +12.3%)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    base = table.labels[table.baseline]
    others = [i for i in range(len(table.labels)) if i != table.baseline]
    writer.writerow(["metric", "key", "unit", *table.labels, *[f"{table.labels[i]} vs {base}" for i in others]])
    for row in table.rows:
        values = ["" if v is None else repr(v) for v in row.values]
        diffs = ["" if (d := table.diff(row, i)) is None else repr(d) for i in others]
        writer.writerow([row.label, row.key, row.unit, *values, *diffs])
    return out.getvalue()


def to_html(table: Table) -> str:
    header, _ = _cells(table)
    parts = ['<table class="metrics"><thead><tr>']
    parts += [f"<th>{html.escape(h)}</th>" for h in header]
    parts.append("</tr></thead><tbody>")
    for row in table.rows:
        parts.append(f"<tr><td>{html.escape(row.name)}</td>")
        for i, value in enumerate(row.values):
            diff = table.diff(row, i)
            cell = html.escape(format_value(row, value))
            if diff is not None:
                cls = "same"
                if row.better and abs(diff) >= 0.005:
                    good = (diff < 0) == (row.better == "lower")
                    cls = "better" if good else "worse"
                cell += f' <span class="{cls}">{html.escape(format_diff(diff))}</span>'
            parts.append(f'<td class="num">{cell}</td>')
        parts.append("</tr>")
    parts.append("</tbody></table>")
    return "".join(parts)
