"""The one schema of the records a worker ships to its master (``llm_records``), for every way in.

``{"records": [RequestRecord.to_dict()...], "dispatched": [global schedule index...], "clock": float}``:
``clock`` is the worker's ``time.time() - perf_counter()``, so the master moves record times onto its own
timeline (:func:`shift_record`). docs/design.md, "Distributed protocol", lists every message.

Requests travel the other way as job items, ``[index, offset, prompt, prompt_len, output_len, request_id,
user_class, conversation, session, media]`` (:func:`job_items` / :func:`job_requests`), the same for ``llmload bench`` and
``locust -f``; ``conversation`` is ``{"turns": [[user, user_len, reply, reply_len]...], "system", "system_len"}``
for a multi-turn sample, else null; ``session`` is an agentic session's
:meth:`~llmload.datasets.traces.weka_replay.AgentSession.to_dict` (its chains and the text of its blocks), else
null; ``media`` is ``{"images": [url...], "inputs": [text...]}`` for a sample with images or pooling inputs, else
null. A conversation or a session travels whole: it stays on one worker.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmload.client.records import RequestRecord
from llmload.client.transport.clock import clock_offset
from llmload.core.protocol import RECORDS
from llmload.core.schedule import MadeOnRead, Schedule, Scheduled, ScheduleEntries, repeat_id
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


def job_items(schedule: Schedule, indices: Sequence[int]) -> list[list[Any]] | dict[str, Any]:
    """The requests ``indices`` of ``schedule`` as a job (prompts included: workers need no dataset). A built
    schedule's go as a pool of the samples they use and one row of numbers a request (:class:`JobRequests`);
    a schedule made of entries (a sweep's trimmed one) as one item a request."""
    entries = schedule.entries
    if not isinstance(entries, ScheduleEntries):
        return [item(schedule[i]) for i in indices]
    index = np.asarray(indices, dtype=np.int64)
    used, row_position = np.unique(index % len(entries.samples), return_inverse=True)
    # one pool entry per sample object (an oversampled dataset repeats its samples: each travels once)
    slot: dict[int, int] = {}
    pool: list[list[Any]] = []
    held: list[SampleRequest] = []  # alive until the end: a sample made when read must not lend its id to the next
    of_position = np.empty(used.size, dtype=np.int32)
    for k, p in enumerate(used.tolist()):
        sample = entries.samples[p]
        held.append(sample)
        if id(sample) not in slot:
            slot[id(sample)] = len(pool)
            pool.append(sample_item(sample))
        of_position[k] = slot[id(sample)]
    picks = entries.class_picks
    return {"pool": pool, "cycle": len(entries.samples), "index": index.tobytes(),
            "offset": entries.offsets[index].tobytes(), "sample": of_position[row_position].tobytes(),
            "repeat": entries.ids.repeats(index).tobytes(),
            "classes": list(entries.class_names),
            "class": picks[index].astype(np.int16).tobytes() if picks is not None else None}


def sample_item(s: SampleRequest) -> list[Any]:
    """What a worker needs of a sample: ``[prompt, prompt_len, output_len, conversation, session, request_id,
    media]``."""
    conversation = None
    if s.turns is not None:
        conversation = {"turns": [[t.user, t.user_len, t.reply, t.reply_len] for t in s.turns],
                        "system": s.system, "system_len": s.system_len}
    session = s.session.to_dict() if s.session is not None else None
    media = {"images": s.images, "inputs": s.inputs} if s.images or s.inputs else None
    return [s.prompt, s.prompt_len, s.expected_output_len, conversation, session, s.request_id, media]


def item(request: Scheduled) -> list[Any]:
    prompt, prompt_len, output_len, conversation, session, _, media = sample_item(request.sample)
    return [request.index, request.offset, prompt, prompt_len, output_len, request.request_id,
            request.user_class, conversation, session, media]


def _sample(prompt: str, prompt_len: int, output_len: int, request_id: str, conversation: Any,
            session: Any, media: Any = None) -> SampleRequest:
    sample = SampleRequest(prompt=prompt, prompt_len=prompt_len, expected_output_len=output_len, request_id=request_id)
    if media:
        sample.images, sample.inputs = media.get("images"), media.get("inputs")
    if conversation:
        sample.turns = [Turn(*t) for t in conversation["turns"]]
        sample.system, sample.system_len = conversation.get("system", ""), conversation.get("system_len", 0)
    if session:
        from llmload.datasets.traces.weka_replay import AgentSession

        sample.session = AgentSession.from_dict(session)
    return sample


class JobRequests(MadeOnRead):
    """A compact job's requests (:func:`job_items`), each :class:`Scheduled` made when read: a worker holds
    each sample its share uses once and 26 bytes a request, not an object a request (issue 37). A request's id
    is its sample's own id (or its position in the master's list of samples, ``index % cycle``) with ``#k``
    for its k-th repeat, as :class:`~llmload.core.schedule.RequestIds` made it."""

    def __init__(self, job: dict[str, Any]) -> None:
        self._pool = [_sample(prompt, prompt_len, output_len, own_id, conversation, session, *media)
                      for prompt, prompt_len, output_len, conversation, session, own_id, *media in job["pool"]]
        self._cycle = int(job["cycle"])
        self._index = np.frombuffer(job["index"], dtype=np.int64)
        self._offset = np.frombuffer(job["offset"], dtype=np.float64)
        self._sample = np.frombuffer(job["sample"], dtype=np.int32)
        self._repeat = np.frombuffer(job["repeat"], dtype=np.int64)
        self._classes = tuple(job.get("classes") or ("",))
        picks = job.get("class")
        self._class = np.frombuffer(picks, dtype=np.int16) if picks is not None else None

    def __len__(self) -> int:
        return int(self._index.size)

    def turn_total(self, turns: Callable[[SampleRequest], int]) -> int:
        """``turns`` summed over every request's sample, counted per pool sample."""
        uses = np.bincount(self._sample, minlength=len(self._pool))
        return int(sum(int(n) * turns(s) for n, s in zip(uses.tolist(), self._pool, strict=True)))

    def _made(self, k: int) -> Scheduled:
        sample = self._pool[int(self._sample[k])]
        index, repeat = int(self._index[k]), int(self._repeat[k])
        rid = repeat_id(sample.request_id or str(index % self._cycle), repeat)
        name = self._classes[int(self._class[k])] if self._class is not None else self._classes[0]
        return Scheduled(index, float(self._offset[k]), sample, rid, name)


def job_requests(items: list[list[Any]] | dict[str, Any]) -> Sequence[Scheduled]:
    """The requests of a job, with their run-wide ids, user classes and conversations (a compact job's made as
    they are read: :class:`JobRequests`)."""
    if isinstance(items, dict):
        return JobRequests(items)
    out = []
    for idx, off, prompt, prompt_len, output_len, rid, *rest in items:
        conversation = rest[1] if len(rest) > 1 else None
        session = rest[2] if len(rest) > 2 else None
        sample = _sample(prompt, prompt_len, output_len, rid, conversation, session, rest[3] if len(rest) > 3 else None)
        out.append(Scheduled(int(idx), float(off), sample, rid, rest[0] if rest else ""))
    return out
