"""The run's schedule: vLLM's send offsets, shares that tile the global schedule, stable request ids, the
per-request class draw, and the steerable live schedule."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llmload.common.errors import ConfigError
from llmload.core.schedule import LiveSchedule, Schedule, ScheduleSpec, assign_classes, request_ids
from llmload.datasets.base import SampleRequest


def samples(n: int, with_ids: bool = True) -> list[SampleRequest]:
    return [SampleRequest(prompt=f"p{i}", prompt_len=i + 1, expected_output_len=10,
                          request_id=f"s{i}" if with_ids else "") for i in range(n)]


def vllm_reference(n: int, rate: float, burstiness: float, seed: int) -> np.ndarray:
    """benchmark_serving's get_request, written out: one gamma draw per request, cumulated, normalised."""
    np.random.seed(seed)
    delays = [np.random.gamma(shape=burstiness, scale=1.0 / (rate * burstiness)) for _ in range(n)]
    offsets = np.cumsum(delays)
    return offsets * ((n / rate) / offsets[-1])


@pytest.mark.parametrize(("rate", "burstiness", "seed"), [(5.0, 1.0, 0), (20.0, 0.5, 123), (1.0, 3.0, 7)])
def test_offsets_are_vllms(rate: float, burstiness: float, seed: int) -> None:
    schedule = Schedule.build(ScheduleSpec(request_rate=rate, burstiness=burstiness, seed=seed), samples(50))
    assert np.allclose(schedule.offsets, vllm_reference(50, rate, burstiness, seed), rtol=0, atol=1e-12)
    assert [e.offset for e in schedule] == pytest.approx(list(schedule.offsets), abs=0)


def test_infinite_rate_sends_everything_at_zero() -> None:
    schedule = Schedule.build(ScheduleSpec(), samples(5))
    assert list(schedule.offsets) == [0.0] * 5


def test_constant_rate_and_trace_offsets() -> None:
    assert list(Schedule.build(ScheduleSpec(request_rate=4, constant_rate=True), samples(3)).offsets) == \
        [0.0, 0.25, 0.5]
    timed = samples(3)
    for k, s in enumerate(timed):
        s.arrival_s = 1.5 * k
    assert list(Schedule.build(ScheduleSpec(trace=True), timed).offsets) == [0.0, 1.5, 3.0]


@pytest.mark.parametrize("workers", [1, 2, 3, 7])
def test_shares_tile_the_global_schedule(workers: int) -> None:
    schedule = Schedule.build(ScheduleSpec(request_rate=10, seed=3), samples(23))
    shares = [schedule.share(k, workers) for k in range(workers)]
    indices = sorted(e.index for share in shares for e in share)
    assert indices == list(range(23))
    for share in shares:  # each share keeps the global offsets, in send order
        assert [e.offset for e in share] == sorted(e.offset for e in share)
        assert all(e.offset == schedule.offsets[e.index] for e in share)
    with pytest.raises(ConfigError):
        schedule.share(workers, workers)


def test_request_ids_are_distinct_and_deterministic() -> None:
    ids = request_ids(samples(3), 7)
    assert ids == ["s0", "s1", "s2", "s0#1", "s1#1", "s2#1", "s0#2"]
    assert request_ids(samples(2, with_ids=False), 3) == ["0", "1", "0#1"]
    dup = samples(2)
    dup[1].request_id = "s0"  # a dataset with a repeated id
    assert len(set(request_ids(dup, 4))) == 4


def test_rate_shape_cycles_samples_with_distinct_ids() -> None:
    schedule = Schedule.build(ScheduleSpec(rate_shape="steps:20@0;duration=2", seed=1), samples(4))
    assert len(schedule) > 4
    assert len({e.request_id for e in schedule}) == len(schedule)
    assert all(e.sample is samples_of(schedule)[e.index % 4] for e in schedule)


def samples_of(schedule: Schedule) -> list[SampleRequest]:
    return [schedule[i].sample for i in range(4)]


def test_class_draw_follows_weights_and_leaves_times_alone() -> None:
    names = assign_classes([("Chat", 3.0), ("Summary", 1.0)], 4000, seed=5)
    share = names.count("Chat") / len(names)
    assert 0.7 < share < 0.8  # 0.75 expected; 4000 draws put it within ±0.02 almost surely
    assert names == assign_classes([("Chat", 3.0), ("Summary", 1.0)], 4000, seed=5)
    spec = ScheduleSpec(request_rate=8, seed=5)
    plain = Schedule.build(spec, samples(20))
    mixed = Schedule.build(spec, samples(20), [("Chat", 3.0), ("Summary", 1.0)])
    assert list(plain.offsets) == list(mixed.offsets)
    assert {e.user_class for e in mixed} == {"Chat", "Summary"}
    assert {e.user_class for e in Schedule.build(spec, samples(3), [("Only", 1.0)])} == {"Only"}


def test_live_schedule_matches_vllms_cumulative_draws_at_a_constant_rate() -> None:
    live = LiveSchedule(samples(5), rate=4.0, burstiness=1.0, seed=9)
    offsets = []
    for _ in range(12):
        offset = live.next_offset()
        offsets.append(offset)
        live.take(offset)
    np.random.seed(9)
    expected = np.cumsum([np.random.gamma(1.0, 1.0 / 4.0) for _ in range(12)])
    assert np.allclose(offsets, expected, atol=1e-12)


def test_live_schedule_rate_change_applies_from_its_offset_alike_everywhere() -> None:
    def run(change_at: float | None) -> list[float]:
        live = LiveSchedule(samples(5), rate=10.0, seed=2)
        out = []
        for _ in range(40):
            if change_at is not None and len(out) == 5:
                live.set_rate(40.0, change_at)
            offset = live.next_offset()
            out.append(offset)
            live.take(offset)
        return out

    a, b = run(2.0), run(2.0)
    assert a == b  # deterministic
    base = run(None)
    before = [t for t in base if t <= 2.0]
    assert a[: len(before)] == before  # nothing before the change point moves
    gaps_after = np.diff([t for t in a if t > 2.0])
    assert gaps_after.mean() < np.diff(before).mean()  # 4x the rate: much shorter gaps


def test_live_schedule_pause_and_resume() -> None:
    live = LiveSchedule(samples(2), rate=5.0, seed=1)
    live.set_rate(0.0, 0.0)
    assert live.next_offset() is None
    live.set_rate(5.0, 10.0)
    offset = live.next_offset()
    assert offset is not None and offset > 10.0
    with pytest.raises(ConfigError):
        live.set_rate(math.inf, 1.0)
