"""Which points a sweep runs, in order: a list of loads, ``--auto`` (the ceiling, then rates below it), or the
SLO search (:mod:`llmload.sweep.search`). Each driver returns the sweep's answer (None without SLOs)."""

from __future__ import annotations

import math

from llmload.bench.console import log
from llmload.sweep.plan import CONCURRENCY, MAX_CONCURRENCY_CAP, RATE_CAP_FACTOR, RATE_FLOOR_SHARE
from llmload.sweep.point import Point, Session
from llmload.sweep.search import MISS_CLIENT, MISS_SATURATION, MISS_SLO, Answer, Bisection, Trial, answer_from


def trial_of(point: Point, load: float) -> Trial:
    """A point's verdict for the bracket: a point the client limited or the server was saturated at is a miss."""
    row = point.row
    if row["client_limited"]:
        return Trial(load, False, row["index"], MISS_CLIENT)
    if row["saturated"]:
        return Trial(load, False, row["index"], MISS_SATURATION)
    return Trial(load, bool(row["meets_target"]), row["index"], "" if row["meets_target"] else MISS_SLO)


def run_list(session: Session, loads: list[float]) -> Answer | None:
    """One point per load, in order; with ``--stop-on-saturation`` no load above a saturated point runs."""
    sweep = session.sweep
    trials = []
    total = len(session.rows) + len(loads)
    for k, load in enumerate(loads):
        if session.interrupted:
            break
        point = session.run_point(load, "sweep", of=f"/{total}")
        trials.append(trial_of(point, load))
        if sweep.run.args.stop_on_saturation and point.row["saturated"] and k + 1 < len(loads):
            log(f"--stop-on-saturation: the server was saturated at {load:g}; the {len(loads) - k - 1} higher "
                "loads are not run")
            break
    return answer_from(trials, sweep.dimension) if sweep.slo and trials else None


def measure_ceiling(session: Session) -> float | None:
    """A point at unlimited rate: the server's request throughput ceiling (None when nothing completed)."""
    point = session.run_point(math.inf, "ceiling")
    ceiling = point.row["achieved_rate"]
    if not ceiling or not point.row["completed"]:
        log("error: the unlimited-rate run completed no request: no ceiling to sweep below")
        return None
    log(f"Throughput ceiling: {ceiling:.3g} req/s at unlimited rate")
    return float(ceiling)


def auto_rates(ceiling: float, count: int) -> list[float]:
    """``count`` open-loop rates evenly spaced up to the ceiling: ceiling*k/count (4 significant digits)."""
    return [float(f"{ceiling * k / count:.4g}") for k in range(1, count + 1)]


def run_auto(session: Session) -> Answer | None:
    ceiling = measure_ceiling(session)
    if ceiling is None or session.interrupted:
        return None
    return run_list(session, auto_rates(ceiling, session.sweep.auto or 1))


def run_search(session: Session) -> Answer:
    """Bracket, then bisect, to the highest load whose goodput meets the target (module docstring of
    :mod:`llmload.sweep.search`)."""
    sweep = session.sweep
    concurrency = sweep.dimension == CONCURRENCY
    start = sweep.search_start
    cap = sweep.search_max
    if start is None and not concurrency:
        ceiling = measure_ceiling(session)
        if ceiling is None:
            return Answer(sweep.dimension, None, None, None, None, None, str(sweep.precision), None,
                          "the unlimited-rate run completed no request")
        start = ceiling
        cap = cap or ceiling * RATE_CAP_FACTOR
    start = start or 1.0
    cap = cap or (MAX_CONCURRENCY_CAP if concurrency else start * RATE_CAP_FACTOR)
    floor = 1.0 if concurrency else start * RATE_FLOOR_SHARE
    search = Bisection(start, sweep.precision, floor, cap, sweep.max_points, integer=concurrency)
    while not session.interrupted:
        load = search.next_load()
        if load is None:
            break
        point = session.run_point(load, "search", stop_on_saturation=True,
                                  of=f" (search {len(search.trials) + 1}, at most {sweep.max_points})")
        trial = trial_of(point, load)
        search.record(trial)
        log(f"  {_verdict(point, trial, sweep.goodput_target)}")
    if session.interrupted and not search.stopped:
        search.stopped = "interrupted"
    return search.answer(sweep.dimension)


def _verdict(point: Point, trial: Trial, target: float) -> str:
    shown = "n/a" if point.goodput is None else f"{point.goodput:.1%}"
    if trial.met:
        return f"met: goodput {shown} >= {target:.0%}"
    why = {MISS_CLIENT: "the client was the bottleneck (not taken as an answer)",
           MISS_SATURATION: "the server was saturated"}.get(trial.why_missed, f"goodput {shown} < {target:.0%}")
    return f"missed: {why}"


def run_points(session: Session) -> Answer | None:
    """The sweep's points for its mode."""
    sweep = session.sweep
    if sweep.mode == "search":
        return run_search(session)
    if sweep.mode == "auto":
        return run_auto(session)
    return run_list(session, list(sweep.loads))

