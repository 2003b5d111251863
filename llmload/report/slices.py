"""The report's time-slice figure ("Latency and throughput per time slice"), drawn when a run was measured with
``--slice-duration`` (its result JSON's ``slice_duration``): per slice of the run, TTFT p50 and p99, TPOT p50
and the output tokens/s, recomputed from the records (:func:`llmload.metrics.time_slices`, the numbers of the
result JSON's ``slices``, through :attr:`RunStats.metrics`); ``llmload compare`` overlays the runs, one colour each. The plotted series go into
``slices.json`` beside the figure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from llmload.report.plotting import colour
from llmload.report.stats import RunStats

#: (file stem, title) of the figure
SLICES_FIGURE = ("slices", "Latency and throughput per time slice")


def slices_of(stats: RunStats) -> list[dict[str, Any]]:
    """The run's slices (computed once, with its metrics); empty without ``--slice-duration`` or per-request
    times."""
    return stats.metrics.slices


def any_slices(stats: list[RunStats]) -> bool:
    return any(s.slice_duration is not None and s.run.has_timestamps for s in stats)


def fig_slices(plt, stats: list[RunStats]):
    """TTFT p50 (solid) and p99 (dotted) per slice above, output tokens/s per slice below; one colour a run."""
    fig, (lat, tput) = plt.subplots(2, 1, figsize=(11, 6), sharex=True)
    for i, s in enumerate(stats):
        rows = slices_of(s)
        if not rows:
            continue
        mid = [(r["start_s"] + r["end_s"]) / 2 for r in rows]
        lat.plot(mid, [r["ttft_ms"].get("p50") for r in rows], "o-", color=colour(i), label=f"{s.run.label} p50")
        lat.plot(mid, [r["ttft_ms"].get("p99") for r in rows], "o:", color=colour(i), label=f"{s.run.label} p99")
        tput.step([r["start_s"] for r in rows] + [rows[-1]["end_s"]],
                  [r["output_throughput"] for r in rows] + [rows[-1]["output_throughput"]], where="post",
                  color=colour(i), linewidth=1.4, label=s.run.label)
    widths = sorted({w for s in stats if (w := s.slice_duration) is not None})
    lat.set(title=f"TTFT per slice ({', '.join(f'{w:g}' for w in widths)} s; requests by send time)",
            ylabel="ms")
    tput.set(title="output tokens/s per slice (tokens by arrival time)", ylabel="tokens/s",
             xlabel="time since the first send (s)")
    lat.legend(fontsize=8, frameon=False)
    tput.legend(fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def write_slices_json(stats: list[RunStats], path: Path) -> None:
    """The plotted series: ``{run label: [slice, ...]}``."""
    path.write_text(json.dumps({s.run.label: rows for s in stats if (rows := slices_of(s))}, indent=2) + "\n")
