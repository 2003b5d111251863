"""A compacted record reads exactly as the record it was: token counts of one token per event are held as
``UnitCounts`` (a few bytes instead of 4 an event), and everything written from it is unchanged."""

from __future__ import annotations

import json
import sys

import numpy as np
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
