"""What every way in does with a run's records once it ends, before the metrics: put them in send order and
count the output tokens the wire did not (docs/design.md, "Record path")."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from llmload.client.records import RequestRecord


def finish_records(records: Iterable[RequestRecord], tokenizer: Any) -> list[RequestRecord]:
    """The records in intended-send order (closed loop: the order they ended in), their ``pending`` output
    counts re-tokenized from the text — after the run, never in the stream loop."""
    ordered = sorted(records, key=lambda r: r.intended_send or 0.0)
    for r in ordered:
        if r.output_tokens_source == "pending" and tokenizer is not None:
            r.output_tokens = len(tokenizer(r.text(), add_special_tokens=False).input_ids)
            r.output_tokens_source = "tokenizer"
    return ordered


def run_span(records: Iterable[RequestRecord]) -> float:
    """Seconds from the first request's start to the last one's end (the result JSON's duration)."""
    records = list(records)
    if not records:
        return 0.0
    start = min(r.start for r in records)
    ends = [r.end for r in records if r.chunk_times and r.end is not None]
    return max(max(ends, default=start) - start, 0.0)
