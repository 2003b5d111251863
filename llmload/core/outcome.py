"""What every way in does with a run's records once it ends, before the metrics: put them in send order and
count the output tokens the wire did not (docs/design.md, "Record path")."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import partial
from typing import Any

from llmload.client.records import RequestRecord
from llmload.client.records.kept import JournalRecords


def finish_records(records: Iterable[RequestRecord], tokenizer: Any) -> Sequence[RequestRecord]:
    """The records in intended-send order (closed loop: the order they ended in), their ``pending`` output
    counts re-tokenized from the text — after the run, never in the stream loop. Records kept in the journal
    (:class:`JournalRecords`, already in send order) stay there: each is counted as it is read."""
    count = partial(count_pending, tokenizer=tokenizer) if tokenizer is not None else None
    if isinstance(records, JournalRecords):
        return records.with_fix(count)
    ordered = sorted(records, key=lambda r: r.intended_send or 0.0)
    if count is not None:
        for r in ordered:
            count(r)
    return ordered


def count_pending(record: RequestRecord, tokenizer: Any) -> None:
    """Count a record's output tokens from its text where the wire did not (``output_tokens_source`` "pending")."""
    if record.output_tokens_source == "pending":
        record.output_tokens = len(tokenizer(record.text(), add_special_tokens=False).input_ids)
        record.output_tokens_source = "tokenizer"


def run_span(records: Iterable[RequestRecord]) -> float:
    """Seconds from the first request's start to the last one's end (the result JSON's duration)."""
    records = list(records)
    if not records:
        return 0.0
    start = min(r.start for r in records)
    ends = [r.end for r in records if r.chunk_times and r.end is not None]
    return max(max(ends, default=start) - start, 0.0)
