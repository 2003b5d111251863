"""A long run's share goes to each worker in parts (issue 37): where the schedule is cut, when each part is due,
the feed a worker's open loop reads them from, and the bitmap range the master takes a part's indices from."""

from __future__ import annotations

from itertools import pairwise

import gevent
import numpy as np
import pytest
from gevent.event import Event
from hypothesis import given, settings
from hypothesis import strategies as st

from llmload.common.errors import ConfigError
from llmload.core.dispatch import RequestFeed
from llmload.core.parts import RunParts, part_seconds
from llmload.core.schedule import Scheduled
from llmload.datasets.base import SampleRequest
from llmload.distributed.indices import IndexSet


def test_parts_cover_the_schedule_once_in_order_and_each_is_due_before_its_first_request() -> None:
    offsets = np.cumsum(np.random.default_rng(1).exponential(0.1, size=5000))  # ~500 s
    parts = RunParts(offsets, part_s=30.0, lead_s=15.0)
    assert parts.more and parts.count == pytest.approx(offsets[-1] / 30.0, abs=1.5)
    covered = [parts.first]
    assert list(parts.due(0.0)) == []  # the second part is not due at the start
    for elapsed in np.arange(0.0, offsets[-1] + 1, 0.1):
        for lo, hi, last in parts.due(float(elapsed)):
            assert float(offsets[lo]) - elapsed <= 15.0 + 1e-9 and float(offsets[lo]) - elapsed > 14.8
            covered.append((lo, hi))
            assert last == (hi == offsets.size)
    assert covered[0][0] == 0 and covered[-1][1] == offsets.size
    assert all(a[1] == b[0] and a[0] < a[1] for a, b in pairwise(covered))
    spans = [float(offsets[hi - 1] - offsets[lo]) for lo, hi in covered]
    assert max(spans) <= 30.0


def test_a_short_run_a_closed_loop_or_unordered_offsets_go_whole() -> None:
    assert not RunParts(np.linspace(0, 20, 100), part_s=30.0).more
    assert not RunParts.whole(10).more and RunParts.whole(10).first == (0, 10)
    assert not RunParts(np.asarray([0.0, 50.0, 10.0, 90.0]), part_s=30.0).more
    assert not RunParts(np.zeros(1000), part_s=30.0).more  # --request-rate inf: everything due at once


def test_part_seconds_from_the_environment(monkeypatch) -> None:
    monkeypatch.delenv("LLMLOAD_PART_S", raising=False)
    assert part_seconds() == 30.0
    monkeypatch.setenv("LLMLOAD_PART_S", "2.5")
    assert part_seconds() == 2.5
    for bad in ("0", "-1", "abc", "nan", "inf"):
        monkeypatch.setenv("LLMLOAD_PART_S", bad)
        with pytest.raises(ConfigError, match="LLMLOAD_PART_S"):
            part_seconds()


@settings(max_examples=60, deadline=None)
@given(st.sets(st.integers(0, 300), max_size=80), st.integers(-5, 310), st.integers(-5, 320))
def test_index_set_between_is_the_members_in_range(members: set[int], lo: int, hi: int) -> None:
    assert IndexSet(members).between(lo, hi) == sorted(i for i in members if lo <= i < hi)


def _requests(lo: int, hi: int) -> list[Scheduled]:
    sample = SampleRequest(prompt="p", prompt_len=1, expected_output_len=1)
    return [Scheduled(i, float(i), sample, str(i)) for i in range(lo, hi)]


def test_the_feed_gives_each_part_in_turn_and_waits_for_the_next() -> None:
    stop = Event()
    feed = RequestFeed(_requests(0, 3), stop)
    seen: list[int] = []
    reader = gevent.spawn(lambda: seen.extend(r.index for r in feed))
    gevent.sleep(0.01)
    assert seen == [0, 1, 2] and not reader.dead  # waits for a part that has not come
    feed.add(_requests(3, 5), more=True)
    feed.add(_requests(5, 6), more=False)
    reader.join(timeout=5)
    assert reader.dead and seen == list(range(6))


def test_a_stop_ends_the_feed_while_it_waits() -> None:
    stop = Event()
    feed = RequestFeed(_requests(0, 2), stop)
    reader = gevent.spawn(lambda: [r.index for r in feed])
    gevent.sleep(0.01)
    assert not reader.dead
    stop.set()
    assert reader.get(timeout=5) == [0, 1]
