"""Run the same workload at a series of loads and answer the capacity question: how much traffic does this
server take before the SLO breaks? Every point is a full 'llmload bench' run (same flags, same result JSON);
sweep.json has one row per point, and figures show latency against the achieved rate and goodput against the
offered load (docs/sweep.md).

With no --base-url/--host, the built-in simulator is started once and swept (its profiles have a knee).

examples:
  llmload sweep --request-rates 1,2,4,8                       # four open-loop points against the simulator
  llmload sweep --concurrencies 8,16,32,64 --base-url http://gpu-box:8000 --model Qwen/Qwen3-8B
  llmload sweep --auto 5                                       # the ceiling at unlimited rate, then 5 rates below
  llmload sweep --slo ttft:500,tpot:50 --goodput-target 0.95  # the highest rate meeting the SLO, to 10%
  llmload sweep --slo ttft:500 --search-over concurrency --precision 2 --processes 2
  llmload sweep --serve-cmd 'vllm serve Qwen/Qwen3-8B --max-num-seqs {max_num_seqs}' \
      --serve-params max_num_seqs=64,128,256 --base-url http://127.0.0.1:8000 --slo ttft:500 --gpus 1
                                                               # one SLO search per server setting

outputs (in --output DIR): sweep.json, point-NN-rate-R.json + .records.jsonl per point,
sweep_latency.png, sweep_throughput.png. 'llmload report DIR' renders it; 'llmload compare A B' overlays sweeps.
With --serve-cmd: settings.json and one setting-NN-.../ folder per setting (its sweep, server.log).

exit codes:
  0  the sweep completed (with --slo: some load met it)
  1  runtime failure (server unreachable, initial test failed, nothing completed; with --serve-cmd: a
     setting's server exited at start-up or never answered, or its sweep failed: the settings before it are kept)
  2  bad usage or input, found before the first request
  3  --slo given and no load tried met it (sweep.json says which were tried)
  130 / 143  interrupted by SIGINT / SIGTERM (sweep.json keeps the points that finished)
"""

from __future__ import annotations

import argparse
from pathlib import Path

from llmload.options import add_bench_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """bench's flags (one option table) plus the sweep's own; a sweep reports p50/p90/p99 by default."""
    from llmload.sweep.plan import add_sweep_arguments

    add_sweep_arguments(parser)
    add_bench_arguments(parser)
    defaults = {"metric_percentiles": ([50.0, 90.0, 99.0], "50,90,99"),
                "percentile_metrics": (["ttft", "tpot", "itl", "e2el"], "ttft,tpot,itl,e2el")}
    parser.set_defaults(**{dest: value for dest, (value, _shown) in defaults.items()})
    for action in parser._actions:  # --help shows the sweep's defaults, not bench's
        if action.dest in defaults and action.help:
            action.help = action.help.replace("%(default)s", defaults[action.dest][1])


def parse_args(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """The flags, and the command line itself: a settings sweep hands it to each setting's sweep."""
    args = parser.parse_args(argv)
    args.command_argv = list(argv)
    return args


def run(args: argparse.Namespace) -> int:
    if args.serve_cmd or args.serve_params or args.trials > 1 or args.resume:
        from llmload.sweep.settings import run_settings

        return run_settings(args)  # no Locust here: each setting's sweep is a process of its own
    from llmload.sweep.runner import run_sweep

    return run_sweep(args, write_figures=_write_figures)


def _write_figures(data: dict, out: Path) -> int:
    """The sweep's latency and throughput figures, by the report's figure code (lazily: matplotlib)."""
    from llmload.report.sweep_figures import write_sweep_figures

    return len(write_sweep_figures([(data["label"], data)], out))
