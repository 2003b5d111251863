"""Matplotlib figures of sweeps (PNG, Agg backend), one colour per sweep, several sweeps overlaid:

    sweep_latency     TTFT, TPOT, ITL and E2E latency (one panel each): median (solid), p90 (dashed, when the
                      rows have it) and p99 (dash-dot) versus the *achieved* request rate, whatever the sweep
                      varied; a dotted horizontal line for each SLO on its metric's panel
    sweep_throughput  goodput (fraction of requests meeting every SLO, with the goodput target; left out when no
                      sweep had an SLO), output tokens/s, and the achieved request throughput (with achieved =
                      offered dotted on rate sweeps), one panel each, versus the *offered* load: the offered
                      request rate, or the max concurrency of a concurrency sweep.
                      The unlimited-rate ceiling sits at the right edge, at the tick "inf". A met answer is a
                      vertical line, its bracket (highest load that met .. lowest that missed) shaded

Points the client limited are drawn hollow with a red edge, saturated points with an 'x', the ceiling with a
diamond. :func:`write_sweep_figures` also writes ``sweep_figures.json``: per figure, every series plotted
(sweep label, panel, statistic, x, y) and every reference line, the numbers behind the pictures.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from llmload.report.plotting import colour

#: (file stem, title) of each figure, in report order
SWEEP_FIGURES = (
    ("sweep_latency", "Latency versus achieved request rate"),
    ("sweep_throughput", "Goodput and throughput versus offered load"),
)
#: the plotted series, written next to the PNGs
SERIES_FILE = "sweep_figures.json"
INF_TICK = "inf"
_PANELS = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2E latency"))
#: (statistic, line style, marker, line width)
_STATS = (("median", "-", "o", 1.7), ("p90", "--", None, 1.0), ("p99", "-.", "^", 1.2))
_RED = "#d62728"
_GREY = "#444444"
_KIND_LABELS = {"client": "client-limited", "saturated": "saturated", "ceiling": "ceiling (unlimited rate)"}

Sweeps = list[tuple[str, Mapping[str, Any]]]


def number(value: Any) -> float | None:
    """A finite number as float; None for anything else (None, "inf", NaN, bool, text)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def rows_of(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The sweep's rows (``points``), only the dicts."""
    points = data.get("points")
    return [row for row in points if isinstance(row, dict)] if isinstance(points, list) else []


def latency(row: Mapping[str, Any], metric: str, stat: str) -> float | None:
    """``row["<metric>_ms"][stat]`` (the median falls back on p50); None when the row has no such value."""
    block = row.get(f"{metric}_ms")
    if not isinstance(block, dict):
        return None
    value = number(block.get(stat))
    return number(block.get("p50")) if value is None and stat == "median" else value


def offered(row: Mapping[str, Any], dimension: str) -> float | None:
    """The load the point offered on the sweep's dimension; None for an unlimited one ("inf")."""
    return number(row.get("max_concurrency" if dimension == "max_concurrency" else "offered_rate"))


class _Recorder:
    """Plots through matplotlib and keeps what it plotted, per figure, for ``sweep_figures.json``."""

    def __init__(self) -> None:
        self.figures: dict[str, dict[str, list[dict[str, Any]]]] = {}

    def _figure(self, figure: str) -> dict[str, list[dict[str, Any]]]:
        return self.figures.setdefault(figure, {"series": [], "lines": []})

    def plot(self, ax, figure: str, xs: list[float], ys: list[float], info: dict[str, Any], **style) -> None:
        ax.plot(xs, ys, **style)
        self._figure(figure)["series"].append({**info, "x": list(xs), "y": list(ys)})

    def line(self, figure: str, **info: Any) -> None:
        self._figure(figure)["lines"].append(info)


def _mark(ax, rows: list[dict[str, Any]], xs: list[float], ys: list[float], c: str) -> set[str]:
    """Overlay the markers of client-limited, saturated and ceiling points; the kinds drawn."""
    kinds: set[str] = set()
    for row, x, y in zip(rows, xs, ys, strict=True):
        if row.get("client_limited"):
            ax.plot([x], [y], "o", markersize=10, markerfacecolor="none", markeredgecolor=_RED, markeredgewidth=1.6)
            kinds.add("client")
        if row.get("saturated"):
            ax.plot([x], [y], "x", markersize=9, color=_GREY, markeredgewidth=1.8)
            kinds.add("saturated")
        if row.get("role") == "ceiling":
            ax.plot([x], [y], "D", markersize=8, markerfacecolor="none", markeredgecolor=c, markeredgewidth=1.4)
            kinds.add("ceiling")
    return kinds


def _kind_handles(kinds: Iterable[str]) -> list:
    from matplotlib.lines import Line2D

    style = {"client": {"marker": "o", "markerfacecolor": "none", "markeredgecolor": _RED, "markersize": 9},
             "saturated": {"marker": "x", "color": _GREY, "markersize": 8},
             "ceiling": {"marker": "D", "markerfacecolor": "none", "markeredgecolor": _GREY, "markersize": 7}}
    return [Line2D([], [], linestyle="none", label=_KIND_LABELS[k], **style[k]) for k in _KIND_LABELS if k in kinds]


def _sweep_handles(sweeps: Sweeps) -> list:
    from matplotlib.lines import Line2D

    return [Line2D([], [], color=colour(i), linewidth=2, label=label) for i, (label, _) in enumerate(sweeps)]


def _figure_legend(fig, handles: list) -> None:
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 5), frameon=False, fontsize=8,
               bbox_to_anchor=(0.5, 0.0))
    fig.tight_layout(rect=(0, 0.02 + 0.03 * math.ceil(len(handles) / 5), 1, 1))


def _slo_lines(ax, rec: _Recorder, sweeps: Sweeps, metric: str) -> bool:
    """The SLOs on ``metric``: one line per value, grey when one sweep or shared, else the sweep's colour."""
    owners: dict[float, list[int]] = {}
    for i, (_, data) in enumerate(sweeps):
        slo = data.get("slo")
        value = number(slo.get(metric)) if isinstance(slo, dict) else None
        if value is not None:
            owners.setdefault(value, []).append(i)
    for value, who in owners.items():
        c = colour(who[0]) if len(who) == 1 and len(sweeps) > 1 else _GREY
        ax.axhline(value, color=c, linestyle=":", linewidth=1.4)
        ax.annotate(f"SLO {value:g} ms", (1.0, value), xycoords=("axes fraction", "data"), xytext=(-4, 3),
                    textcoords="offset points", ha="right", fontsize=8, color=c)
        rec.line("sweep_latency", kind="slo", panel=metric, y=value, sweeps=[sweeps[i][0] for i in who])
    return bool(owners)


def _latency_panel(ax, rec: _Recorder, sweeps: Sweeps, metric: str, name: str) -> tuple[set[str], set[str]]:
    """One metric's panel; the statistics and the marker kinds it drew."""
    stats: set[str] = set()
    kinds: set[str] = set()
    ys_all: list[float] = []
    for i, (label, data) in enumerate(sweeps):
        rows = sorted((r for r in rows_of(data) if number(r.get("achieved_rate")) is not None),
                      key=lambda r: number(r.get("achieved_rate")) or 0.0)
        for stat, style, marker, width in _STATS:
            pts = [(r, number(r["achieved_rate"]), y) for r in rows if (y := latency(r, metric, stat)) is not None]
            if not pts:
                continue
            keep, xs, ys = [p[0] for p in pts], [float(p[1] or 0.0) for p in pts], [p[2] for p in pts]
            rec.plot(ax, "sweep_latency", xs, ys, {"sweep": label, "panel": metric, "stat": stat},
                     color=colour(i), linestyle=style, marker=marker, markersize=4, linewidth=width)
            stats.add(stat)
            ys_all += ys
            if stat != "p90":
                kinds |= _mark(ax, keep, xs, ys, colour(i))
    has_slo = _slo_lines(ax, rec, sweeps, metric)
    if not ys_all:
        ax.text(0.5, 0.5, "no latencies (no request completed)", transform=ax.transAxes, ha="center",
                va="center", color="#777777")
    elif min(ys_all) > 0 and max(ys_all) > 20 * min(ys_all):
        ax.set_yscale("log")
    ax.set(title=name, xlabel="achieved request rate (req/s)", ylabel=f"{name} (ms)")
    if has_slo:
        stats.add("slo")
    return stats, kinds


def fig_latency(plt, sweeps: Sweeps, rec: _Recorder):
    """TTFT, TPOT, ITL and E2E latency versus the achieved rate, the sweeps overlaid."""
    from matplotlib.lines import Line2D

    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    stats: set[str] = set()
    kinds: set[str] = set()
    for ax, (metric, name) in zip(axes.flat, _PANELS, strict=True):
        drawn, marked = _latency_panel(ax, rec, sweeps, metric, name)
        stats |= drawn
        kinds |= marked
    handles = _sweep_handles(sweeps)
    handles += [Line2D([], [], color=_GREY, linestyle=style, marker=marker, markersize=4, linewidth=width,
                       label=stat) for stat, style, marker, width in _STATS if stat in stats]
    if "slo" in stats:
        handles.append(Line2D([], [], color=_GREY, linestyle=":", linewidth=1.4, label="SLO"))
    _figure_legend(fig, handles + _kind_handles(kinds))
    return fig


def _inf_position(sweeps: Sweeps) -> float | None:
    """Where the unlimited loads go: past the highest finite offered load; None when no row is unlimited."""
    finite, unlimited = [], False
    for _, data in sweeps:
        dim = str(data.get("dimension") or "request_rate")
        for row in rows_of(data):
            value = offered(row, dim)
            unlimited |= value is None
            if value is not None:
                finite.append(value)
    if not unlimited:
        return None
    top = max(finite, default=0.0)
    return top * 1.25 if top > 0 else 1.0


def _inf_ticks(ax, inf_x: float) -> None:
    """Label the unlimited position "inf" among the finite ticks."""
    left = ax.get_xlim()[0]
    ax.set_xlim(left, inf_x + 0.08 * (inf_x - left))
    ticks = [t for t in ax.get_xticks() if left <= t <= inf_x * 0.88]
    ax.set_xticks([*ticks, inf_x], [f"{t:g}" for t in ticks] + [INF_TICK])


def _answer(axes: list, rec: _Recorder, label: str, data: Mapping[str, Any], c: str) -> bool:
    """The met answer as a vertical line (its value written at the top), its bracket shaded; whether drawn."""
    answer = data.get("answer")
    value = number(answer.get("value")) if isinstance(answer, dict) and answer.get("met") else None
    if value is None:
        return False
    lower, upper = number(answer.get("lower")), number(answer.get("upper"))
    for ax in axes:
        ax.axvline(value, color=c, linewidth=1.8, alpha=0.9)
        if lower is not None and upper is not None and upper > lower:
            ax.axvspan(lower, upper, color=c, alpha=0.12, linewidth=0)
    axes[0].annotate(f"{value:.3g}", (value, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -11),
                     textcoords="offset points", fontsize=8, color=c, fontweight="bold")
    rec.line("sweep_throughput", kind="answer", sweep=label, x=value, bracket=[lower, upper])
    return True


def _targets(ax, rec: _Recorder, sweeps: Sweeps) -> None:
    for value in sorted({v for _, d in sweeps if (v := number(d.get("goodput_target"))) is not None}):
        ax.axhline(value, color=_GREY, linestyle=":", linewidth=1.4)
        ax.annotate(f"target {value:.0%}", (0.0, value), xycoords=("axes fraction", "data"), xytext=(4, -10),
                    textcoords="offset points", fontsize=8, color=_GREY)
        rec.line("sweep_throughput", kind="goodput_target", y=value)


def _throughput_sweep(axes: dict, rec: _Recorder, i: int, label: str, data: Mapping[str, Any],
                      inf_x: float | None) -> set[str]:
    """One sweep's curves on the goodput (if any), tokens/s and requests/s panels; the marker kinds drawn."""
    dim = str(data.get("dimension") or "request_rate")
    finite = sorted(((x, row) for row in rows_of(data) if (x := offered(row, dim)) is not None),
                    key=lambda p: p[0])
    unlimited = [(inf_x, row) for row in rows_of(data) if offered(row, dim) is None and inf_x is not None]
    kinds: set[str] = set()
    c = colour(i)
    for key in ("goodput", "output_throughput", "request_throughput"):
        if key not in axes:
            continue
        # the unlimited-rate point stands apart: no line joins it to the finite rates (nothing was measured between)
        for pts, line in ((finite, 1.5), (unlimited, 0.0)):
            sel = [(float(x), row, y) for x, row in pts if (y := number(row.get(key))) is not None]
            if not sel:
                continue
            xs, rows, ys = [p[0] for p in sel], [p[1] for p in sel], [p[2] for p in sel]
            info = {"sweep": label, "panel": key, "dimension": dim, **({} if line else {"stat": "unlimited"})}
            rec.plot(axes[key], "sweep_throughput", xs, ys, info,
                     color=c, marker="o", markersize=4, linewidth=line, linestyle="-" if line else "none")
            kinds |= _mark(axes[key], rows, xs, ys, c)
    if _answer(list(axes.values()), rec, label, data, c):
        kinds.add("answer")
    return kinds


def _offered_label(sweeps: Sweeps) -> str:
    dims = {str(d.get("dimension") or "request_rate") for _, d in sweeps}
    names = {"request_rate": "offered request rate (req/s)", "max_concurrency": "max concurrency"}
    return " / ".join(names.get(d, d) for d in sorted(dims, reverse=True))


def _offered_diagonal(ax, sweeps: Sweeps) -> bool:
    """On rate sweeps, achieved = offered as a dotted line: where a curve leaves it the rate was not held."""
    top = max((x for _, d in sweeps if str(d.get("dimension") or "request_rate") == "request_rate"
               for r in rows_of(d) if (x := offered(r, "request_rate")) is not None), default=None)
    if top is None:
        return False
    ax.plot([0.0, top], [0.0, top], color=_GREY, linestyle=":", linewidth=1.2)
    return True


def fig_throughput(plt, sweeps: Sweeps, rec: _Recorder):
    """Goodput, output tokens/s and request throughput versus the offered load, the answers marked."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    goodput = any(number(r.get("goodput")) is not None for _, d in sweeps for r in rows_of(d))
    keys = ("goodput", "output_throughput", "request_throughput")[0 if goodput else 1:]
    fig, grid = plt.subplots(len(keys), 1, figsize=(11, 2.9 * len(keys) + 1.0), sharex=True, squeeze=False)
    axes = dict(zip(keys, grid[:, 0], strict=True))
    if goodput:
        axes["goodput"].set(title="goodput: requests meeting every SLO", ylabel="fraction of requests",
                            ylim=(0, 1.05))
        _targets(axes["goodput"], rec, sweeps)
    inf_x = _inf_position(sweeps)
    kinds: set[str] = set()
    for i, (label, data) in enumerate(sweeps):
        kinds |= _throughput_sweep(axes, rec, i, label, data, inf_x)
    diagonal = _offered_diagonal(axes["request_throughput"], sweeps)
    note = "" if goodput else " (no SLO: goodput not judged)"
    axes["output_throughput"].set(title=f"output token throughput{note}", ylabel="tokens/s")
    axes["request_throughput"].set(title="achieved request throughput", ylabel="requests/s",
                                   xlabel=_offered_label(sweeps))
    for key in ("output_throughput", "request_throughput"):
        axes[key].set_ylim(bottom=0)
    if inf_x is not None:
        _inf_ticks(axes["request_throughput"], inf_x)
    handles = _sweep_handles(sweeps)
    if diagonal:
        handles.append(Line2D([], [], color=_GREY, linestyle=":", linewidth=1.2, label="achieved = offered"))
    if "answer" in kinds:
        handles.append(Patch(facecolor=_GREY, alpha=0.25, edgecolor=_GREY, label="answer (bracket shaded)"))
    _figure_legend(fig, handles + _kind_handles(kinds))
    return fig


def write_sweep_figures(sweeps: list[tuple[str, dict]], out_dir: Path, dpi: int = 100) -> list[Path]:
    """Draw the sweep figures of ``(label, sweep.json data)`` pairs, one colour per sweep, into ``out_dir``;
    returns the PNGs' paths in report order. ``out_dir/sweep_figures.json`` gets the series plotted."""
    from llmload.report.plotting import pyplot

    plt = pyplot()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rec = _Recorder()
    simulated = any(bool(data.get("simulated")) for _, data in sweeps)
    paths = []
    for (name, title), maker in zip(SWEEP_FIGURES, (fig_latency, fig_throughput), strict=True):
        fig = maker(plt, sweeps, rec)
        fig.suptitle(title + ("  (SIMULATED engine)" if simulated else ""), fontsize=11, y=1.01)
        path = out_dir / f"{name}.png"
        fig.savefig(path, dpi=dpi, bbox_inches="tight")
        plt.close(fig)
        rec.figures.setdefault(name, {"series": [], "lines": []})["file"] = path.name
        paths.append(path)
    (out_dir / SERIES_FILE).write_text(json.dumps({"sweeps": [label for label, _ in sweeps], **rec.figures},
                                                  indent=1, allow_nan=False) + "\n", encoding="utf-8")
    return paths
