"""``llmload sweep``: set up once (target, workload, initial test, workers), run the points, write
``sweep.json`` and the figures, print the table and the answer (docs/sweep.md has the exit codes)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path
from typing import Any

from llmload.bench.console import log
from llmload.sweep.plan import SweepPlan, build_sweep_plan
from llmload.sweep.search import Answer

#: exit code when an SLO was given and no load met it
NO_LOAD_MET = 3


#: writes a sweep's figures into a folder and returns how many (the report layer's, handed in by the command:
#: the sweep does not import the report)
FigureWriter = Callable[[dict[str, Any], Path], int]


def run_sweep(args: argparse.Namespace, write_figures: FigureWriter | None = None) -> int:
    from llmload.processes.locust_import import import_locust

    import_locust()  # Locust monkey-patches the standard library with gevent on import: before anything else runs
    if args.worker:  # a sweep's workers are bench workers: every point is a job from the master
        from llmload.bench.run import run_worker

        return run_worker(args)

    from llmload.bench.run import with_interrupts

    sweep = build_sweep_plan(args)
    return with_interrupts(lambda interrupts: _sweep(sweep, interrupts, write_figures), "before the first point")


def _sweep(sweep: SweepPlan, interrupts: Any, write_figures: FigureWriter | None) -> int:
    from llmload.bench.run import set_up
    from llmload.sweep.drivers import run_points
    from llmload.sweep.point import Session

    plan = sweep.run
    with ExitStack() as stack:
        ready = set_up(plan, interrupts, stack, extra=sweep.warmup)
        run, user, env, master = ready.run, ready.user, ready.env, ready.master
        target, workload = run.target, run.workload
        session = Session(sweep, target, workload, user, env, master, interrupts, stack)
        # sweep.json after every point: a sweep killed outright still leaves the points it finished
        session.after_point = lambda: _write_json(sweep, sweep_data(sweep, run, session.rows, None,
                                                                    interrupted=session.interrupted,
                                                                    finished=False))
        answer: Answer | None = None
        try:
            answer = run_points(session)
        finally:
            data = sweep_data(sweep, run, session.rows, answer, interrupted=session.interrupted)
            _write(sweep, data, write_figures)
    print(format_table(data), flush=True)
    return _exit_code(sweep, data, interrupts)


def sweep_data(sweep: SweepPlan, run: Any, rows: list[dict[str, Any]], answer: Answer | None, *,
               interrupted: bool, finished: bool = True) -> dict[str, Any]:
    """``sweep.json``'s content (keys: :mod:`llmload.sweep.table`)."""
    from llmload.sweep.table import SWEEP_KIND, SWEEP_VERSION

    args, target = sweep.run.args, run.target
    from llmload.metrics import deployment_from

    profile = target.sim_profile  # what llmload sim says of itself (built in, or found at --base-url)
    ceiling = next((r["achieved_rate"] for r in rows if r["role"] == "ceiling"), None)
    deployment = deployment_from(args)
    return {
        "kind": SWEEP_KIND, "version": SWEEP_VERSION, "date": datetime.now().strftime("%Y%m%d-%H%M%S"),
        "label": args.label or profile or args.backend,
        "backend": args.backend, "model_id": target.model, "base_url": target.shown,
        "dataset_name": args.dataset_name, "num_prompts": run.num_prompts, "warmup": sweep.warmup,
        "duration_per_point": sweep.duration,
        "simulated": bool(target.simulator), "sim_profile": profile,
        "mode": sweep.mode, "dimension": sweep.dimension, "slo": sweep.slo,
        "goodput_target": sweep.goodput_target if sweep.slo else None,
        "precision": str(sweep.precision) if sweep.searching else None,
        "ceiling": ceiling, "answer": answer_dict(answer, rows, sweep), "interrupted": interrupted, "finished": finished,
        "gpus": deployment.gpus, "gpu_type": deployment.gpu_type, "gpu_hour_cost": deployment.gpu_hour_cost,
        "points": rows,
    }


def answer_dict(answer: Answer | None, rows: list[dict[str, Any]], sweep: SweepPlan) -> dict[str, Any] | None:
    """The answer with a one-line reason a reader can check against the rows."""
    if answer is None:
        return None
    out = answer.to_dict()
    by_index = {r["index"]: r for r in rows}
    unit = "users" if sweep.dimension == "max_concurrency" else "req/s"
    parts = []
    if answer.lower_point is not None:
        parts.append(f"met at {answer.lower:g} {unit} (goodput {_pct(by_index[answer.lower_point])})")
    if answer.upper_point is not None:
        why = {"client": "the client was the bottleneck", "saturation": "the server was saturated"}.get(
            answer.limited_by or "", f"goodput {_pct(by_index[answer.upper_point])}")
        parts.append(f"missed at {answer.upper:g} {unit} ({why})")
    if answer.reason:
        parts.append(answer.reason)
    out["reason"] = "; ".join(parts)
    met = by_index.get(answer.lower_point) if answer.lower_point is not None else None
    for key in ("output_throughput_per_gpu", "cost_per_million_output_tokens", "cost_per_million_total_tokens"):
        out[key] = met.get(key) if met else None  # at the answer: the point that met
    return out


def _pct(row: dict[str, Any]) -> str:
    return "n/a" if row.get("goodput") is None else f"{row['goodput']:.1%}"


def _write_json(sweep: SweepPlan, data: dict[str, Any]) -> bool:
    from llmload.sweep.table import write_sweep

    path = sweep.output / "sweep.json"
    try:
        write_sweep(path, data)
    except OSError as exc:
        log(f"error: cannot write {path}: {exc.strerror or exc}")
        return False
    return True


def _write(sweep: SweepPlan, data: dict[str, Any], write_figures: FigureWriter | None) -> None:
    """sweep.json first (never lost to a figure's failure), then the figures."""
    if not _write_json(sweep, data):
        return
    log(f"Saved {sweep.output / 'sweep.json'} ({len(data['points'])} points)")
    if not sweep.figures or not data["points"] or write_figures is None:
        return
    try:
        written = write_figures(data, sweep.output)
        log(f"Wrote {written} figures in {sweep.output}")
    except Exception as exc:  # a figure must never cost the sweep its results
        log(f"warning: the sweep's figures were not written: {exc}")


def format_table(data: dict[str, Any]) -> str:
    """The points, one line each, and the answer."""
    concurrency = data["dimension"] == "max_concurrency"
    head = f"{'#':>3} {'role':<8} {'offered':>10} {'req/s':>8} {'out tok/s':>10} {'TTFT p50':>9} {'TTFT p99':>9} " \
           f"{'TPOT p50':>9} {'E2E p50':>9} {'goodput':>8} {'failed':>6}  notes"
    lines = ["=" * 20 + " Sweep Result " + "=" * 20, head]
    for r in data["points"]:
        offered = f"c={r['max_concurrency']}" if concurrency else str(r["request_rate"])
        notes = ", ".join(n for n, on in (("client-limited", r["client_limited"]), ("saturated", r["saturated"]),
                                          ("stopped early", r["stopped_on_saturation"])) if on)
        lines.append(f"{r['index']:>3} {r['role']:<8} {offered:>10} {_f(r['achieved_rate'])} "
                     f"{_f(r['output_throughput'], 10)} {_f(r['ttft_ms'].get('median'), 9)} "
                     f"{_f(r['ttft_ms'].get('p99'), 9)} {_f(r['tpot_ms'].get('median'), 9)} "
                     f"{_f(r['e2el_ms'].get('median'), 9)} {_pct(r) if data['slo'] else '-':>8} "
                     f"{r['failed'] + r['cut_off']:>6}  {notes}")
    lines.append(answer_line(data))
    return "\n".join(line for line in lines if line)


def answer_line(data: dict[str, Any]) -> str:
    answer = data.get("answer")
    if not answer:
        return ""
    slo = ", ".join(f"{k}<={v:g} ms" for k, v in (data["slo"] or {}).items() if not isinstance(v, dict))
    what = "concurrency" if data["dimension"] == "max_concurrency" else "request rate"
    sim = " [simulated]" if data.get("simulated") else ""
    target = f"{slo} for >= {data['goodput_target']:.0%} of requests"
    if answer["met"]:
        cost = answer.get("cost_per_million_output_tokens")
        priced = f"; ${cost:.4g} per 1M output tokens there" if cost is not None else ""
        return f"Highest {what} meeting {target}: {answer['value']:g}{sim} ({answer['reason']}){priced}"
    return f"No {what} tried met {target}{sim} ({answer['reason']})"


def _f(value: Any, width: int = 8) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return f"{'-':>{width}}"
    return f"{value:>{width}.2f}"


def _exit_code(sweep: SweepPlan, data: dict[str, Any], interrupts: Any) -> int:
    from llmload.processes.interrupts import exit_code

    if interrupts.signum is not None:
        log("Interrupted: sweep.json holds the points that finished")
        return exit_code(interrupts.signum)
    if not any(r["completed"] for r in data["points"]):
        log("error: no request completed at any point")
        return 1
    answer = data.get("answer")
    if sweep.slo and answer is not None and not answer["met"]:
        return NO_LOAD_MET
    return 0
