"""Pareto fronts of sweeps — the chart engine comparisons are published with: output tokens/s **per GPU** (what a
GPU earns) against output tokens/s **per user** (how fast one answer streams: 1000 / median TPOT), one point per
sweep point, labelled with its setting and load. A point is on the front when no other point of its group is at
least as good on both and better on one; each group (one ``llmload report`` input, or each input of
``llmload compare``: a settings sweep, an engine's sweep) gets its own front. Client-limited points are drawn
hollow and never on a front (their latency is the client's). Written: ``sweep_pareto.png`` and, beside it,
``pareto.json`` with every point plotted and which are on the front (docs/sweep.md, "Pareto fronts").
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from llmload.report.plotting import colour
from llmload.report.sweep_figures import latency, number, offered, rows_of

PARETO_FIGURE = ("sweep_pareto", "Pareto front: output tokens/s per GPU against tokens/s per user")
#: with GPU telemetry (docs/energy.md): energy as the axis a GPU is judged on
ENERGY_FIGURE = ("sweep_pareto_energy", "Pareto front: output tokens per joule against tokens/s per user")
ENERGY_Y_LABEL = "output tokens per joule (1 / energy per output token)"
PARETO_FILE = "pareto.json"
X_LABEL = "output tokens/s per user (1000 / median TPOT)"
Y_LABEL = "output tokens/s per GPU"


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point dominates, both coordinates to be maximised (ties: both stay)."""
    front = []
    for i, (x, y) in enumerate(points):
        if not any((u >= x and v >= y) and (u > x or v > y) for j, (u, v) in enumerate(points) if j != i):
            front.append(i)
    return front


def point_of(row: Mapping[str, Any], data: Mapping[str, Any]) -> tuple[float, float] | None:
    """A sweep row's (per user, per GPU) coordinates; None when it has no TPOT or no throughput."""
    per_user = number(row.get("output_throughput_per_user"))
    if per_user is None:
        tpot = latency(row, "tpot", "median")
        per_user = 1000.0 / tpot if tpot else None
    per_gpu = number(row.get("output_throughput_per_gpu"))
    if per_gpu is None and (out := number(row.get("output_throughput"))) is not None:
        per_gpu = out / (number(data.get("gpus")) or 1.0)
    return None if per_user is None or per_gpu is None else (per_user, per_gpu)


def energy_point_of(row: Mapping[str, Any], data: Mapping[str, Any]) -> tuple[float, float] | None:
    """A sweep row's (per user, output tokens per joule) coordinates; None without GPU telemetry."""
    xy = point_of(row, data)
    per_joule = number(row.get("output_tokens_per_joule"))
    return None if xy is None or per_joule is None else (xy[0], per_joule)


def pareto_groups(sweeps: Sequence[tuple[str, Mapping[str, Any]]], groups: Sequence[str],
                  coordinates: Any = point_of) -> list[dict[str, Any]]:
    """Per group: every point (sweep label, index, load, x, y, client-limited, on the front); ``coordinates``:
    a row's (x, y), :func:`point_of` or :func:`energy_point_of`."""
    out: dict[str, dict[str, Any]] = {}
    for (label, data), group in zip(sweeps, groups, strict=True):
        entry = out.setdefault(group, {"group": group, "points": []})
        dim = "max_concurrency" if data.get("dimension") == "max_concurrency" else "request_rate"
        for row in rows_of(data):
            xy = coordinates(row, data)
            if xy is None:
                continue
            load = offered(row, dim)
            entry["points"].append({"sweep": label, "index": row.get("index"), "role": row.get("role"),
                                    "load": "inf" if load is None else load, "dimension": dim, "x": xy[0],
                                    "y": xy[1], "client_limited": bool(row.get("client_limited")),
                                    "cost_per_million_output_tokens": row.get("cost_per_million_output_tokens"),
                                    "gpu_energy_per_output_token_j": row.get("gpu_energy_per_output_token_j")})
    for entry in out.values():
        pts = entry["points"]
        fair = [k for k, p in enumerate(pts) if not p["client_limited"]]
        on = {fair[k] for k in pareto_front([(pts[i]["x"], pts[i]["y"]) for i in fair])}
        for k, p in enumerate(pts):
            p["on_front"] = k in on
    return [e for e in out.values() if e["points"]]


def _load_text(p: Mapping[str, Any]) -> str:
    load = p["load"]
    if p["dimension"] == "max_concurrency":
        return f"c={load:g}" if isinstance(load, int | float) else "c=inf"
    return f"{load:g}/s" if isinstance(load, int | float) else "inf"


def fig_pareto(plt, sweeps: Sequence[tuple[str, Mapping[str, Any]]], groups_data: list[dict[str, Any]],
               y_label: str = Y_LABEL):
    fig, ax = plt.subplots(figsize=(11, 6.5))
    one_group = len(groups_data) == 1
    labels = [label for label, _ in sweeps]
    xs = [p["x"] for e in groups_data for p in e["points"]]
    ys = [p["y"] for e in groups_data for p in e["points"]]
    for g, entry in enumerate(groups_data):
        pts = entry["points"]
        spots: list[tuple[float, float, list[str]]] = []  # points close together share one label
        for p in pts:
            c = colour(labels.index(p["sweep"]) if one_group else g)
            ax.scatter([p["x"]], [p["y"]], s=36, color="none" if p["client_limited"] else c, edgecolors=c,
                       zorder=3)
            name = f"{p['sweep']} @ {_load_text(p)}"
            near = next((spot for spot in spots if abs(spot[0] - p["x"]) <= 0.04 * max(xs)
                         and abs(spot[1] - p["y"]) <= 0.04 * max(ys)), None)
            if near is None:
                spots.append((p["x"], p["y"], [name]))
            else:
                near[2].append(name)
        for x, y, names in spots:
            text = "\n".join(names[:3]) + (f"\n(+{len(names) - 3} more)" if len(names) > 3 else "")
            ax.annotate(text, (x, y), textcoords="offset points", xytext=(5, 3), fontsize=6.5,
                        color="#333333" if one_group else colour(g), va="bottom")
        front = sorted((p for p in pts if p["on_front"]), key=lambda p: p["x"])
        c = "#222222" if one_group else colour(g)
        ax.plot([p["x"] for p in front], [p["y"] for p in front], "-", color=c, linewidth=1.6, alpha=0.8,
                label=f"front: {entry['group']}", zorder=2)
    if one_group:
        for i, label in enumerate(labels):
            ax.scatter([], [], color=colour(i), label=label)
    ax.scatter([], [], color="none", edgecolors="#888888", label="client-limited (not on a front)")
    ax.set(xlabel=X_LABEL, ylabel=y_label)
    ax.set_xlim(0, max(xs) * 1.18)  # room for the labels
    ax.set_ylim(0, max(ys) * 1.12)
    ax.grid(alpha=0.25)
    ax.legend(fontsize=8, frameon=False, loc="lower left")
    fig.tight_layout()
    return fig


def write_pareto(sweeps: Sequence[tuple[str, Mapping[str, Any]]], groups: Sequence[str], out_dir: Path,
                 dpi: int = 100) -> list[Path]:
    """The figure and ``pareto.json`` in ``out_dir``; nothing (an empty list) when no point has coordinates."""
    from llmload.report.plotting import pyplot

    groups_data = pareto_groups(sweeps, groups)
    if not groups_data:
        return []
    plt = pyplot()
    simulated = any(bool(data.get("simulated")) for _, data in sweeps)
    paths = [_figure(plt, fig_pareto(plt, sweeps, groups_data), PARETO_FIGURE, simulated, out_dir, dpi)]
    written: dict[str, Any] = {"x": X_LABEL, "y": Y_LABEL, "file": paths[0].name, "groups": groups_data}
    energy = pareto_groups(sweeps, groups, energy_point_of)
    if energy:
        fig = fig_pareto(plt, sweeps, energy, ENERGY_Y_LABEL)
        paths.append(_figure(plt, fig, ENERGY_FIGURE, simulated, out_dir, dpi))
        written["energy"] = {"y": ENERGY_Y_LABEL, "file": paths[1].name, "groups": energy}
    (out_dir / PARETO_FILE).write_text(json.dumps(written, indent=1) + "\n", encoding="utf-8")
    return paths


def _figure(plt, fig, figure: tuple[str, str], simulated: bool, out_dir: Path, dpi: int) -> Path:
    fig.suptitle(figure[1] + ("  (SIMULATED engine)" if simulated else ""), fontsize=11, y=1.01)
    path = out_dir / f"{figure[0]}.png"
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return path
