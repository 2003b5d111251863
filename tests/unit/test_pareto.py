"""Pareto fronts (``llmload report`` of a sweep): built on sweeps whose points come from the simulator's
virtual-time engine at several batch sizes, the front holds exactly the points no other point beats on both
tokens/s per GPU and tokens/s per user (checked by a second, sort-based method), client-limited points are never
on it, and per-GPU numbers divide by ``--gpus``."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise
from statistics import median

import pytest

from llmload.report.pareto import pareto_front, pareto_groups, point_of
from llmload.sim.config import PROFILES
from llmload.sim.engine import simulate


def sim_row(index: int, max_num_seqs: int, rate: float, n: int = 48, out: int = 64) -> dict:
    """One sweep row measured in virtual time: n requests of 256 prompt tokens at ``rate`` req/s."""
    profile = replace(PROFILES["l40-qwen3-8b"], max_num_seqs=max_num_seqs)
    arrivals = [k / rate for k in range(n)]
    times = simulate(profile, [(a, 256, out) for a in arrivals])
    duration = max(t[-1] for t in times) - arrivals[0]
    tpots = [(t[-1] - t[0]) / (len(t) - 1) * 1000.0 for t in times]
    return {"index": index, "role": "sweep", "request_rate": rate, "max_concurrency": None,
            "output_throughput": n * out / duration, "tpot_ms": {"median": median(tpots)},
            "client_limited": False}


def sort_front(points: list[tuple[float, float]]) -> set[int]:
    """The front another way: by x falling, a point is on it when its y beats every y of a larger x (or it is
    the same point as the last one on it: equal points dominate neither)."""
    order = sorted(range(len(points)), key=lambda i: (-points[i][0], -points[i][1]))
    front, best, last = set(), float("-inf"), None
    for i in order:
        if points[i][1] > best or points[i] == last:
            front.add(i)
            best, last = points[i][1], points[i]
    return front


def test_the_front_is_exactly_the_non_dominated_points() -> None:
    sweeps = [(f"max_num_seqs={m}", {"dimension": "request_rate", "gpus": 1,
                                     "points": [sim_row(k, m, rate) for k, rate in enumerate((2, 4, 8, 16, 32), 1)]})
              for m in (4, 16, 64)]
    (group,) = pareto_groups(sweeps, ["engine"] * 3)
    pts = group["points"]
    assert len(pts) == 15
    xy = [(p["x"], p["y"]) for p in pts]
    on = {i for i, p in enumerate(pts) if p["on_front"]}
    assert on == sort_front(xy) == set(pareto_front(xy))
    # the front trades one for the other: more tokens per GPU only at fewer tokens per user
    front = sorted((pts[i] for i in on), key=lambda p: p["x"])
    assert len(front) >= 3 and all(a["y"] >= b["y"] for a, b in pairwise(front))
    for i in set(range(len(pts))) - on:  # and every point off it is beaten by one on it
        assert any(pts[j]["x"] >= pts[i]["x"] and pts[j]["y"] >= pts[i]["y"] for j in on)


def test_client_limited_points_are_never_on_the_front_and_groups_have_their_own() -> None:
    rows = [sim_row(1, 16, 4), sim_row(2, 16, 64)]
    rows[1]["client_limited"] = True
    rows[1]["output_throughput"] *= 10  # would dominate everything, but the client limited it
    groups = pareto_groups([("a", {"points": rows}), ("b", {"points": [sim_row(1, 4, 8)]})], ["A", "B"])
    assert [g["group"] for g in groups] == ["A", "B"]
    assert [p["on_front"] for p in groups[0]["points"]] == [True, False]
    assert groups[1]["points"][0]["on_front"]


def test_per_gpu_divides_by_the_gpus() -> None:
    row = sim_row(1, 16, 8)
    x, y = point_of(row, {"gpus": 4})
    assert y == pytest.approx(row["output_throughput"] / 4) and x == pytest.approx(1000.0 / row["tpot_ms"]["median"])
    # a row that carries its own per-GPU and per-user numbers (bench's result JSON, --gpus 2) is taken as it is
    assert point_of({**row, "output_throughput_per_gpu": 7.0, "output_throughput_per_user": 3.0}, {"gpus": 4}) == (
        3.0, 7.0)
    assert point_of({"output_throughput": 1.0}, {}) is None  # no TPOT: no point
