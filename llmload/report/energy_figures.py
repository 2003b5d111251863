"""The report's GPU figure (power and utilisation over the run, one line per GPU) and its GPU findings (XID errors,
memory near full, a GPU that idled while requests queued), from the telemetry a run scraped (docs/energy.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmload.report.findings import Finding
from llmload.report.records import records_span
from llmload.report.stats import RunStats

GPU_FIGURE = ("gpu", "GPU power and utilisation")


def _panel(ax: Any, s: RunStats, name: str, t0: float, label_run: bool) -> bool:
    drew = False
    keys = sorted({k for scrape in s.run.gpu for k in scrape.gpus})
    for key in keys:
        rows = [(scrape.t - t0, scrape.gpus[key].values[name]) for scrape in s.run.gpu
                if key in scrape.gpus and name in scrape.gpus[key].values]
        if rows:
            ax.plot([t for t, _ in rows], [v for _, v in rows], label=f"{s.run.label} {key}" if label_run else key)
            drew = True
    return drew


def fig_gpu(plt: Any, stats: list[RunStats]) -> Any:
    """Power (W, top) and utilisation (%, bottom) of every GPU over time since the first send."""
    fig, (power, util) = plt.subplots(2, 1, figsize=(11, 6), sharex=True)
    several = len(stats) > 1
    for s in stats:
        span = records_span(s.run.records)
        t0 = span[0] if span else s.run.gpu[0].t
        _panel(power, s, "power_w", t0, several)
        _panel(util, s, "util_pct", t0, several)
    power.set_ylabel("power (W)")
    util.set_ylabel("utilisation (%)")
    util.set_ylim(0, 105)
    util.set_xlabel("time since the first send (s)")
    for ax in (power, util):
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    return fig


def render_gpu(plt: Any, stats: list[RunStats], out_dir: Path, dpi: int, prefix: str = "") -> list[Any]:
    """The GPU figure, when a run has telemetry with power or utilisation."""
    from llmload.report.plotting import save

    usable = [s for s in stats if s.run.gpu]
    if not usable:
        return []
    name, title = GPU_FIGURE
    return [save(plt, fig_gpu(plt, usable), stats, name, title, out_dir / f"{prefix}{name}.png", dpi)]


def gpu_findings(s: RunStats) -> list[Finding]:
    """What the run's GPU summary (``gpu_metrics`` in its result) says a reader should look at."""
    from llmload.energy.summary import findings

    gpus = (s.run.summary.get("gpu_metrics") or {}).get("gpus")
    if not gpus:
        return []
    waiting = (s.run.summary.get("server_metrics") or {}).get("peak_waiting")
    return [Finding("gpu", s.run.label, "GPU", line) for line in findings({"gpus": gpus}, waiting_peak=waiting)]
