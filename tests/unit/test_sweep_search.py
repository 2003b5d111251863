"""The SLO search's bracketing and bisection (llmload.sweep.search), driven by known goodput curves."""

from __future__ import annotations

import pytest

from llmload.sweep.search import MISS_CLIENT, MISS_SLO, Bisection, Precision, Trial, answer_from, bracket


def search_with(meets, start: float, precision: str = "10%", *, integer: bool = False, floor: float = 0.01,
                cap: float = 1e6, max_points: int = 30, why_missed=lambda load: MISS_SLO) -> tuple[Bisection, list]:
    search = Bisection(start, Precision.parse(precision), floor, cap, max_points, integer=integer)
    tried = []
    while (load := search.next_load()) is not None:
        tried.append(load)
        met = meets(load)
        search.record(Trial(load, met, len(tried), "" if met else why_missed(load)))
    return search, tried


@pytest.mark.parametrize("threshold", [0.37, 3.1, 4.65, 17.0, 250.0])
@pytest.mark.parametrize("start", [1.0, 4.14, 100.0])
def test_answer_is_within_precision_below_the_threshold(threshold: float, start: float) -> None:
    search, tried = search_with(lambda load: load <= threshold, start)
    answer = search.answer("request_rate")
    assert answer.met
    assert answer.value <= threshold < answer.upper
    assert answer.upper - answer.value <= 0.1 * answer.upper + 1e-9
    assert answer.lower_point is not None and tried[answer.lower_point - 1] == answer.value


def test_absolute_precision() -> None:
    search, _ = search_with(lambda load: load <= 7.3, 2.0, precision="0.25")
    answer = search.answer("request_rate")
    assert answer.value <= 7.3 < answer.upper <= answer.value + 0.25


def test_no_load_meets_gives_an_answer_without_a_value() -> None:
    search, tried = search_with(lambda load: False, 8.0, floor=8.0 / 32)
    answer = search.answer("request_rate")
    assert not answer.met and answer.value is None
    assert answer.upper == min(tried) and "no load met" in answer.reason
    assert min(tried) >= 8.0 / 32


def test_everything_meets_stops_at_the_cap() -> None:
    search, tried = search_with(lambda load: True, 2.0, cap=20.0)
    answer = search.answer("request_rate")
    assert answer.value == 20.0 and answer.upper is None and answer.limited_by == "max_load"
    assert max(tried) == 20.0


def test_max_points_reports_the_bracket_so_far() -> None:
    search, tried = search_with(lambda load: load <= 3.0, 1.0, precision="0.001", max_points=5)
    answer = search.answer("request_rate")
    assert len(tried) == 5 and "max-points" in answer.reason
    assert answer.value <= 3.0 < answer.upper


@pytest.mark.parametrize("threshold", [1, 2, 7, 33, 100])
def test_concurrency_search_finds_the_exact_integer(threshold: int) -> None:
    search, tried = search_with(lambda c: c <= threshold, 1.0, precision="1", integer=True)
    answer = search.answer("max_concurrency")
    assert answer.value == threshold and answer.upper == threshold + 1
    assert all(float(c).is_integer() for c in tried)


def test_concurrency_one_already_misses() -> None:
    search, tried = search_with(lambda c: False, 1.0, precision="1", integer=True, floor=1.0)
    assert tried == [1.0] and not search.answer("max_concurrency").met


def test_a_client_limited_point_is_never_the_answer() -> None:
    # goodput would pass up to 10, but from 6 on the client limited the point: the answer stays below 6
    search, _ = search_with(lambda load: load < 6, 4.0, why_missed=lambda load: MISS_CLIENT if load >= 6 else MISS_SLO)
    answer = search.answer("request_rate")
    assert answer.value < 6 <= answer.upper and answer.limited_by == MISS_CLIENT


def test_a_noisy_pass_above_a_miss_does_not_move_the_bracket() -> None:
    trials = [Trial(4.0, True, 1), Trial(8.0, False, 2), Trial(6.0, False, 3), Trial(7.0, True, 4)]
    lower, upper = bracket(trials)
    assert (lower.load, upper.load) == (4.0, 6.0)
    answer = answer_from(trials, "request_rate")
    assert answer.value == 4.0 and answer.upper_point == 3


@pytest.mark.parametrize("text", ["0", "-1", "abc", "100%", "inf", ""])
def test_bad_precision_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        Precision.parse(text)


def test_max_points_before_any_miss_is_not_the_cap() -> None:
    search, tried = search_with(lambda load: True, 1.0, cap=1000.0, max_points=3)
    answer = search.answer("request_rate")
    assert tried == [1.0, 2.0, 4.0] and answer.value == 4.0
    assert answer.limited_by is None and "max-points" in answer.reason


def test_the_cap_is_tried_once() -> None:
    # a cap of 4 x an untidy ceiling (89.0992), reached by doubling 44.54: 89.08 and 89.1 are one load, not two
    search, tried = search_with(lambda load: True, 22.27, cap=4 * 22.2748)
    assert tried == [22.27, 44.54, 89.08] or tried == [22.27, 44.54, 89.1], tried
    assert search.answer("request_rate").limited_by == "max_load"
