"""A compacted record reads exactly as the record it was: token counts of one token per event are held as
``UnitCounts`` (a few bytes instead of 4 an event), and everything written from it is unchanged."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmload.client.records import RequestRecord
from llmload.client.records.record import UnitCounts
from llmload.metrics import compute_metrics


def _record(tokens: list[int]) -> RequestRecord:
    times = [1.0 + 0.01 * k for k in range(len(tokens))]
    return RequestRecord(request_id="r", start=0.9, first_token=times[0] if times else None, chunk_times=times,
                         chunk_tokens=list(tokens), output_tokens=sum(tokens), success=bool(tokens),
                         output_tokens_source="chunks")


@given(st.lists(st.integers(min_value=1, max_value=3), max_size=60))
def test_a_compacted_record_writes_and_reads_as_before(tokens: list[int]) -> None:
    plain, compact = _record(tokens), _record(tokens)
    compact.compact()
    assert json.dumps(compact.to_dict()) == json.dumps(plain.to_dict())
    assert list(compact.chunk_tokens) == list(plain.chunk_tokens) == tokens
    assert len(compact.chunk_tokens) == len(tokens) and sum(compact.chunk_tokens) == sum(tokens)
    assert np.asarray(compact.chunk_tokens).tolist() == tokens
    if tokens:
        assert compact.chunk_tokens[-1] == tokens[-1] and list(compact.chunk_tokens[1:]) == tokens[1:]
    assert RequestRecord.from_dict(compact.to_dict()).to_dict() == plain.to_dict()
    assert isinstance(compact.chunk_tokens, UnitCounts) == (bool(tokens) and set(tokens) == {1})


def test_metrics_are_the_same_from_compacted_records() -> None:
    runs = [[1] * 50, [1, 2, 1, 3] * 10, [1] * 7]
    plain = [_record(t) for t in runs]
    compact = [_record(t) for t in runs]
    for r in compact:
        r.compact()
    assert compute_metrics(compact, 2.0).to_result_dict() == compute_metrics(plain, 2.0).to_result_dict()


def test_one_token_counts_take_almost_no_memory() -> None:
    record = _record([1] * 1000)
    before = sys.getsizeof(record.chunk_tokens)
    record.compact()
    assert sys.getsizeof(record.chunk_tokens) < 100 < before


# -- chunk times: 4 bytes each where that holds them exactly -----------------------------------------------

_START = st.floats(min_value=1e-3, max_value=1e7, allow_nan=False, allow_infinity=False)
#: gaps from sub-nanosecond to many seconds: the large ones cannot be packed and must stay float64
_GAPS = st.lists(st.one_of(st.just(0.0), st.floats(min_value=0.0, max_value=120.0, allow_nan=False)),
                 min_size=0, max_size=120)


def _times(start: float, gaps: list[float]) -> list[float]:
    times = [start]
    for gap in gaps:
        times.append(times[-1] + gap)
    return times


def _timed(times: list[float]) -> RequestRecord:
    return RequestRecord(request_id="r", start=times[0] - 0.05, first_token=times[0], chunk_times=list(times),
                         chunk_tokens=[1] * len(times), output_tokens=len(times), success=True,
                         output_tokens_source="usage")


@given(_START, _GAPS)
def test_compacted_chunk_times_are_the_same_floats_bit_for_bit(start: float, gaps: list[float]) -> None:
    times = _times(start, gaps)
    plain, compact = _timed(times), _timed(times)
    compact.compact()
    held = compact.chunk_times
    assert [t.hex() for t in held] == [t.hex() for t in times]
    assert np.asarray(held, dtype=float).tobytes() == np.asarray(times, dtype=float).tobytes()
    assert len(held) == len(times) and held[-1] == times[-1] and held[0] == times[0]
    assert held[len(times) // 2] == times[len(times) // 2] and list(held[-2:]) == times[-2:]
    assert list(held[1:]) == times[1:] and list(held) == times
    assert json.dumps(compact.to_dict()) == json.dumps(plain.to_dict())
    assert compact.end == plain.end and np.array_equal(compact.itls, plain.itls)


def test_times_that_cannot_be_packed_exactly_stay_float64() -> None:
    from array import array

    from llmload.client.records.record import PACK_MIN_TIMES, PackedTimes

    steady = _times(5000.0, [0.01] * 99)
    assert PackedTimes.pack(steady) is not None
    assert PackedTimes.pack(steady[: PACK_MIN_TIMES - 1]) is None  # too short to be worth it
    assert PackedTimes.pack(_times(5000.0, [0.01] * 50 + [1e6] + [0.01] * 50)) is None  # a step past 6 bytes
    assert PackedTimes.pack([-1.0 + 0.01 * k for k in range(100)]) is None  # a clock shifted below zero
    assert PackedTimes.pack([*steady[:50], steady[10], *steady[51:]]) is None  # not in order
    for times in (_times(5000.0, [0.01] * 50 + [1e6] + [0.01] * 50), [-1.0 + 0.01 * k for k in range(100)]):
        record = _timed(times)
        record.compact()
        assert isinstance(record.chunk_times, array) and list(record.chunk_times) == times
    with pytest.raises(IndexError):
        PackedTimes.pack(steady)[len(steady)]  # type: ignore[index]


def test_metrics_are_the_same_from_packed_chunk_times() -> None:
    rng = np.random.default_rng(7)
    runs = [_times(90_000.0 + k, list(rng.exponential(0.012, size=int(rng.integers(1, 300))))) for k in range(40)]
    plain = [_timed(t) for t in runs]
    compact = [_timed(t) for t in runs]
    for r in compact:
        r.compact()
    assert sum(type(r.chunk_times).__name__ == "PackedTimes" for r in compact) > 20
    assert (json.dumps(compute_metrics(compact, 50.0).to_result_dict())
            == json.dumps(compute_metrics(plain, 50.0).to_result_dict()))


def test_packed_chunk_times_take_at_most_two_thirds_of_the_memory() -> None:
    from array import array

    times = _times(90_000.0, [0.01] * 199)
    record = _timed(times)
    record.compact()
    held = record.chunk_times
    assert type(held).__name__ == "PackedTimes"
    size = sys.getsizeof(held) + sys.getsizeof(held._steps) + sys.getsizeof(held._first)  # type: ignore[attr-defined]
    assert size < 0.67 * sys.getsizeof(array("d", times))
    # a young clock (small values: finer units in the last place) still packs, in 5 bytes a step
    young = _timed(_times(2000.0, [0.01] * 199))
    young.compact()
    assert young.chunk_times._width == 5 and list(young.chunk_times) == _times(2000.0, [0.01] * 199)  # type: ignore[attr-defined]
