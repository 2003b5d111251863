"""The figures that put the server's scraped metrics on the client's time axis (seconds since the first send).

    server        ``llmload report``: "Server and client over time", stacked panels sharing the x axis: the
                  client's completed requests/s and output tokens/s (1-s bins), its median TTFT (by first-token
                  arrival) and median ITL (by arrival of the gap's later token) per second, the server's running
                  and waiting requests, and its KV-cache usage (%) when exported
    server_queue  ``llmload compare``: "Server running and waiting requests over time", the runs overlaid, one
                  colour each

A dashed vertical line marks the saturation onset (the result JSON's ``saturation.since_s``, seconds from the
start of the run) when the run was saturated. Only runs with a series file get these figures: without one the
report is as before.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from llmload.report.columns import chunk_batches, gap_sample, histogram_of
from llmload.report.server import ServerSeries, number, saturation
from llmload.report.stats import RunStats

if TYPE_CHECKING:
    from llmload.report.plotting import Figure

#: (file stem, title) of each figure
SERVER_FIGURE = ("server", "Server and client over time")
QUEUE_FIGURE = ("server_queue", "Server running and waiting requests over time")
#: width of the client's bins (s)
BIN_S = 1.0
_ONSET_COLOUR = "#333333"


def binned_median(times: np.ndarray, values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """The median of ``values`` whose ``times`` fall in each bin ``[edges[k], edges[k+1])``; NaN where none."""
    out = np.full(max(len(edges) - 1, 0), np.nan)
    idx = np.searchsorted(edges, times, side="right") - 1
    keep = (idx >= 0) & (idx < len(out))
    idx, values = idx[keep], np.asarray(values, dtype=float)[keep]
    if not len(idx):
        return out
    order = np.argsort(idx, kind="stable")
    idx, values = idx[order], values[order]
    bounds = np.flatnonzero(np.diff(idx)) + 1
    for group, vals in zip(np.split(idx, bounds), np.split(values, bounds), strict=True):
        out[group[0]] = float(np.median(vals))
    return out


def _onset(s: RunStats) -> float | None:
    verdict = saturation(s)
    return number(verdict, "since_s") if verdict and verdict.get("saturated") is True else None


def _mark_onset(axes: list, since: float | None, colour: str = _ONSET_COLOUR, label: str = "") -> None:
    if since is None:
        return
    for k, ax in enumerate(axes):
        ax.axvline(since, color=colour, linestyle="--", linewidth=1.2,
                   label=(label or f"saturated from {since:.1f} s") if k == 0 else None)


def _legend(ax, twin=None) -> None:
    handles, labels = ax.get_legend_handles_labels()
    if twin is not None:
        more = twin.get_legend_handles_labels()
        handles, labels = handles + more[0], labels + more[1]
    if handles:
        ax.legend(handles, labels, fontsize=8, frameon=False, loc="best")


def _done_ends(s: RunStats) -> np.ndarray:
    """When each completed request ended (report time axis), sorted."""
    ends = s.columns.end[s.columns.completed]
    return np.sort(ends[~np.isnan(ends)] - s.t0)


def _client_throughput(ax, s: RunStats, edges: np.ndarray) -> None:
    from llmload.report.plotting import colour

    ends = _done_ends(s)
    done, _ = np.histogram(ends, bins=edges)
    produced = histogram_of(chunk_batches(s.done, s.t0), edges)
    ax.stairs(done / BIN_S, edges, color=colour(0), linewidth=1.4, label="completed requests/s")
    tx = ax.twinx()
    tx.stairs(produced / BIN_S, edges, color=colour(1), linewidth=1.2, alpha=0.85, label="output tokens/s (right)")
    ax.set(title=f"client throughput ({BIN_S:g} s bins)", ylabel="requests/s")
    tx.set_ylabel("tokens/s")
    ax.set_ylim(bottom=0)
    tx.set_ylim(bottom=0)
    _legend(ax, tx)


def _client_latency(ax, s: RunStats, edges: np.ndarray) -> None:
    from llmload.report.plotting import colour

    # TTFT and ITL by their one definition (metrics.definitions), placed at the first token and each chunk
    c = s.columns
    has = c.completed & ~np.isnan(c.first_token)
    first_at, ttft = c.first_token[has] - s.t0, c.ttft[has]
    ends, gaps = gap_sample(s.done, len(c.itl), s.t0)  # a long run: every k-th request's ITLs
    mids = edges[:-1] + BIN_S / 2
    ax.plot(mids, binned_median(first_at, ttft, edges) * 1000.0, "o-", color=colour(0), markersize=3,
            linewidth=1.2, label="TTFT median (by first token)")
    tx = ax.twinx()
    tx.plot(mids, binned_median(ends, gaps, edges) * 1000.0, "s-", color=colour(1), markersize=3, linewidth=1.2,
            alpha=0.85, label="ITL median (right)")
    ax.set(title="client latency per second", ylabel="TTFT (ms)")
    tx.set_ylabel("ITL (ms)")
    ax.set_ylim(bottom=0)
    tx.set_ylim(bottom=0)
    _legend(ax, tx)


def _server_queue(ax, series: ServerSeries) -> None:
    from llmload.report.plotting import colour

    for name, label, c in (("running", "running", colour(0)), ("waiting", "waiting", colour(1))):
        values = getattr(series, name)
        if series.has(name):
            ax.plot(series.t, values, "o-", color=c, markersize=2.5, linewidth=1.3,
                    label=f"{label} (peak {np.nanmax(values):.0f})")
    if not (series.has("running") or series.has("waiting")):
        ax.text(0.5, 0.5, "the server exports no running/waiting gauges", transform=ax.transAxes, ha="center",
                va="center", color="#777777")
    ax.set(title="server: requests running and waiting (each scrape)", ylabel="requests")
    ax.set_ylim(bottom=0)
    _legend(ax)


def _server_kv(ax, series: ServerSeries) -> None:
    from llmload.report.plotting import colour

    kv = series.kv * 100.0
    ax.plot(series.t, kv, "o-", color=colour(4), markersize=2.5, linewidth=1.3,
            label=f"KV-cache usage (peak {np.nanmax(kv):.1f}%)")
    ax.axhline(90.0, color="#bbbbbb", linestyle=":", linewidth=1)
    ax.set(title="server: KV-cache usage", ylabel="% in use")
    ax.set_ylim(0, 105)
    _legend(ax)


def fig_server(plt, s: RunStats):
    """The stacked figure of one run (``llmload report``)."""
    series = s.server
    assert series is not None
    end = max([s.run.duration, *_done_ends(s)[-1:]])
    edges = np.arange(0.0, math.ceil(end / BIN_S) * BIN_S + BIN_S, BIN_S)
    panels = 4 if series.has("kv") else 3
    fig, axes = plt.subplots(panels, 1, figsize=(11, 2.6 * panels + 0.6), sharex=True)
    _mark_onset(list(axes), _onset(s))  # first, so that the top panel's legend names it
    _client_throughput(axes[0], s, edges)
    _client_latency(axes[1], s, edges)
    _server_queue(axes[2], series)
    if panels == 4:
        _server_kv(axes[3], series)
    # the run's span, and a second before it: a scraper started early must not squeeze the run
    axes[-1].set_xlim(max(min(0.0, float(series.t[0])), -BIN_S), float(edges[-1]))
    axes[-1].set_xlabel("time since the first send (s)")
    fig.tight_layout()
    return fig


def fig_server_queue(plt, stats: list[tuple[int, RunStats]]):
    """The runs' running (top) and waiting (bottom) requests overlaid (``llmload compare``)."""
    from llmload.report.plotting import colour

    fig, (rx, wx) = plt.subplots(2, 1, figsize=(11, 6), sharex=True)
    left, right, onsets = 0.0, 0.0, False
    for i, s in stats:
        series = s.server
        assert series is not None
        for ax, name in ((rx, "running"), (wx, "waiting")):
            if series.has(name):
                ax.plot(series.t, getattr(series, name), "-", color=colour(i), linewidth=1.4, label=s.run.label)
        since = _onset(s)
        onsets = onsets or since is not None
        _mark_onset([rx, wx], since, colour(i), f"{s.run.label}: saturated from {since:.1f} s" if since else "")
        left = min(left, float(series.t[0]))
        right = max([right, s.run.duration, *_done_ends(s)[-1:]])
    rx.set(title="server: requests running" + (" (dashed: saturation onset)" if onsets else ""), ylabel="requests")
    wx.set(title="server: requests waiting", ylabel="requests", xlabel="time since the first send (s)")
    for ax in (rx, wx):
        ax.set_ylim(bottom=0)
        _legend(ax)
    wx.set_xlim(max(left, -BIN_S), math.ceil(right / BIN_S) * BIN_S)
    fig.tight_layout()
    return fig


def render_server(plt, stats: list[RunStats], out_dir: Path, dpi: int,
                  prefix: str = "") -> tuple[list[Figure], list[str]]:
    """The server figures the runs allow (none without a series file), and notes on runs left out."""
    from llmload.report.plotting import save

    name, title = SERVER_FIGURE if len(stats) == 1 else QUEUE_FIGURE
    wanted = ("running", "waiting", "kv") if len(stats) == 1 else ("running", "waiting")
    usable, notes = [], []
    for i, s in enumerate(stats):
        if s.server is None:
            continue
        if any(s.server.has(n) for n in wanted):
            usable.append((i, s))
        else:
            notes.append(f"{title}: without {s.run.label}, whose server metrics hold no "
                         f"{'running, waiting or KV-cache' if len(stats) == 1 else 'running or waiting'} series")
    if not usable:
        return [], notes
    fig = fig_server(plt, usable[0][1]) if len(stats) == 1 else fig_server_queue(plt, usable)
    return [save(plt, fig, stats, name, title, out_dir / f"{prefix}{name}.png", dpi)], notes
