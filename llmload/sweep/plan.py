"""``llmload sweep``'s flags and their validated plan: which loads, the SLO and its search, warm-up, where the
points go. Every usage error is found here, before the first request (exit 2)."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

from llmload.common.errors import ConfigError
from llmload.core.workload import replays_trace
from llmload.options import argtypes
from llmload.sweep.search import Precision

RATE, CONCURRENCY = "request_rate", "max_concurrency"
#: default points of a search before it gives up and reports the bracket it has
DEFAULT_MAX_POINTS = 12
#: the search's lowest rate, as a share of its start: five halvings below it
RATE_FLOOR_SHARE = 1 / 32
#: the search's highest rate, as a multiple of the unlimited-rate ceiling
RATE_CAP_FACTOR = 4.0
MAX_CONCURRENCY_CAP = 4096


def rate_list(text: str) -> list[float]:
    """``1,2,4,8``: request rates, increasing, each > 0 (``inf`` allowed, last)."""
    values = [argtypes.rate(part) for part in _parts(text)]
    _check_increasing(values)
    return values


def concurrency_list(text: str) -> list[int]:
    values = [argtypes.positive_int(part) for part in _parts(text)]
    _check_increasing(values)
    return values


def _parts(text: str) -> list[str]:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise argtypes.ArgumentTypeError("expected a comma-separated list, e.g. 1,2,4,8")
    return parts


def _check_increasing(values: list[Any]) -> None:
    if any(b <= a for a, b in pairwise(values)):
        raise argtypes.ArgumentTypeError(f"expected increasing values, got {','.join(f'{v:g}' for v in values)}")


def precision(text: str) -> Precision:
    try:
        return Precision.parse(text)
    except ValueError as exc:
        raise argtypes.ArgumentTypeError(str(exc)) from None


def add_sweep_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags only sweep has (bench's come from the option table)."""
    group = parser.add_argument_group("sweep (docs/sweep.md)")
    loads = group.add_mutually_exclusive_group()
    loads.add_argument("--request-rates", type=rate_list, metavar="R1,R2,...",
                       help="one open-loop point per request rate, e.g. 1,2,4,8")
    loads.add_argument("--concurrencies", type=concurrency_list, metavar="C1,C2,...",
                       help="one point per --max-concurrency, e.g. 8,16,32,64 (at --request-rate, default inf)")
    loads.add_argument("--auto", type=argtypes.positive_int, metavar="N",
                       help="a run at unlimited rate finds the throughput ceiling, then N open-loop rates evenly "
                            "spaced up to it (ceiling/N, 2*ceiling/N, ..., ceiling)")
    group.add_argument("--slo", nargs="+", metavar="METRIC:MS",
                       help="SLOs every request must meet, e.g. ttft:500,tpot:50 (metrics ttft, tpot, e2el). "
                            "Alone: search for the highest load meeting them; with a list: judge each point")
    group.add_argument("--goodput-target", type=argtypes.fraction, default=0.95, metavar="F",
                       help="share of the requests sent that must meet every SLO (default: %(default)s)")
    group.add_argument("--search-over", choices=("rate", "concurrency"), default="rate",
                       help="what the SLO search varies (default: %(default)s)")
    group.add_argument("--precision", type=precision, metavar="P",
                       help="the search stops when its bracket is this narrow: 0.5 (req/s or users) or 10%% of "
                            "the bracket's upper end (default: 10%% for rates, 1 user for concurrencies)")
    group.add_argument("--search-start", type=argtypes.positive, metavar="LOAD",
                       help="the search's first load (default: the rate: the unlimited-rate ceiling, measured "
                            "first; the concurrency: 1)")
    group.add_argument("--search-max", type=argtypes.positive, metavar="LOAD",
                       help="the highest load the search tries (default: 4x the ceiling; 4096 users)")
    group.add_argument("--max-points", type=argtypes.positive_int, default=DEFAULT_MAX_POINTS, metavar="N",
                       help="the search stops after N points and reports its bracket (default: %(default)s)")
    group.add_argument("--warmup", type=argtypes.non_negative_int, default=0, metavar="N",
                       help="send N more requests first at each point, left out of its statistics (default: 0)")
    group.add_argument("--duration", type=argtypes.positive_seconds, metavar="SECONDS",
                       help="each rate point sends rate x SECONDS requests (prompts reused when the dataset "
                            "has fewer) instead of --num-prompts")
    group.add_argument("--output", "-o", metavar="DIR", default="llmload-sweep",
                       help="directory for sweep.json, each point's result JSON and records, and the figures "
                            "(default: %(default)s)")
    group.add_argument("--no-figures", action="store_true", help="write sweep.json and the points only")
    serve = parser.add_argument_group("server settings (docs/sweep.md, 'Server settings')")
    serve.add_argument("--serve-cmd", metavar="CMD",
                       help="start the server with this command for every setting, e.g. 'vllm serve M "
                            "--max-num-seqs {max_num_seqs}' ({name}: a --serve-params value); needs --base-url")
    serve.add_argument("--serve-params", nargs="+", metavar="NAME=V1,V2",
                       help="the settings: every combination of these values, e.g. max_num_seqs=64,128,256")
    serve.add_argument("--serve-ready-timeout", type=argtypes.positive_seconds, default=600.0, metavar="SECONDS",
                       help="how long a server may take to answer /health or /v1/models (default: %(default)s)")
    serve.add_argument("--serve-stop-timeout", type=argtypes.positive_seconds, default=30.0, metavar="SECONDS",
                       help="after SIGTERM, seconds before the server's process group is killed (default: "
                            "%(default)s)")
    serve.add_argument("--trials", type=argtypes.positive_int, default=1, metavar="N",
                       help="run each setting's sweep N times and report the spread (default: %(default)s)")
    serve.add_argument("--resume", action="store_true",
                       help="skip the settings and trials already finished in --output")


#: bench flags a sweep sets itself, or that a series of points cannot honour
_REFUSED = {
    "result_filename": "--result-filename: a sweep names each point's file itself (point-NN-...json)",
    "fail_on_slo": "--fail-on-slo: use --slo with --goodput-target; the sweep exits 3 when no load meets it",
    "fail_on_error_rate": "--fail-on-error-rate judges one run: not available for a sweep",
    "rate_shape": "--rate-shape brings its own rates: a sweep sets the rate of each point",
    "ramp_up_strategy": "--ramp-up-strategy: a sweep sets the rate of each point",
    "prometheus_port": "--prometheus-port is not available for a sweep yet (each point's result has the "
                       "server's metrics)",
    "goodput": "--goodput: a sweep takes its SLOs from --slo",
    "append_result": "--append-result: a sweep writes one result JSON per point (and sweep.json)",
    "probe_request_rate": "--probe-request-rate is a llmload bench flag: a sweep's points send no probes",
    "num_warmups": "--num-warmups: use the sweep's own --warmup N",
}


@dataclass(frozen=True)
class SweepPlan:
    """What the sweep does, checked; ``run`` is the bench plan every point derives its own from."""

    run: Any
    mode: str
    dimension: str
    loads: tuple[float, ...]
    auto: int | None
    slo: dict[str, Any] | None
    goodput_target: float
    precision: Precision
    search_start: float | None
    search_max: float | None
    max_points: int
    warmup: int
    duration: float | None
    output: Path
    figures: bool

    @property
    def searching(self) -> bool:
        return self.mode == "search"


def _slo_items(items: list[str] | None) -> list[str]:
    """``--slo ttft:500,tpot:50`` (commas or spaces) as ``--goodput``'s ``METRIC:MS`` items."""
    return [part for item in items or [] for part in item.replace(",", " ").split()]


def _slos(items: list[str]) -> dict[str, Any] | None:
    from llmload.metrics import parse_goodput

    if not items:
        return None
    try:
        return parse_goodput(items)
    except ConfigError as exc:
        raise ConfigError(str(exc).replace("--goodput", "--slo")) from None


def _check_refused(args: argparse.Namespace) -> None:
    for dest, why in _REFUSED.items():
        if getattr(args, dest, None):
            raise ConfigError(why)
    if replays_trace(args):
        raise ConfigError(f"--dataset-name {args.dataset_name} brings its own arrival times: a sweep sets each "
                          "point's load")
    if args.result_dir != ".":
        raise ConfigError("--result-dir: a sweep writes its points under --output DIR")


def _mode(args: argparse.Namespace) -> tuple[str, str, tuple[float, ...]]:
    if args.request_rates:
        if args.request_rate != math.inf:
            raise ConfigError("--request-rates sets each point's rate: drop --request-rate")
        return "rates", RATE, tuple(args.request_rates)
    if args.concurrencies:
        if args.max_concurrency is not None:
            raise ConfigError("--concurrencies sets each point's --max-concurrency: drop --max-concurrency")
        return "concurrencies", CONCURRENCY, tuple(float(c) for c in args.concurrencies)
    if args.auto:
        return "auto", RATE, ()
    if args.slo:
        dimension = RATE if args.search_over == "rate" else CONCURRENCY
        if dimension == RATE and args.request_rate != math.inf:
            raise ConfigError("the search sets each point's rate: drop --request-rate")
        if dimension == CONCURRENCY and args.max_concurrency is not None:
            raise ConfigError("the search sets each point's --max-concurrency: drop --max-concurrency")
        return "search", dimension, ()
    raise ConfigError("say which loads: --request-rates R1,R2,..., --concurrencies C1,C2,..., --auto N, "
                      "or --slo METRIC:MS,... to search for the highest load meeting it")


def _check_think(args: argparse.Namespace, dimension: str) -> None:
    if args.think_time and dimension == RATE:
        raise ConfigError("--think-time makes a closed loop: sweep it with --concurrencies (or --slo with "
                          "--search-over concurrency)")
    if args.duration and dimension == CONCURRENCY:
        raise ConfigError("--duration sizes rate points (rate x seconds requests): concurrency points run "
                          "--num-prompts")


def build_sweep_plan(args: argparse.Namespace) -> SweepPlan:
    """Validate the flags (exit 2 on any problem), then the bench plan every point derives from."""
    from llmload.bench.plan import RunPlan

    _check_refused(args)
    mode, dimension, loads = _mode(args)
    _check_think(args, dimension)
    items = _slo_items(args.slo)
    slo = _slos(items)
    output = Path(args.output)
    args.result_dir = str(output)
    args.save_result = True
    # every point's result JSON judges goodput by the sweep's SLOs
    args.goodput = items or None
    run = RunPlan(args)
    default_precision = Precision(0.1, True) if dimension == RATE else Precision(1.0, False)
    return SweepPlan(run=run, mode=mode, dimension=dimension, loads=loads, auto=args.auto, slo=slo,
                     goodput_target=args.goodput_target, precision=args.precision or default_precision,
                     search_start=args.search_start, search_max=args.search_max, max_points=args.max_points,
                     warmup=args.warmup, duration=args.duration, output=output, figures=not args.no_figures)
