"""IndexSet, the master's per-worker bookkeeping in one bit an index, behaves as a set of ints."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from llmload.distributed.indices import IndexSet
from llmload.distributed.master import WorkerState, hand_over

indices = st.sets(st.integers(min_value=-5, max_value=5000), max_size=200)


@given(indices, indices)
def test_set_operations_match_python_sets(a: set[int], b: set[int]) -> None:
    left, right = IndexSet(a), IndexSet(b)
    assert list(left) == sorted(a) and len(left) == len(a)
    diff = left - right
    assert list(diff) == sorted(a - b) and len(diff) == len(a - b)
    assert list(left - list(b)) == sorted(a - b)
    for x in range(-6, 5002, 7):
        assert (x in left) == (x in a)
    left.difference_update(right)
    assert list(left) == sorted(a - b) and len(left) == len(a - b)
    left.update(b)
    assert list(left) == sorted((a - b) | b)


@given(indices)
def test_discard_and_repeated_adds_keep_the_count(a: set[int]) -> None:
    s = IndexSet()
    for x in [*a, *a]:
        s.add(x)
    assert len(s) == len(a)
    for x in a:
        s.discard(x)
        s.discard(x)
    assert len(s) == 0 and not s and list(s) == []


def test_a_worker_s_unsent_and_in_flight_from_bitmaps() -> None:
    state = WorkerState("w", 1, assigned=IndexSet(range(0, 100, 2)))
    state.dispatched.update(range(0, 40, 2))
    state.received.update(range(0, 30, 2))
    assert state.unsent == list(range(40, 100, 2))
    assert state.in_flight == 5  # 30..38 sent, no record yet
    other = WorkerState("x", 2, assigned=IndexSet(range(1, 100, 2)))
    parts = hand_over(state, state.unsent, [state, other], {"w", "x"})
    assert parts == [(other, list(range(40, 100, 2)))]
    assert list(state.assigned) == list(range(0, 40, 2)) and list(state.reassigned_away) == list(range(40, 100, 2))
    assert len(other.assigned) == 50 + 30
