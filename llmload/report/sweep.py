"""Reports of sweeps: ``llmload report SWEEP`` and ``llmload compare SWEEP SWEEP ...``.

A SWEEP is a ``sweep.json`` written by ``llmload sweep`` (format: :mod:`llmload.sweep.table`) or the directory
holding one. The report is the answer (the highest load that met the SLO, or why none did), one table row per
point and the figures of :mod:`llmload.report.sweep_figures`; a comparison adds each sweep's answer side by side
and overlays the figures. Written: ``<name>.html`` (self-contained), ``<name>.md``, ``<name>.csv`` (every
point), the PNGs and ``sweep_figures.json``. The numbers are the sweep's own: nothing is recomputed.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from llmload.common.errors import ConfigError, DatasetError
from llmload.report.sweep_figures import SERIES_FILE, SWEEP_FIGURES, rows_of, write_sweep_figures
from llmload.report.sweep_tables import (
    answer_notes,
    answer_text,
    answers_table,
    dimension,
    html_table,
    markdown,
    point_table,
    points_csv,
    slo_text,
    terminal,
)

GOODPUT_REJECTED = "--goodput: a sweep's goodput was judged by its run; re-run the sweep with other --slo"
_SWEEP_CSS = (".answer{font-size:1.1em;font-weight:600;background:#eef6ee;border:1px solid #9cc79c;"
              "padding:.6em 1em;border-radius:4px}.answer.missed{background:#fdecea;border-color:#e6a09a}"
              "tr.limited td{background:#fdecea}")


@dataclass(frozen=True, slots=True)
class Sweep:
    """One sweep as read: its label in the report, its ``sweep.json`` and the data."""

    label: str
    path: Path
    data: dict[str, Any]

    @property
    def simulated(self) -> bool:
        return bool(self.data.get("simulated"))


def sweep_file(path: str | Path) -> Path | None:
    """The ``sweep.json`` that PATH is or holds; None when PATH is not a sweep (a run, or nothing readable)."""
    import orjson

    from llmload.sweep.table import is_sweep

    p = Path(path)
    if p.is_dir():
        return p / "sweep.json" if (p / "sweep.json").is_file() else None
    try:
        return p if is_sweep(orjson.loads(p.read_bytes())) else None
    except (OSError, orjson.JSONDecodeError):
        return None


def settings_sweeps(path: str | Path) -> list[Path] | None:
    """The sweeps of a settings sweep (``llmload sweep --serve-cmd``: a folder with ``settings.json``), every
    setting's every trial that has a ``sweep.json``, in grid order; None when PATH is not one."""
    import orjson

    from llmload.sweep.settings import SETTINGS_FILE, is_settings, trial_dir

    folder = Path(path)
    if folder.is_file() and folder.name == SETTINGS_FILE:
        folder = folder.parent
    try:
        data = orjson.loads((folder / SETTINGS_FILE).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    if not is_settings(data):
        return None
    found = []
    for entry in data.get("settings") or []:
        base = folder / str(entry.get("dir", "."))
        for trial in entry.get("trials") or []:
            sweep = trial_dir(base, int(trial.get("trial", 1)), int(data.get("trials") or 1)) / "sweep.json"
            if sweep.is_file():
                found.append(sweep)
    if not found:
        raise DatasetError(f"{folder}: the settings sweep has no finished setting yet; nothing to report")
    return found


def sweep_paths(paths: Sequence[str]) -> list[Path] | None:
    """The sweeps' files when every PATH is a sweep or a settings sweep (its sweeps, each), None when none is;
    :class:`ConfigError` when mixed."""
    found: list[list[Path] | None] = []
    for p in paths:
        many = settings_sweeps(p)
        one = sweep_file(p) if many is None else None
        found.append(many if many is not None else ([one] if one is not None else None))
    if all(f is None for f in found):
        return None
    if any(f is None for f in found):
        sweeps = ", ".join(p for p, f in zip(paths, found, strict=True) if f is not None)
        runs = ", ".join(p for p, f in zip(paths, found, strict=True) if f is None)
        raise ConfigError(f"cannot mix sweeps ({sweeps}) and runs ({runs}): give only sweeps or only runs")
    return [f for group in found if group is not None for f in group]


def sweep_group(path: Path) -> str:
    """The front a sweep's points join on the Pareto chart: its settings sweep's folder, else its own."""
    from llmload.sweep.settings import SETTINGS_FILE

    for folder in (path.parent.parent, path.parent.parent.parent):
        if (folder / SETTINGS_FILE).is_file():
            return folder.name or str(folder)
    return path.parent.name if path.name == "sweep.json" and path.parent.name else path.stem


def _label(data: dict[str, Any], path: Path) -> str:
    label = data.get("label")
    if isinstance(label, str) and label:
        return label
    return path.parent.name if path.name == "sweep.json" and path.parent.name else path.stem


def load_sweeps(files: Sequence[Path], labels: Sequence[str] | None = None) -> list[Sweep]:
    """Read the sweeps; labels default to each sweep's own and are made unique (``name``, ``name#2``)."""
    from llmload.sweep.table import read_sweep

    sweeps, seen = [], {}
    for i, path in enumerate(files):
        try:
            data = read_sweep(path)
        except (OSError, ValueError) as exc:
            raise DatasetError(f"{path}: cannot read the sweep ({exc})") from None
        if not rows_of(data):
            raise DatasetError(f"{path}: the sweep has no points; nothing to report")
        label = labels[i] if labels and i < len(labels) and labels[i] else _label(data, path)
        seen[label] = seen.get(label, 0) + 1
        sweeps.append(Sweep(label if seen[label] == 1 else f"{label}#{seen[label]}", path, data))
    return sweeps


def pick_baseline(sweeps: list[Sweep], baseline: str | None, paths: Sequence[str]) -> int:
    """``--baseline``: a sweep label, a path as given or a 1-based position; default the first sweep."""
    if baseline is None:
        return 0
    for i, s in enumerate(sweeps):
        if baseline in (s.label, paths[i], str(s.path), str(s.path.parent)):
            return i
    if baseline.isdigit() and 1 <= int(baseline) <= len(sweeps):
        return int(baseline) - 1
    names = ", ".join(s.label for s in sweeps)
    raise ConfigError(f"--baseline {baseline!r}: not a sweep label ({names}), SWEEP path or position 1..{len(sweeps)}")


def sweep_notes(sweeps: list[Sweep]) -> list[str]:
    """Client-limited points, interrupted sweeps, sweeps over different dimensions."""
    notes = []
    for s in sweeps:
        limited = [str(r.get("index")) for r in rows_of(s.data) if r.get("client_limited")]
        if limited:
            notes.append(f"{s.label}: {len(limited)} of {len(rows_of(s.data))} points client-limited "
                         f"(#{', #'.join(limited)}): marked, not taken as the answer")
        if s.data.get("interrupted"):
            notes.append(f"{s.label}: the sweep was interrupted; the points it finished are shown")
    dims = sorted({dimension(s.data) for s in sweeps})
    if len(dims) > 1:
        notes.append(f"the sweeps vary different things ({', '.join(dims)}): the throughput figure's offered-load "
                     "axis mixes them; the latency figure's achieved rate is common to all")
    return notes


@dataclass
class SweepOutputs:
    sweeps: list[Sweep]
    baseline: int
    notes: list[str]
    #: the page, the Markdown, the CSV, then the PNGs and sweep_figures.json
    files: list[Path]

    def terminal_text(self) -> str:
        pairs = [(s.label, s.data) for s in self.sweeps]
        lines = ["Answer:" if len(pairs) == 1 else "Answers:"]
        for label, data in pairs:
            lines.append(f"  {label}: {answer_text(data)}")
            lines += [f"    {note}" for note in answer_notes(data)]
        if len(pairs) > 1:
            lines += ["", terminal(answers_table(pairs, self.baseline))]
        for label, data in pairs:
            lines += ["", f"Points ({label}):", terminal(point_table(data))]
        if any(s.simulated for s in self.sweeps):
            lines.append("Note: SIMULATED engine sweep (llmload sim), not a real server.")
        lines += [f"Note: {n}" for n in self.notes]
        return "\n".join(lines)


def build_sweep(files: Sequence[Path], out_dir: str | Path, *, name: str, title: str | None,
                labels: Sequence[str] | None = None, baseline: str | None = None, dpi: int = 100,
                paths: Sequence[str] | None = None) -> SweepOutputs:
    """Read the sweeps and write ``<name>.html``, ``<name>.md``, ``<name>.csv``, the PNGs and
    ``sweep_figures.json`` into ``out_dir``; ``paths``: the SWEEPs as given (for ``--baseline``)."""
    if not 20 <= dpi <= 600:
        raise ConfigError(f"--dpi must be between 20 and 600, got {dpi}")
    sweeps = load_sweeps(files, labels)
    base = pick_baseline(sweeps, baseline, [str(p) for p in (paths or files)])
    command = "report" if name == "sweep" else name
    title = title or f"llmload {command}: {', '.join(s.label for s in sweeps)} (sweep{'s' * (len(sweeps) > 1)})"
    notes = sweep_notes(sweeps)
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DatasetError(f"--output {out}: cannot create the directory ({exc.strerror})") from None
    from llmload.report.pareto import PARETO_FILE, write_pareto

    pairs = [(s.label, s.data) for s in sweeps]
    pngs = write_sweep_figures(pairs, out, dpi=dpi)
    pareto = write_pareto(pairs, [sweep_group(s.path) for s in sweeps], out, dpi=dpi)
    pngs += pareto
    files_out = [out / f"{name}.html", out / f"{name}.md", out / f"{name}.csv"]
    files_out[0].write_text(render_sweep_html(title, sweeps, base, pngs, notes), encoding="utf-8")
    files_out[1].write_text(render_sweep_markdown(title, sweeps, base, pngs, notes), encoding="utf-8")
    files_out[2].write_text(points_csv([(s.label, s.data) for s in sweeps]), encoding="utf-8")
    return SweepOutputs(sweeps, base, notes, [*files_out, *pngs, out / SERIES_FILE,
                                              *([out / PARETO_FILE] if pareto else [])])


def _titles() -> dict[str, str]:
    from llmload.report.pareto import ENERGY_FIGURE, PARETO_FIGURE

    return dict((*SWEEP_FIGURES, PARETO_FIGURE, ENERGY_FIGURE))


def _simulated_line(sweeps: list[Sweep]) -> str:
    names = ", ".join(s.label + (f" (profile {s.data['sim_profile']})" if s.data.get("sim_profile") else "")
                      for s in sweeps if s.simulated)
    return (f"SIMULATED: {names} ran against llmload's simulated engine, not a real inference server. "
            "The numbers show the method, not real engine performance.") if names else ""


def _sweeps_cells(sweeps: list[Sweep]) -> tuple[list[str], list[list[str]]]:
    header = ["sweep", "file", "model", "backend", "date", "mode", "dimension", "points", "SLO", "engine"]
    body = [[s.label, str(s.path), str(s.data.get("model_id") or "-"), str(s.data.get("backend") or "-"),
             str(s.data.get("date") or "-"), str(s.data.get("mode") or "-"), dimension(s.data),
             str(len(rows_of(s.data))), slo_text(s.data) or "none",
             "SIMULATED (llmload sim)" if s.simulated else str(s.data.get("base_url") or "-")] for s in sweeps]
    return header, body


def render_sweep_markdown(title: str, sweeps: list[Sweep], baseline: int, pngs: list[Path],
                          notes: list[str]) -> str:
    """The Markdown report: sweeps, answers, the points of each sweep, notes, figures."""
    md = [f"# {title}", ""]
    if sim := _simulated_line(sweeps):
        md += [f"**{sim}**", ""]
    md += ["## Sweeps", "", markdown(_sweeps_cells(sweeps)), "", "## Answer" if len(sweeps) == 1 else "## Answers",
           ""]
    for s in sweeps:
        md.append(f"- **{s.label}**: {answer_text(s.data)}")
        md += [f"  - {note}" for note in answer_notes(s.data)]
    if len(sweeps) > 1:
        md += ["", markdown(answers_table([(s.label, s.data) for s in sweeps], baseline))]
    for s in sweeps:
        md += ["", f"## Points: {s.label}", "", markdown(point_table(s.data))]
    md.append("")
    if notes:
        md += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]
    titles = _titles()
    md += ["## Figures", ""] + [f"![{titles.get(p.stem, p.stem)}]({p.name})" for p in pngs]
    return "\n".join(md) + "\n"


def _e(text: object) -> str:
    return html.escape(str(text))


def render_sweep_html(title: str, sweeps: list[Sweep], baseline: int, pngs: list[Path], notes: list[str]) -> str:
    """The self-contained page (inline CSS, figures as base64 PNG data URIs, no script, no external URL)."""
    from llmload.report.html import PAGE_CSS

    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>{_e(title)}</title><style>{PAGE_CSS}{_SWEEP_CSS}</style></head><body>", f"<h1>{_e(title)}</h1>",
             f'<p class="meta">Generated by llmload on {datetime.now():%Y-%m-%d %H:%M:%S}.</p>']
    if sim := _simulated_line(sweeps):
        parts.append(f'<p class="sim">{_e(sim)}</p>')
    parts += ["<h2>Sweeps</h2>", html_table(_sweeps_cells(sweeps))]
    parts.append("<h2>Answer</h2>" if len(sweeps) == 1 else "<h2>Answers</h2>")
    for s in sweeps:
        answer = s.data.get("answer")
        met = isinstance(answer, dict) and bool(answer.get("met"))
        prefix = f"{s.label}: " if len(sweeps) > 1 else ""
        parts.append(f'<p class="answer{"" if met else " missed"}">{_e(prefix + answer_text(s.data))}</p>')
        parts += [f'<p class="note">{_e(note)}</p>' for note in answer_notes(s.data)]
    if len(sweeps) > 1:
        parts.append(html_table(answers_table([(s.label, s.data) for s in sweeps], baseline)))
    for s in sweeps:
        header, body = point_table(s.data)
        limited = [row[header.index("client-limited")] == "yes" for row in body]
        parts += [f"<h2>Points: {_e(s.label)}</h2>", html_table((header, body), limited)]
        if any(limited):
            parts.append('<p class="note">Red rows: client-limited: not taken as the answer (the client, not '
                         "the server, held the load back).</p>")
    parts.append("<h2>Figures</h2>")
    parts += [f'<p class="note">{_e(note)}</p>' for note in notes]
    titles = _titles()
    for png in pngs:
        data = base64.b64encode(png.read_bytes()).decode("ascii")
        name = titles.get(png.stem, png.stem)
        parts.append(f'<figure id="{_e(png.stem)}"><figcaption>{_e(name)}</figcaption>'
                     f'<img alt="{_e(name)}" src="data:image/png;base64,{data}"></figure>')
    parts.append("</body></html>\n")
    return "\n".join(parts)
