"""Where measured records go: one interface, an in-process list or batches from a worker to its master.

The dispatcher hands every finished (or failed, or cut-off) :class:`RequestRecord` to a :class:`RecordSink`
exactly once. A worker's :class:`BatchShipper` sends them to the master in ``llm_records`` messages
(:mod:`llmload.core.messages`); the master files them in a :class:`RecordList` (docs/design.md, "Record path").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol, overload

import numpy as np

from llmload.client.records import RequestRecord
from llmload.client.records.journal import RecordJournal
from llmload.client.records.kept import JournalRecords, KeptRecords
from llmload.core.messages import SCHEDULE_INDEX_KEY, records_message


class RecordSink(Protocol):
    def add(self, record: RequestRecord) -> None:
        """Take one finished record (called once per request, from the request's greenlet)."""


class RecordList(Sequence[RequestRecord]):
    """Keeps every record of a test in the journal (:class:`~llmload.client.records.kept.KeptRecords`: a few
    numbers a record in memory; all of it in memory without a journal), tells listeners (progress, live views) of
    each as it arrives, and reads them back in arrival order (``len``, indexing, slicing, iteration decode them
    from the journal: docs/reliability.md, "Records journal")."""

    def __init__(self, journal: RecordJournal | None = None) -> None:
        self.kept = KeptRecords(journal)
        self.listeners: list[Callable[[RequestRecord], None]] = []
        #: records per worker name (``""``: this process)
        self.by_worker: Counter[str] = Counter()

    @property
    def journal(self) -> RecordJournal | None:
        return self.kept.journal

    def add(self, record: RequestRecord, *, counts_lag: bool = True) -> None:
        record.compact()
        for listener in self.listeners:
            listener(record)
        self.by_worker[record.worker] += 1
        self.kept.add(record, counts_lag=counts_lag)

    def __len__(self) -> int:
        return self.kept.received

    @overload
    def __getitem__(self, index: int) -> RequestRecord: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[RequestRecord]: ...
    def __getitem__(self, index: int | slice) -> RequestRecord | Sequence[RequestRecord]:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step == 1:
                return self.kept.in_arrival_order(start, stop)
            return self.kept.in_arrival_order()[index]
        n = len(self)
        if not -n <= index < n:
            raise IndexError("record index out of range")
        index %= n
        return self.kept.in_arrival_order(index, index + 1)[0]

    def __iter__(self) -> Iterator[RequestRecord]:
        return iter(self.kept.in_arrival_order())

    @property
    def records(self) -> JournalRecords:
        """Every record so far, in arrival order."""
        return self.kept.in_arrival_order()

    def view(self, positions: Sequence[int]) -> JournalRecords:
        """The records at ``positions`` (arrival numbers), in that order."""
        return JournalRecords(self.kept, np.asarray(positions, dtype=np.int64))

    def clear(self, journal: RecordJournal | None = None) -> None:
        """Forget the records (a new test starts) and write the next ones to ``journal``."""
        self.kept = KeptRecords(journal)
        self.by_worker.clear()


class BatchShipper:
    """A worker's sink: records and dispatched request indices wait here until :meth:`flush` sends them to
    the master as one ``llm_records`` message; the worker keeps no copy."""

    def __init__(self, send: Callable[[str, dict], None]) -> None:
        self._send = send
        self._records: list[dict] = []
        self._dispatched: list[int] = []
        #: records shipped so far
        self.shipped = 0

    def add(self, record: RequestRecord) -> None:
        data = record.to_dict()
        if record.schedule_index is not None:
            data[SCHEDULE_INDEX_KEY] = record.schedule_index  # the master files it by this, not by its id
        self._records.append(data)

    def dispatched(self, index: int) -> None:
        """Request ``index`` of the global schedule was released (the master re-assigns only what was not)."""
        self._dispatched.append(index)

    @property
    def pending(self) -> int:
        return len(self._records)

    def flush(self) -> None:
        if not self._records and not self._dispatched:
            return
        records, self._records = self._records, []
        dispatched, self._dispatched = self._dispatched, []
        self.shipped += len(records)
        self._send(*records_message(records, dispatched))
