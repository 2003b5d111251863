"""Compare runs side by side: the report's figures overlaid (one colour per run), a table of duration,
req/s, output tok/s, TTFT mean/median/p99/std, TPOT, TPOT excl. 1st ITL, ITL, E2E, goodput and failures
with relative differences against a baseline run, and automatic findings per run and across runs. Runs that
scraped the server's /metrics add its peak running/waiting requests, peak KV-cache usage, preemptions and
prefix-cache hit rate to the table, a "Server metrics" table, and their running/waiting requests overlaid in one
figure.

Each RUN is a result JSON written by 'llmload bench --save-result' (records file next to it) or by vLLM's
benchmark_serving.py --save-detailed, or a records file or records journal alone (.jsonl/.parquet); the kinds can
be mixed.

Sweeps ('llmload sweep': each RUN a sweep.json or the directory holding it) compare the same way: each sweep's
answer side by side (with its difference to the baseline's), the points of each, and the sweep figures
overlaid. Sweeps and runs cannot be mixed.

examples:
  llmload compare vllm.json sglang.json max.json --output cmp/
  llmload compare a.json b.json --labels before,after --baseline after --goodput ttft:500
  llmload compare sweeps/vllm/ sweeps/sglang/ --labels vllm,sglang --output cmp/

Prints the table and writes DIR/compare.html (self-contained), DIR/compare.md, DIR/compare.csv, DIR/*.png.
"""

from __future__ import annotations

import argparse

from llmload.options import argtypes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", metavar="RUN",
                        help="result JSONs (llmload or vLLM --save-detailed), records files or journals (.jsonl, "
                             ".parquet), or sweeps (sweep.json or its directory)")
    parser.add_argument("--output", "-o", metavar="DIR", default="llmload-compare",
                        help="directory for the comparison (default: %(default)s)")
    parser.add_argument("--baseline", metavar="RUN",
                        help="run to compare against: its label, path or 1-based position (default: the first)")
    parser.add_argument("--labels", help="comma-separated run names, in RUN order (default: each run's label)")
    parser.add_argument("--goodput", nargs="+", metavar="METRIC:MS",
                        help="recompute every run's goodput with these SLOs, e.g. ttft:500 tpot:50")
    parser.add_argument("--dpi", type=argtypes.positive_int, default=100, help="PNG resolution (default: %(default)s)")
    parser.add_argument("--title", default="llmload compare", help="page title (default: %(default)s)")


def run(args: argparse.Namespace) -> int:
    from llmload.common.errors import ConfigError
    from llmload.report.build import build
    from llmload.report.sweep import sweep_paths

    if len(args.runs) < 2:
        raise ConfigError("compare needs at least two RUNs (use 'llmload report RUN' for one)")
    labels = [x.strip() for x in args.labels.split(",")] if args.labels else None
    if labels is not None and len(labels) != len(args.runs):
        raise ConfigError(f"--labels: {len(labels)} names for {len(args.runs)} runs")
    sweeps = sweep_paths(args.runs)
    if sweeps is not None:
        return _sweeps(args, sweeps, labels)
    out = build(args.runs, args.output, name="compare", title=args.title, labels=labels,
                baseline=args.baseline, goodput=args.goodput, dpi=args.dpi)
    print(out.terminal_text())
    print(f"\nWrote {out.files[0]} (self-contained), {out.files[1].name}, {out.files[2].name} "
          f"and {len(out.files) - 3} figures in {out.files[0].parent}")
    return 0


def _sweeps(args: argparse.Namespace, files: list, labels: list[str] | None) -> int:
    from llmload.common.errors import ConfigError
    from llmload.report.sweep import GOODPUT_REJECTED, build_sweep

    if args.goodput:
        raise ConfigError(GOODPUT_REJECTED)
    out = build_sweep(files, args.output, name="compare", title=args.title, labels=labels,
                      baseline=args.baseline, dpi=args.dpi, paths=args.runs)
    print(out.terminal_text())
    print(f"\nWrote {out.files[0]} (self-contained), {out.files[1].name}, {out.files[2].name} "
          f"and {sum(f.suffix == '.png' for f in out.files)} figures in {out.files[0].parent}")
    return 0
