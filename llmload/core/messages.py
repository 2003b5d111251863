"""The one schema of the records a worker ships to its master (``llm_records``), for every way in.

``{"records": [RequestRecord.to_dict()...], "dispatched": [global schedule index...], "clock": float}``:
``clock`` is the worker's ``time.time() - perf_counter()``, so the master moves record times onto its own
timeline (:func:`shift_record`). docs/design.md, "Distributed protocol", lists every message.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from time import perf_counter
from typing import Any

from llmload.records import RequestRecord

RECORDS = "llm_records"
_TIME_FIELDS = ("start", "first_token", "intended_send", "dispatched_at")


def clock_offset() -> float:
    """``wall - perf_counter`` on this host: adding it turns a perf_counter time into wall-clock time."""
    return time.time() - perf_counter()


def records_message(records: list[dict[str, Any]], dispatched: list[int]) -> tuple[str, dict[str, Any]]:
    """The ``(name, data)`` of one batch."""
    return RECORDS, {"records": records, "dispatched": dispatched, "clock": clock_offset()}


@dataclass
class RecordBatch:
    records: list[RequestRecord]
    dispatched: list[int]


def read_records_message(data: dict[str, Any], my_clock: float) -> RecordBatch:
    """The records of a batch, their times moved onto this process's clock (``my_clock``: its
    :func:`clock_offset`)."""
    shift = float(data.get("clock", my_clock)) - my_clock
    records = []
    for raw in data.get("records", []):
        record = RequestRecord.from_dict(raw)
        shift_record(record, shift)
        records.append(record)
    return RecordBatch(records, [int(i) for i in data.get("dispatched", [])])


def shift_record(record: RequestRecord, shift: float) -> None:
    """Move a record's times by ``shift`` seconds (worker − master clock offset)."""
    if not shift:
        return
    for name in _TIME_FIELDS:
        value = getattr(record, name)
        if value is not None:
            setattr(record, name, value + shift)
    record.chunk_times = [t + shift for t in record.chunk_times]
