"""What every report figure shares: matplotlib on the Agg backend, the palette, and saving a titled PNG."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmload.report.stats import RunStats


@dataclass(frozen=True, slots=True)
class Figure:
    name: str
    title: str
    path: Path


def pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def colour(i: int) -> str:
    palette = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
               "#bcbd22", "#17becf")
    return palette[i % len(palette)]


def save(plt, fig, stats: list[RunStats], name: str, title: str, path: Path, dpi: int) -> Figure:
    """Title the figure (SIMULATED when a run was), write it as a PNG and free it."""
    sim = any(s.run.simulated for s in stats)
    fig.suptitle(title + ("  (SIMULATED engine)" if sim else ""), fontsize=11, y=1.02)
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return Figure(name, title, path)
