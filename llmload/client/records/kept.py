"""A run's records kept on disk: the records journal holds them, memory holds three numbers a record.

A :class:`RequestRecord` in memory is ~900 bytes even compacted (issue 37: the master grew ~1.3 KB a request of 16
tokens), so a day-long run could not keep them. The process that collects a run's records (the master, or a
single process) writes each one to the journal the moment it arrives (:mod:`llmload.client.records.journal`) and
:class:`KeptRecords` remembers only where its line is, its place in the run (schedule index and turn) and its
intended send time. At the end, :meth:`KeptRecords.in_send_order` gives a :class:`JournalRecords`: a read-only
sequence that decodes each record from its line when it is read, in send order, without duplicates (a frozen
worker's records sent twice: the last one counts, as before).

When the journal cannot be written (no journal, a full disk), the records stay in memory as before: the run loses
nothing.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, overload

import numpy as np
import orjson

from llmload.client.records.record import RequestRecord

if TYPE_CHECKING:
    from llmload.client.records.journal import RecordJournal

#: bits of a kept record's key that hold its turn (a conversation's turns: far fewer than a million)
TURN_BITS = 20
#: records read from the journal at once when a sequence is iterated
READ_BATCH = 4096

Fix = Callable[[RequestRecord], None]


def record_key(index: int, turn: int) -> int:
    """One int that sorts as ``(index, turn)`` (``index`` may be negative: a record no schedule entry names)."""
    return (index << TURN_BITS) | min(max(turn, 0), (1 << TURN_BITS) - 1)


class KeptRecords:
    """The records of one run as they arrive: each written to ``journal`` (when it works) and remembered as
    ``(key, where, intended send)``; the ones the journal could not take are kept whole."""

    def __init__(self, journal: RecordJournal | None) -> None:
        self.journal = journal
        self._keys = array("q")
        #: the line's offset in the journal, or ``-1 - i``: the i-th record held in memory
        self._where = array("q")
        self._intended = array("d")
        #: each record's schedule lag (NaN: none, closed loop)
        self._lags = array("d")
        self._held: list[RequestRecord] = []
        #: records received (duplicates included)
        self.received = 0
        #: the earliest ``start``, the latest ``start`` and ``end`` seen (the run's span, without reading back)
        self.first_start: float | None = None
        self.last_start: float | None = None
        self.last_end: float | None = None

    def add(self, record: RequestRecord, key: int, *, counts_lag: bool = True) -> None:
        """Keep ``record`` (already compacted, labelled) under ``key`` (:func:`record_key`); ``counts_lag``
        False: its schedule lag is not the client's (a re-assigned request, late on purpose)."""
        where = self.journal.add(record) if self.journal is not None else None
        if where is None:
            self._where.append(-1 - len(self._held))
            self._held.append(record)
        else:
            self._where.append(where[0])
        self._keys.append(key)
        self._intended.append(record.intended_send if record.intended_send is not None else 0.0)
        lag = record.schedule_lag if counts_lag else None
        self._lags.append(float("nan") if lag is None else lag)
        self.received += 1
        if self.first_start is None or record.start < self.first_start:
            self.first_start = record.start
        if self.last_start is None or record.start > self.last_start:
            self.last_start = record.start
        end = record.end
        if end is not None and (self.last_end is None or end > self.last_end):
            self.last_end = end

    @property
    def in_memory(self) -> int:
        """Records held whole because the journal could not take them."""
        return len(self._held)

    def span(self) -> float:
        """Seconds from the first request's start to the last one's end (as
        :func:`llmload.core.outcome.run_span` over every record kept)."""
        if self.first_start is None:
            return 0.0
        end = self.last_end if self.last_end is not None else self.first_start
        return max(end - self.first_start, 0.0)

    def in_arrival_order(self, start: int = 0, stop: int | None = None) -> JournalRecords:
        """Records ``start`` to ``stop`` as they arrived (duplicates too)."""
        stop = self.received if stop is None else stop
        return JournalRecords(self, np.arange(start, max(start, stop), dtype=np.int64))

    def __len__(self) -> int:
        """Records kept, a key's duplicates counted once."""
        return int(np.unique(np.frombuffer(self._keys, dtype=np.int64)).size) if self._keys else 0

    def distinct(self) -> np.ndarray:
        """Positions (in arrival order) of the records that count: the last one of each key, by key."""
        keys = np.frombuffer(self._keys, dtype=np.int64)
        if not keys.size:
            return np.zeros(0, dtype=np.int64)
        order = np.argsort(keys, kind="stable")
        ordered = keys[order]
        last = np.ones(ordered.size, dtype=bool)
        last[:-1] = ordered[1:] != ordered[:-1]
        return order[last]

    def keys_of(self, positions: np.ndarray) -> np.ndarray:
        return np.frombuffer(self._keys, dtype=np.int64)[positions]

    def lags(self, positions: np.ndarray, leave_out: Callable[[int], bool] | None = None) -> np.ndarray:
        """The schedule lags of the records at ``positions`` (in that order) that have one, but those whose
        schedule index ``leave_out`` names (re-assigned requests, late on purpose)."""
        lags = np.frombuffer(self._lags, dtype=np.float64)[positions]
        keep = ~np.isnan(lags)
        if leave_out is not None:
            indices = self.keys_of(positions) >> TURN_BITS
            keep &= np.fromiter((not leave_out(i) for i in indices.tolist()), dtype=bool, count=indices.size)
        return lags[keep]

    def in_send_order(self, positions: np.ndarray | None = None, fix: Fix | None = None) -> JournalRecords:
        """The records that count (or those at ``positions``, already by key) in intended-send order (closed loop,
        where none has one: by key), each decoded when read; ``fix`` is applied to each record read."""
        if positions is None:
            positions = self.distinct()
        intended = np.frombuffer(self._intended, dtype=np.float64)[positions]
        positions = positions[np.argsort(intended, kind="stable")]
        return JournalRecords(self, positions, fix)

    def lines(self) -> tuple[np.ndarray, np.ndarray]:
        """Each kept record's ``(offset, length)`` in the journal (offset < 0: held in memory)."""
        where = np.frombuffer(self._where, dtype=np.int64)
        lengths = np.zeros(where.size, dtype=np.int64)
        on_disk = np.flatnonzero(where >= 0)
        if on_disk.size:
            assert self.journal is not None
            offsets = where[on_disk]
            lengths[on_disk] = np.diff(offsets, append=self.journal.size)
        return where, lengths

    def read(self, position: int, offset: int, length: int) -> RequestRecord:
        if offset < 0:
            return self._held[-1 - offset]
        assert self.journal is not None
        return RequestRecord.from_dict(orjson.loads(self.journal.read_line(offset, length)))


class JournalRecords(Sequence[RequestRecord]):
    """Records read back from a run's journal when asked for, in a fixed order; each read decodes a new
    :class:`RequestRecord` (changing one changes nothing kept: ``fix`` is how a run's end amends them)."""

    def __init__(self, kept: KeptRecords, positions: np.ndarray, fix: Fix | None = None) -> None:
        self._kept = kept
        self._positions = positions
        self._fix = fix
        self._where, self._lengths = kept.lines()

    def with_fix(self, fix: Fix | None) -> JournalRecords:
        return JournalRecords(self._kept, self._positions, fix)

    def subset(self, mask: np.ndarray) -> JournalRecords:
        """The records where ``mask`` (one bool a record, in this order) is true, in the same order."""
        return JournalRecords(self._kept, self._positions[mask], self._fix)

    @property
    def keys(self) -> np.ndarray:
        """Each record's key (:func:`record_key`), in this order."""
        return self._kept.keys_of(self._positions)

    def __len__(self) -> int:
        return int(self._positions.size)

    @overload
    def __getitem__(self, index: int) -> RequestRecord: ...
    @overload
    def __getitem__(self, index: slice) -> list[RequestRecord]: ...
    def __getitem__(self, index: int | slice) -> RequestRecord | list[RequestRecord]:
        if isinstance(index, slice):
            return [self._read(int(p)) for p in self._positions[index]]
        return self._read(int(self._positions[index]))

    def __iter__(self) -> Iterator[RequestRecord]:
        for lo in range(0, self._positions.size, READ_BATCH):
            batch = self._positions[lo: lo + READ_BATCH]
            offsets, lengths = self._where[batch], self._lengths[batch]
            first, blob = self._span(offsets, lengths)
            for p, offset, length in zip(batch.tolist(), offsets.tolist(), lengths.tolist(), strict=True):
                if offset >= 0 and blob is not None:
                    record = RequestRecord.from_dict(orjson.loads(blob[offset - first: offset - first + length]))
                else:
                    record = self._kept.read(p, offset, length)
                if self._fix is not None:
                    self._fix(record)
                yield record

    def _span(self, offsets: np.ndarray, lengths: np.ndarray) -> tuple[int, bytes | None]:
        """One read for a batch whose lines lie close together in the journal (most: records arrive roughly in
        send order); None when they are spread out (each is then read alone)."""
        on_disk = offsets >= 0
        journal = self._kept.journal
        if journal is None or not on_disk.any():
            return 0, None
        first = int(offsets[on_disk].min())
        last = int((offsets[on_disk] + lengths[on_disk]).max())
        if last - first > 4 * int(lengths[on_disk].sum()):
            return 0, None
        return first, journal.read_line(first, last - first)

    def _read(self, position: int) -> RequestRecord:
        record = self._kept.read(position, int(self._where[position]), int(self._lengths[position]))
        if self._fix is not None:
            self._fix(record)
        return record
