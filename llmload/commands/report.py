"""Report on one finished run: a self-contained HTML page (figures embedded, opens offline), the figures as
PNGs, the headline table (terminal, Markdown, CSV) and automatic findings with their numbers: a first-ITL
stall, ITL vs TPOT and why they differ, a heavy TTFT tail, client saturation, failures.

RUN is a result JSON written by 'llmload bench --save-result' (with its .records.jsonl next to it) or by
vLLM's benchmark_serving.py --save-detailed (figures over time are skipped: it has no timestamps), or a records
file or records journal alone (.jsonl/.parquet: what a run killed before its end leaves; the duration is the
records' span).

When the run scraped the server's /metrics (RUN's .server_metrics.jsonl next to its records), the report adds
"Server and client over time" (client throughput and latency, the server's running/waiting requests and KV-cache
usage on one time axis, the saturation onset marked), a "Server metrics" table and findings that read the
server's series: a first-ITL stall that is the engine admitting a new batch, saturation, preemptions or a full
KV cache.

RUN may also be a sweep ('llmload sweep': its sweep.json, or the directory holding it): the report is then the
sweep's answer (the highest load that met the SLO, or why none did), one row per point (client-limited points
marked: never taken as the answer) and latency, goodput and throughput versus the load.

examples:
  llmload report results/vllm-inf-qps-Qwen3-8B-20250101-120000.json --output report/
  llmload report old-vllm-run.json --output report/ --goodput ttft:500 tpot:50
  llmload report sweeps/qwen3-8b/ --output sweep-report/

Writes DIR/report.html, DIR/report.md, DIR/report.csv and DIR/*.png; for a sweep DIR/sweep.html, DIR/sweep.md,
DIR/sweep.csv, DIR/sweep_*.png and DIR/sweep_figures.json.
"""

from __future__ import annotations

import argparse

from llmload.options import argtypes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN",
                        help="result JSON (llmload or vLLM --save-detailed), a records file or journal alone (.jsonl, "
                             ".parquet), or a sweep (sweep.json or its directory)")
    parser.add_argument("--output", "-o", metavar="DIR", default="llmload-report",
                        help="directory for the report (default: %(default)s)")
    parser.add_argument("--label", help="name of the run in the report (default: its label or file name)")
    parser.add_argument("--goodput", nargs="+", metavar="METRIC:MS",
                        help="recompute goodput with these SLOs, e.g. ttft:500 tpot:50 (default: the run's own)")
    parser.add_argument("--dpi", type=argtypes.positive_int, default=100, help="PNG resolution (default: %(default)s)")
    parser.add_argument("--title", help="page title (default: 'llmload report: LABEL')")


def run(args: argparse.Namespace) -> int:
    from llmload.report.build import build
    from llmload.report.sweep import sweep_paths

    sweeps = sweep_paths([args.run])
    if sweeps is not None:
        return _sweep(args, sweeps)
    out = build([args.run], args.output, name="report", title=args.title,
                labels=[args.label] if args.label else None, goodput=args.goodput, dpi=args.dpi)
    print(out.terminal_text())
    print(f"\nWrote {out.files[0]} (self-contained), {out.files[1].name}, {out.files[2].name} "
          f"and {len(out.files) - 3} figures in {out.files[0].parent}")
    return 0


def _sweep(args: argparse.Namespace, files: list) -> int:
    from llmload.common.errors import ConfigError
    from llmload.report.sweep import GOODPUT_REJECTED, build_sweep

    if args.goodput:
        raise ConfigError(GOODPUT_REJECTED)
    out = build_sweep(files, args.output, name="sweep", title=args.title,
                      labels=[args.label] if args.label else None, dpi=args.dpi)
    print(out.terminal_text())
    print(f"\nWrote {out.files[0]} (self-contained), {out.files[1].name}, {out.files[2].name} "
          f"and {sum(f.suffix == '.png' for f in out.files)} figures in {out.files[0].parent}")
    return 0
