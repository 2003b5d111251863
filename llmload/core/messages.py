"""The one schema of the records a worker ships to its master (``llm_records``), for every way in.

``{"records": [RequestRecord.to_dict()...], "dispatched": [global schedule index...], "clock": float}``:
``clock`` is the worker's ``time.time() - perf_counter()``, so the master moves record times onto its own
timeline (:func:`shift_record`). docs/design.md, "Distributed protocol", lists every message.

Requests travel the other way as job items, ``[index, offset, prompt, prompt_len, output_len, request_id,
user_class, conversation, session]`` (:func:`job_items` / :func:`job_requests`), the same for ``llmload bench`` and
``locust -f``; ``conversation`` is ``{"turns": [[user, user_len, reply, reply_len]...], "system", "system_len"}``
for a multi-turn sample, else null; ``session`` is an agentic session's
:meth:`~llmload.datasets.traces.weka_replay.AgentSession.to_dict` (its chains and the text of its blocks), else
null. A conversation or a session travels whole: it stays on one worker.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llmload.client.records import RequestRecord
from llmload.client.transport.clock import clock_offset
from llmload.core.protocol import RECORDS
from llmload.core.schedule import Schedule, Scheduled
from llmload.datasets.base import SampleRequest, Turn

_TIME_FIELDS = ("start", "first_token", "first_answer_token", "intended_send", "dispatched_at")


#: the key a shipped record's schedule index travels under (beside the record's fields; not a records-file column)
SCHEDULE_INDEX_KEY = "schedule_index"


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
        index = raw.get(SCHEDULE_INDEX_KEY)
        record.schedule_index = int(index) if index is not None else None
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


def job_items(schedule: Schedule, indices: Sequence[int]) -> list[list[Any]]:
    """The requests ``indices`` of ``schedule`` as job items (prompts included: workers need no dataset)."""
    return [item(schedule[i]) for i in indices]


def item(request: Scheduled) -> list[Any]:
    s = request.sample
    conversation = None
    if s.turns is not None:
        conversation = {"turns": [[t.user, t.user_len, t.reply, t.reply_len] for t in s.turns],
                        "system": s.system, "system_len": s.system_len}
    session = s.session.to_dict() if s.session is not None else None
    return [request.index, request.offset, s.prompt, s.prompt_len, s.expected_output_len, request.request_id,
            request.user_class, conversation, session]


def job_requests(items: list[list[Any]]) -> list[Scheduled]:
    """The requests of a job, with their run-wide ids, user classes and conversations."""
    out = []
    for idx, off, prompt, prompt_len, output_len, rid, *rest in items:
        sample = SampleRequest(prompt=prompt, prompt_len=prompt_len, expected_output_len=output_len, request_id=rid)
        conversation = rest[1] if len(rest) > 1 else None
        if conversation:
            sample.turns = [Turn(*t) for t in conversation["turns"]]
            sample.system, sample.system_len = conversation.get("system", ""), conversation.get("system_len", 0)
        session = rest[2] if len(rest) > 2 else None
        if session:
            from llmload.datasets.traces.weka_replay import AgentSession

            sample.session = AgentSession.from_dict(session)
        out.append(Scheduled(int(idx), float(off), sample, rid, rest[0] if rest else ""))
    return out
