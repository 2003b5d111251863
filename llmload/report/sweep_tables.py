"""The text of a sweep report: the answer sentence, one table row per point, the answers side by side.

    answer_text        "Highest request rate meeting ttft<=500 ms, tpot<=50 ms for >=95% of requests: 3.38 req/s
                       (met at 3.38, missed at 3.75; precision 0.5)", or why there is none
    point_table        one row per point: load offered and achieved, throughput, latencies, goodput, failures,
                       client-limited and saturated flags, notes (a client-limited point is never the answer)
    answers_table      ``llmload compare``: each sweep's answer, its bracket and the difference to the baseline
    markdown/html/terminal/points_csv   the renderings
"""

from __future__ import annotations

import csv
import html
import io
from collections.abc import Mapping, Sequence
from typing import Any

from llmload.report.sweep_figures import latency, number, offered, rows_of

#: dimension -> (what it is called in a sentence, its unit)
DIMENSIONS = {"request_rate": ("request rate", "req/s"), "max_concurrency": ("concurrency", "")}
CLIENT_LIMITED = "client-limited: not taken as the answer"
_LIMITS = {
    "slo": "limited by the SLO: the next higher load missed it",
    "saturation": "limited by saturation: the server saturated above this load",
    "client": "limited by the client: it could not offer more load (client-limited points are not taken as the "
              "answer), so the server may sustain more",
    "max_load": "limited by the sweep's highest load: it still met the SLO, so the server may sustain more",
}
#: limited_by of an answer that was not met: why even the lowest load missed, when it was not the SLO
_MISSED = {
    "saturation": "the server was saturated at the lowest load tried",
    "client": "the client was the bottleneck at the lowest load tried (client-limited points are not taken as "
              "the answer): the server was not measured",
}
#: (header, csv key) of a point row, after the offered load
_COLUMNS = (("achieved (req/s)", "achieved_rate"), ("output (tok/s)", "output_throughput"),
            ("TTFT median (ms)", "ttft_median_ms"), ("TTFT p99 (ms)", "ttft_p99_ms"),
            ("TPOT median (ms)", "tpot_median_ms"), ("TPOT p99 (ms)", "tpot_p99_ms"),
            ("ITL p99 (ms)", "itl_p99_ms"), ("E2E median (ms)", "e2el_median_ms"),
            ("per GPU (tok/s)", "output_throughput_per_gpu"), ("per user (tok/s)", "output_throughput_per_user"),
            ("$ per 1M output", "cost_per_million_output_tokens"))

Cells = tuple[list[str], list[list[str]]]


def dimension(data: Mapping[str, Any]) -> str:
    return str(data.get("dimension") or "request_rate")


def fmt(value: Any) -> str:
    """A number for people: 3 significant digits below 100, whole above; "-" when there is none."""
    v = number(value)
    if v is None:
        return "-"
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"


def load_text(value: Any, dim: str) -> str:
    """``3.38 req/s`` on a rate sweep, ``12`` on a concurrency sweep; "inf" for an unlimited load."""
    if number(value) is None:
        return "inf"
    unit = DIMENSIONS.get(dim, (dim, ""))[1]
    return f"{fmt(value)} {unit}".strip()


def slo_text(data: Mapping[str, Any]) -> str:
    """``ttft<=500 ms, tpot<=50 ms for >=95% of requests``; "" without SLO."""
    slo = data.get("slo")
    if not isinstance(slo, dict) or not slo:
        return ""
    text = ", ".join(f"{metric}<={value:g} ms" for metric, value in slo.items() if number(value) is not None)
    target = number(data.get("goodput_target"))
    return text + (f" for >={target:.0%} of requests" if target is not None else " for every request")


def _precision(data: Mapping[str, Any]) -> str | None:
    """The search's precision as written (``"0.5"``, ``"10%"``, or a number), the answer's before the sweep's."""
    answer = data.get("answer") if isinstance(data.get("answer"), dict) else {}
    for value in (answer.get("precision"), data.get("precision")):
        if isinstance(value, str) and value.strip():
            return value.strip()
        if number(value) is not None:
            return f"{value:g}"
    return None


def _row_at(data: Mapping[str, Any], index: Any) -> dict[str, Any] | None:
    return next((r for r in rows_of(data) if index is not None and r.get("index") == index), None)


def _lowest_missed(data: Mapping[str, Any], answer: Mapping[str, Any]) -> tuple[Any, Any]:
    """The lowest load tried and its goodput: the answer's upper point, else the lowest non-ceiling point."""
    row = _row_at(data, answer.get("upper_point"))
    if row is None:
        dim = dimension(data)
        tried = [r for r in rows_of(data) if offered(r, dim) is not None]
        row = min(tried, key=lambda r: offered(r, dim) or 0.0, default=None)
    if row is None:
        return answer.get("upper"), None
    load = answer.get("upper") if number(answer.get("upper")) is not None else offered(row, dimension(data))
    return load, row.get("goodput")


def answer_text(data: Mapping[str, Any]) -> str:
    """The sweep's answer in one sentence (see the module docstring), or why it has none."""
    answer = data.get("answer")
    dim = dimension(data)
    name = DIMENSIONS.get(dim, (dim, ""))[0]
    if not isinstance(answer, dict):
        if not slo_text(data):
            return "No SLO: the sweep measured its points without searching for an answer."
        return "No answer: the sweep was interrupted first." if data.get("interrupted") else "No answer recorded."
    if answer.get("met"):
        bracket = [f"met at {fmt(answer.get('lower'))}" if number(answer.get("lower")) is not None else None,
                   f"missed at {fmt(answer.get('upper'))}" if number(answer.get("upper")) is not None
                   else "no load tried missed"]
        precision = _precision(data)
        tail = f"; precision {precision}" if precision is not None else ""
        return (f"Highest {name} meeting {slo_text(data) or 'the SLO'}: {load_text(answer.get('value'), dim)} "
                f"({', '.join(b for b in bracket if b)}{tail})")
    load, goodput = _lowest_missed(data, answer)
    g = number(goodput)
    return (f"No {name} tried met the SLO: even {load_text(load, dim)} (the lowest tried) had goodput "
            f"{'-' if g is None else f'{g:.1%}'}")


def answer_notes(data: Mapping[str, Any]) -> list[str]:
    """What limited the answer and the sweep's own reason, when it gives one."""
    answer = data.get("answer")
    if not isinstance(answer, dict):
        return []
    notes = []
    limits = _LIMITS if answer.get("met") else _MISSED
    if answer.get("limited_by") in limits:
        notes.append(limits[str(answer["limited_by"])])
    if answer.get("reason"):
        notes.append(f"reason: {answer['reason']}")
    return notes


def row_notes(row: Mapping[str, Any], data: Mapping[str, Any]) -> list[str]:
    """The point's marks: ceiling, the answer's bracket, client-limited (never the answer), saturated."""
    answer = data.get("answer") if isinstance(data.get("answer"), dict) else {}
    notes = []
    if row.get("role") == "ceiling":
        notes.append("ceiling: unlimited rate")
    if answer.get("met") and row.get("index") == answer.get("lower_point"):
        notes.append("answer: highest load that met")
    if row.get("index") is not None and row.get("index") == answer.get("upper_point"):
        notes.append("lowest load that missed")
    if row.get("client_limited"):
        reason = row.get("client_reason")
        notes.append(CLIENT_LIMITED + (f" ({reason})" if reason else ""))
    if row.get("saturated"):
        notes.append("saturated" + (", run stopped" if row.get("stopped_on_saturation") else ""))
    return notes


def _goodput_cell(row: Mapping[str, Any]) -> str:
    g = number(row.get("goodput"))
    if g is None:
        return "-"
    mark = {True: " ✓", False: " ✗"}.get(row.get("meets_target"), "")
    return f"{g:.1%}{mark}"


def _failures(row: Mapping[str, Any]) -> str:
    failed, cut = int(number(row.get("failed")) or 0), int(number(row.get("cut_off")) or 0)
    return f"{failed}" + (f" +{cut} cut off" if cut else "")


def _values(row: Mapping[str, Any]) -> dict[str, float | None]:
    """The row's numbers under the CSV keys of :data:`_COLUMNS`."""
    out: dict[str, float | None] = {"achieved_rate": number(row.get("achieved_rate")),
                                    "output_throughput": number(row.get("output_throughput"))}
    for metric, stat in (("ttft", "median"), ("ttft", "p99"), ("tpot", "median"), ("tpot", "p99"),
                         ("itl", "p99"), ("e2el", "median")):
        out[f"{metric}_{stat}_ms"] = latency(row, metric, stat)
    for key in ("output_throughput_per_gpu", "output_throughput_per_user", "cost_per_million_output_tokens"):
        out[key] = number(row.get(key))  # sweeps since --gpus (issue 24); older ones show "-"
    return out


def offered_header(data: Mapping[str, Any]) -> str:
    return "max concurrency" if dimension(data) == "max_concurrency" else "offered (req/s)"


def point_table(data: Mapping[str, Any]) -> Cells:
    """Header and one row of display cells per point, in run order."""
    header = ["#", "role", offered_header(data), *(h for h, _ in _COLUMNS), "goodput", "failed",
              "client-limited", "saturated", "notes"]
    body = []
    for row in sorted(rows_of(data), key=lambda r: number(r.get("index")) or 0.0):
        load = offered(row, dimension(data))
        values = _values(row)
        body.append([str(row.get("index", "-")), str(row.get("role", "-")), "inf" if load is None else fmt(load),
                     *(fmt(values[key]) for _, key in _COLUMNS), _goodput_cell(row), _failures(row),
                     "yes" if row.get("client_limited") else "no", "yes" if row.get("saturated") else "no",
                     "; ".join(row_notes(row, data))])
    return header, body


def answers_table(sweeps: Sequence[tuple[str, Mapping[str, Any]]], baseline: int) -> Cells:
    """One row per sweep: its answer, met, bracket, precision, what limited it, vs the baseline's answer."""
    header = ["sweep", "answer", "vs baseline", "met", "met at", "missed at", "precision", "limited by", "SLO",
              "points", "$ per 1M output there"]
    base = sweeps[baseline][1].get("answer") or {}
    base_value = number(base.get("value")) if base.get("met") else None
    body = []
    for i, (label, data) in enumerate(sweeps):
        answer = data.get("answer") if isinstance(data.get("answer"), dict) else {}
        value = number(answer.get("value")) if answer.get("met") else None
        diff = "" if i == baseline or value is None or not base_value else f"{(value - base_value) / base_value:+.1%}"
        body.append([label + (" (baseline)" if i == baseline else ""),
                     "-" if value is None else load_text(value, dimension(data)), diff,
                     "-" if not answer else ("yes" if answer.get("met") else "no"), fmt(answer.get("lower")),
                     fmt(answer.get("upper")), _precision(data) or "-",
                     str(answer.get("limited_by") or "-"), slo_text(data) or "none", str(len(rows_of(data))),
                     fmt(answer.get("cost_per_million_output_tokens") if answer.get("met") else None)])
    return header, body


def _is_number(cell: str) -> bool:
    text = cell.removesuffix(" ✓").removesuffix(" ✗").removesuffix(" req/s").removesuffix("%")
    text = text.split(" +")[0]
    if text in ("", "-", "inf"):
        return True
    try:
        float(text)
    except ValueError:
        return False
    return True


def numeric_columns(cells: Cells) -> list[bool]:
    """Which columns hold numbers only (right-aligned); text columns are left-aligned."""
    header, body = cells
    return [all(_is_number(row[c]) for row in body) for c in range(len(header))]


def markdown(cells: Cells) -> str:
    header, body = cells

    def line(row: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in row) + " |"

    rule = "|" + "|".join("---:" if num else ":---" for num in numeric_columns(cells)) + "|"
    return "\n".join([line(header), rule, *map(line, body)])


def terminal(cells: Cells) -> str:
    header, body = cells
    widths = [max(len(r[c]) for r in [header, *body]) for c in range(len(header))]
    numeric = numeric_columns(cells)
    lines = [header, ["-" * w for w in widths], *body]
    return "\n".join("  ".join(c.rjust(w) if num else c.ljust(w) for c, w, num in zip(row, widths, numeric, strict=True))
                     .rstrip() for row in lines)


def html_table(cells: Cells, limited: Sequence[bool] = ()) -> str:
    """An HTML table; rows flagged in ``limited`` get the ``limited`` class (client-limited points)."""
    header, body = cells
    numeric = numeric_columns(cells)
    parts = ['<table class="metrics"><thead><tr>', *(f"<th>{html.escape(h)}</th>" for h in header),
             "</tr></thead><tbody>"]
    for k, row in enumerate(body):
        parts.append('<tr class="limited">' if k < len(limited) and limited[k] else "<tr>")
        parts += [f'<td class="num">{html.escape(c)}</td>' if num else f"<td>{html.escape(c)}</td>"
                  for c, num in zip(row, numeric, strict=True)]
        parts.append("</tr>")
    parts.append("</tbody></table>")
    return "".join(parts)


def points_csv(sweeps: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    """Every point of every sweep, full-precision numbers, one row each."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["sweep", "index", "role", "dimension", "offered", *(k for _, k in _COLUMNS), "goodput",
                     "meets_target", "failed", "cut_off", "client_limited", "saturated", "notes"])
    for label, data in sweeps:
        for row in sorted(rows_of(data), key=lambda r: number(r.get("index")) or 0.0):
            load = offered(row, dimension(data))
            values = _values(row)
            writer.writerow([label, row.get("index"), row.get("role"), dimension(data),
                             "inf" if load is None else repr(load),
                             *("" if values[k] is None else repr(values[k]) for _, k in _COLUMNS),
                             "" if number(row.get("goodput")) is None else repr(float(row["goodput"])),
                             "" if row.get("meets_target") is None else str(bool(row["meets_target"])).lower(),
                             row.get("failed", 0), row.get("cut_off", 0), str(bool(row.get("client_limited"))).lower(),
                             str(bool(row.get("saturated"))).lower(), "; ".join(row_notes(row, data))])
    return out.getvalue()
