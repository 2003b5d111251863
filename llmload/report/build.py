"""The pipeline behind ``llmload report`` and ``llmload compare``: load, compute, find, draw, write."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from llmload.common.errors import ConfigError, DatasetError
from llmload.metrics import parse_goodput
from llmload.report.findings import Finding, compare_findings, run_findings
from llmload.report.loader import load_runs
from llmload.report.parts import model_tables_html, model_tables_markdown
from llmload.report.server_findings import server_findings
from llmload.report.server_tables import server_html, server_markdown, server_table, with_server_rows
from llmload.report.sessions import session_tables_html, session_tables_markdown
from llmload.report.stats import RunStats
from llmload.report.tables import Table, build_table, to_csv, to_html, to_markdown, to_terminal
from llmload.report.turns import turn_tables_html, turn_tables_markdown


@dataclass
class Outputs:
    stats: list[RunStats]
    table: Table
    findings: list[Finding]
    notes: list[str]
    files: list[Path]
    #: the "Server metrics" table (None when no run has server metrics)
    server: Table | None = None

    def terminal_text(self) -> str:
        lines = [to_terminal(self.table), ""]
        if self.server is not None:
            lines += ["Server metrics:", to_terminal(self.server), ""]
        lines.append("Findings:")
        lines += [f"  - {f.text()}" for f in self.findings] or ["  none (no stall, TTFT tail, ITL/TPOT gap, "
                                                                  "client saturation or failures)"]
        if any(s.run.simulated for s in self.stats):
            lines.append("Note: SIMULATED engine results (llmload sim), not a real server.")
        lines += [f"Note: {n}" for n in self.notes]
        return "\n".join(lines)




def pick_baseline(stats: list[RunStats], baseline: str | None, paths: list[str]) -> int:
    """``--baseline``: a run label, a RUN path as given, or a 1-based position; default the first run."""
    if baseline is None:
        return 0
    for i, s in enumerate(stats):
        if baseline in (s.run.label, paths[i], str(s.run.path), s.run.path.name):
            return i
    if baseline.isdigit() and 1 <= int(baseline) <= len(stats):
        return int(baseline) - 1
    labels = ", ".join(s.run.label for s in stats)
    raise ConfigError(f"--baseline {baseline!r}: not a run label ({labels}), RUN path or position 1..{len(stats)}")


def build(paths: list[str], out_dir: str | Path, *, name: str, title: str | None, labels: list[str] | None = None,
          baseline: str | None = None, goodput: list[str] | None = None, dpi: int = 100) -> Outputs:
    """Load the runs and write ``<name>.html``, ``<name>.md``, ``<name>.csv`` and the PNGs into ``out_dir``."""
    from llmload.report.energy_figures import gpu_findings
    from llmload.report.figures import render_all
    from llmload.report.html import render_html

    if not 20 <= dpi <= 600:
        raise ConfigError(f"--dpi must be between 20 and 600, got {dpi}")
    slos = parse_goodput(goodput)
    runs = load_runs(paths, labels)
    title = title or f"llmload {name}: {', '.join(run.label for run in runs)}"
    stats = [RunStats(run, slos) for run in runs]
    base = pick_baseline(stats, baseline, paths)
    table = build_table(stats, base)
    if len(stats) > 1:
        table = with_server_rows(table, stats)
    server = server_table(stats, base)
    findings = [f for s in stats for f in (*run_findings(s), *server_findings(s), *gpu_findings(s))]
    if len(stats) > 1:
        findings += compare_findings(stats, base)
    notes = [f"{run.label}: {note}" for run in runs for note in run.notes]

    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DatasetError(f"--output {out}: cannot create the directory ({exc.strerror})") from None
    figures, fig_notes = render_all(stats, out, dpi=dpi)
    notes += fig_notes

    md = [f"# {title}", ""]
    if any(s.run.simulated for s in stats):
        md += ["**SIMULATED**: runs against llmload's simulated engine, not a real inference server.", ""]
    md += [to_markdown(table), *turn_tables_markdown(stats), *session_tables_markdown(stats),
           *model_tables_markdown(stats),
           *server_markdown(stats, server), "## Findings", ""]
    md += [f"- {f.text()}" for f in findings] or ["- none"]
    if notes:
        md += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    md += ["", "## Figures", ""] + [f"![{f.title}]({f.path.name})" for f in figures]
    files = [out / f"{name}.html", out / f"{name}.md", out / f"{name}.csv"]
    files[0].write_text(render_html(title, stats, to_html(table), findings, figures, notes, base,
                                    turns_html=turn_tables_html(stats) + session_tables_html(stats)
                                    + model_tables_html(stats),
                                    server_html=server_html(stats, server)),
                        encoding="utf-8")
    files[1].write_text("\n".join(md) + "\n", encoding="utf-8")
    files[2].write_text(to_csv(table), encoding="utf-8")
    return Outputs(stats, table, findings, notes, files + [f.path for f in figures], server)
