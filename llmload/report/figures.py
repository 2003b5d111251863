"""Matplotlib figures (PNG, Agg backend) for one run or several overlaid, one colour per run label.

Every function takes the runs' :class:`RunStats` and returns a ``matplotlib.figure.Figure``; :func:`render_all`
saves them and says which were skipped and why (vLLM-format runs carry no send or arrival times, so the
figures over time show only the runs that do). A run with turns adds "TTFT and cached fraction by turn index"
(:mod:`llmload.report.turns`); a run measured with ``--slice-duration`` adds "Latency and throughput per time
slice" (:mod:`llmload.report.slices`); a run with the server's scraped metrics adds "Server and client over time"
(:mod:`llmload.report.server_figures`). matplotlib is imported here only, when a report is made.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from llmload.report.columns import chunk_batches, histogram_of, in_flight
from llmload.report.plotting import Figure, colour, pyplot, save
from llmload.report.server_figures import render_server
from llmload.report.slices import SLICES_FIGURE, any_slices, fig_slices, write_slices_json
from llmload.report.stats import RunStats
from llmload.report.turns import TURNS_FIGURE, any_turns, fig_turns

#: (file stem, title) in report order
FIGURES = (
    ("ttft", "Time to first token"),
    ("tpot", "TPOT with and without the first ITL"),
    ("itl", "Inter-token latency"),
    ("e2el", "End-to-end latency"),
    ("timeline", "Per-request timeline"),
    ("throughput", "Tokens/s and requests in flight over time"),
    ("lengths", "Input and output lengths"),
    ("errors", "Failed requests over time"),
)
_TIMED = ("timeline", "throughput", "errors")
#: the most points a CDF curve or a box plot's outliers are drawn with
CURVE_POINTS = 4096
#: the most requests the timeline draws a line for (a longer run: every k-th, in first-token order)
TIMELINE_LINES = 20_000


def _bins(arrays: list[np.ndarray], n: int = 40, log: bool = False) -> np.ndarray:
    values = np.concatenate([a for a in arrays if len(a)]) if any(len(a) for a in arrays) else np.zeros(1)
    if log:
        positive = values[values > 0]
        if not len(positive):
            return np.linspace(0, 1, n + 1)
        lo, hi = positive.min(), positive.max()
        if hi <= lo:
            hi = lo * 1.01
        return np.geomspace(lo, hi, n + 1)
    lo, hi = float(values.min()), float(values.max())
    if hi <= lo:
        hi = lo + 1.0
    return np.linspace(lo, hi, n + 1)


def _ecdf(ax, values: np.ndarray, **kw) -> None:
    """The empirical CDF; a long one drawn through :data:`CURVE_POINTS` evenly spaced ranks (the first and the
    last included), each at its exact value and fraction."""
    if not len(values):
        return
    x = np.sort(values)
    ranks = np.arange(1, len(x) + 1)
    if len(x) > CURVE_POINTS:
        at = np.unique(np.linspace(0, len(x) - 1, CURVE_POINTS).astype(np.int64))
        x, ranks = x[at], ranks[at]
    ax.plot(x, ranks / len(values), drawstyle="steps-post", **kw)


def _box_stats(values: np.ndarray) -> dict:
    """Matplotlib's box-plot statistics of every value, with at most :data:`CURVE_POINTS` of the fliers drawn
    (evenly spaced in order, the most extreme both ways included): a long run's box is its own, exactly."""
    from matplotlib import cbook

    stats = cbook.boxplot_stats(values if len(values) else np.zeros(1))[0]
    fliers = np.sort(stats["fliers"])
    if fliers.size > CURVE_POINTS:
        stats["fliers"] = fliers[np.unique(np.linspace(0, fliers.size - 1, CURVE_POINTS).astype(np.int64))]
    return stats


def _legend(ax, stats: list[RunStats]) -> None:
    if len(stats) > 1 or ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, frameon=False)


def _hist_and_box(plt, stats: list[RunStats], attr: str, title: str, xlabel: str):
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [3, 1.3]})
    data = [getattr(s, attr) * 1000.0 for s in stats]
    bins = _bins(data)
    for i, (s, d) in enumerate(zip(stats, data, strict=True)):
        if len(d):
            ax.hist(d, bins=bins, histtype="step" if len(stats) > 1 else "stepfilled", linewidth=1.6,
                    color=colour(i), alpha=0.9 if len(stats) > 1 else 0.6, label=f"{s.run.label} (n={len(d)})")
            ax.axvline(np.median(d), color=colour(i), linestyle=":", linewidth=1)
    ax.set(title=f"{title} histogram (dotted: median)", xlabel=xlabel, ylabel="requests")
    _legend(ax, stats)
    box = bx.bxp([_box_stats(d) for d in data], patch_artist=True, showfliers=True, flierprops={"markersize": 2})
    for i, patch in enumerate(box["boxes"]):
        patch.set_facecolor(colour(i))
        patch.set_alpha(0.5)
    bx.set_xticks(range(1, len(stats) + 1), [s.run.label for s in stats], rotation=20, fontsize=8)
    bx.set(title="box plot", ylabel=xlabel)
    fig.tight_layout()
    return fig


def fig_ttft(plt, stats):
    return _hist_and_box(plt, stats, "ttft", "TTFT", "TTFT (ms)")


def fig_e2el(plt, stats):
    return _hist_and_box(plt, stats, "e2el", "E2E latency", "E2E latency (ms)")


def fig_tpot(plt, stats):
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharex=True, sharey=True)
    tpot = [s.tpot * 1000.0 for s in stats]
    steady = [s.tpot_steady * 1000.0 for s in stats]
    bins = _bins(tpot + steady)
    for ax, data, title in ((axes[0], tpot, "TPOT = (E2EL − TTFT) / (out − 1)"),
                            (axes[1], steady, "TPOT excl. 1st ITL = (E2EL − TTFT − ITL₁) / (out − 2)")):
        for i, (s, d) in enumerate(zip(stats, data, strict=True)):
            if len(d):
                ax.hist(d, bins=bins, histtype="step", linewidth=1.6, color=colour(i),
                        label=f"{s.run.label}: mean {d.mean():.2f} ms")
        ax.set(title=title, xlabel="ms per output token", ylabel="requests")
        ax.title.set_fontsize(10)
        _legend(ax, stats)
    fig.tight_layout()
    return fig


def fig_itl(plt, stats):
    fig, (ax, cx) = plt.subplots(1, 2, figsize=(11, 4))
    data = [s.itl * 1000.0 for s in stats]
    log = any(len(d) and d.max() > 20 * max(np.median(d), 1e-9) for d in data)
    bins = _bins(data, 50, log=log)
    for i, (s, d) in enumerate(zip(stats, data, strict=True)):
        if len(d):
            ax.hist(d[d > 0] if log else d, bins=bins, histtype="step", linewidth=1.6, color=colour(i),
                    label=f"{s.run.label}: median {np.median(d):.2f} ms")
        _ecdf(cx, s.itl_later * 1000.0, color=colour(i), linewidth=1.6, label=f"{s.run.label}: ITL₂…")
        _ecdf(cx, s.itl1 * 1000.0, color=colour(i), linewidth=1.4, linestyle="--", label=f"{s.run.label}: ITL₁")
    if log:
        ax.set_xscale("log")
        cx.set_xscale("log")
    ax.set(title="ITL histogram (all gaps pooled)", xlabel="ITL (ms)", ylabel="gaps")
    cx.set(title="ITL CDF: first gap (dashed) vs later gaps", xlabel="ITL (ms)", ylabel="fraction ≤ x")
    _legend(ax, stats)
    _legend(cx, stats)
    fig.tight_layout()
    return fig


def fig_lengths(plt, stats):
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for ax, attr, title in ((axes[0], "input_lens", "input (prompt) tokens"),
                            (axes[1], "output_lens", "output tokens")):
        data = [getattr(s, attr) for s in stats]
        bins = _bins(data)
        for i, (s, d) in enumerate(zip(stats, data, strict=True)):
            if len(d):
                ax.hist(d, bins=bins, histtype="step", linewidth=1.6, color=colour(i),
                        label=f"{s.run.label}: mean {d.mean():.0f}")
        ax.set(title=title, xlabel="tokens", ylabel="requests")
        _legend(ax, stats)
    fig.tight_layout()
    return fig


def _timed(stats: list[RunStats]) -> list[tuple[int, RunStats]]:
    return [(i, s) for i, s in enumerate(stats) if s.run.has_timestamps]


def fig_timeline(plt, stats):
    timed = _timed(stats)
    fig, axes = plt.subplots(len(timed), 1, figsize=(11, 2.2 + 2.6 * len(timed)), sharex=True, squeeze=False)
    for ax, (i, s) in zip(axes[:, 0], timed, strict=True):
        c, t0 = s.columns, s.t0
        order = np.lexsort((c.start, np.where(np.isnan(c.first_token), np.inf, c.first_token)))
        step = max(1, -(-order.size // TIMELINE_LINES))
        order = order[::step]  # a long run: every k-th request in that order (said in the title)
        y = np.arange(order.size) * step
        send, first, last = c.start[order] - t0, c.first_token[order] - t0, c.end[order] - t0
        ok = ~np.isnan(first)
        _hlines(ax, y[ok], send[ok], first[ok], "#bbbbbb", "send → first token")
        ok2 = ok & ~np.isnan(last)
        _hlines(ax, y[ok2], first[ok2], last[ok2], colour(i), "first → last token")
        bad = ~c.success[order]
        if bad.any():
            ax.plot(send[bad], y[bad], "x", color="#d62728", markersize=4, label="failed (at send)")
        every = f" (every {step}th of {c.start.size:,})" if step > 1 else ""
        ax.set(title=f"{s.run.label}: one line per request{every}, ordered by first token", ylabel="request #")
        ax.title.set_fontsize(10)
        ax.legend(fontsize=8, frameon=False, loc="lower right")
    axes[-1, 0].set_xlabel("time since the first send (s)")
    fig.tight_layout()
    return fig


def _hlines(ax, y: np.ndarray, start: np.ndarray, end: np.ndarray, color: str, label: str) -> None:
    """``ax.hlines`` drawn the same (pixel for pixel), from plain arrays: hlines builds its segments as masked
    arrays and reads them back one segment at a time, a third of a compare's CPU for a timeline's 20,000 lines."""
    from matplotlib.collections import LineCollection

    segments = np.empty((y.size, 2, 2))
    segments[:, 0, 0], segments[:, 1, 0] = start, end
    segments[:, :, 1] = y[:, None]
    ax.add_collection(LineCollection(segments, colors=color, linewidths=1, label=label), autolim=False)
    if y.size:
        ax.update_datalim([(min(start.min(), end.min()), y.min()), (max(start.max(), end.max()), y.max())])
        ax.autoscale_view()


def _bucket(stats: list[RunStats]) -> float:
    longest = max(s.run.duration for s in stats)
    return 1.0 if longest >= 50 else float(f"{max(longest / 50.0, 0.2):.1g}")


def fig_throughput(plt, stats):
    timed = _timed(stats)
    width = _bucket([s for _, s in timed])
    fig, (ax, fx) = plt.subplots(2, 1, figsize=(11, 6), sharex=True)
    for i, s in timed:
        c = s.columns
        ends = c.end[c.completed]
        end = float(np.nanmax(ends)) - s.t0 if ends.size and not np.isnan(ends).all() else s.run.duration
        edges = np.arange(0.0, end + width, width)
        hist = histogram_of(chunk_batches(s.done, s.t0), edges)
        ax.step(edges[:-1], hist / width, where="post", color=colour(i), linewidth=1.4, label=s.run.label)
        xs, ys = in_flight(c.start - s.t0, np.where(np.isnan(c.end), c.start, c.end) - s.t0)
        fx.step(xs, ys, where="post", color=colour(i), linewidth=1.4, label=s.run.label)
    ax.set(title=f"output tokens/s ({width:g} s buckets)", ylabel="tokens/s")
    fx.set(title="requests in flight", ylabel="requests", xlabel="time since the first send (s)")
    _legend(ax, stats)
    _legend(fx, stats)
    fig.tight_layout()
    return fig


def fig_errors(plt, stats):
    timed = _timed(stats)
    width = _bucket([s for _, s in timed])
    fig, ax = plt.subplots(figsize=(11, 3.2))
    total = 0
    for i, s in timed:
        times = s.columns.start[s.columns.failed] - s.t0
        total += len(times)
        edges = np.arange(0.0, s.run.duration + 2 * width, width)
        hist, _ = np.histogram(times, bins=edges)
        ax.step(edges[:-1], hist, where="post", color=colour(i), linewidth=1.4,
                label=f"{s.run.label}: {len(times)} failed")
    if not total:
        ax.text(0.5, 0.5, "no failed requests", transform=ax.transAxes, ha="center", va="center",
                fontsize=14, color="#2ca02c")
    ax.set(title=f"failed requests by send time ({width:g} s buckets)", xlabel="time since the first send (s)",
           ylabel="failed requests")
    ax.set_ylim(bottom=0)
    _legend(ax, stats)
    fig.tight_layout()
    return fig


_MAKERS = {
    "ttft": fig_ttft, "tpot": fig_tpot, "itl": fig_itl, "e2el": fig_e2el, "timeline": fig_timeline,
    "throughput": fig_throughput, "lengths": fig_lengths, "errors": fig_errors,
}


def render_all(stats: list[RunStats], out_dir: Path, dpi: int = 100,
               prefix: str = "") -> tuple[list[Figure], list[str]]:
    """Save every figure as ``out_dir/<prefix><name>.png``; returns the figures and notes on skipped ones."""
    plt = pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    figures: list[Figure] = []
    notes: list[str] = []
    untimed = [s.run.label for s in stats if not s.run.has_timestamps]
    makers = {**_MAKERS, TURNS_FIGURE[0]: fig_turns, SLICES_FIGURE[0]: fig_slices}
    wanted = (*FIGURES, *([TURNS_FIGURE] if any_turns(stats) else []), *([SLICES_FIGURE] if any_slices(stats) else []))
    if any_slices(stats):
        write_slices_json(stats, out_dir / f"{prefix}slices.json")
    for name, title in wanted:
        if name in _TIMED:
            if not _timed(stats):
                notes.append(f"{title}: skipped, no run has per-request send and arrival times "
                             f"(vLLM-format: {', '.join(untimed)})")
                continue
            if untimed:
                notes.append(f"{title}: without {', '.join(untimed)} (no per-request send and arrival times)")
        fig = makers[name](plt, stats)
        figures.append(save(plt, fig, stats, name, title, out_dir / f"{prefix}{name}.png", dpi))
    server_figures, server_notes = render_server(plt, stats, out_dir, dpi, prefix)
    from llmload.report.energy_figures import render_gpu

    return figures + server_figures + render_gpu(plt, stats, out_dir, dpi, prefix), notes + server_notes
