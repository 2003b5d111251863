"""A run's records kept on disk: the records journal holds them, memory holds three numbers a record.

A :class:`RequestRecord` in memory is ~900 bytes even compacted (issue 37: the master grew ~1.3 KB a request of 16
tokens), so a day-long run could not keep them. The process that collects a run's records (the master, or a
single process) writes each one to the journal the moment it arrives (:mod:`llmload.client.records.journal`) and
:class:`KeptRecords` remembers only where its line is and its intended send time (16 bytes), and on a master
which arrival holds each schedule index (4 bytes); its schedule lag goes to a column on disk. At the end, :meth:`KeptRecords.in_send_order` gives a :class:`JournalRecords`: a read-only
sequence that decodes each record from its line when it is read, in send order, without duplicates (a frozen
worker's records sent twice: the last one counts, as before).

When the journal cannot be written (no journal, a full disk), the records stay in memory as before: the run loses
nothing.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import numpy as np
import orjson

from llmload.client.records.record import RequestRecord
from llmload.common.onread import OnRead
from llmload.metrics.spill import Chunked, SpillColumn

if TYPE_CHECKING:
    from llmload.client.records.journal import RecordJournal

#: bits of a later turn's key that hold its turn (a conversation's turns: far fewer than a million)
TURN_BITS = 20
#: records read from the journal at once when a sequence is iterated
READ_BATCH = 4096
#: positions checked at once for being in send order already (no sort needed)
_ORDER_CHECK = 1 << 16

Fix = Callable[[RequestRecord], None]


class KeptRecords:
    """The records of one run as they arrive: each written to ``journal`` (when it works) and remembered by where
    its line is and when it was meant to be sent (16 bytes), its schedule lag on disk; the ones the journal could
    not take are kept whole.

    Records given a schedule ``index`` (a master's) are also placed by it: one int32 an index says which arrival
    holds it (the last one, when a frozen worker sent a record twice); a conversation's later turns, and records
    no schedule entry names, are kept as ``(index, turn, arrival)`` beside it. Records given none (one process)
    count in arrival order."""

    def __init__(self, journal: RecordJournal | None) -> None:
        self.journal = journal
        #: the line's offset in the journal, or ``-1 - i``: the i-th record held in memory
        self._where = array("q")
        self._intended = array("d")
        #: each record's schedule lag (NaN: none, closed loop, or not the client's), on disk past a size
        self._lags = SpillColumn()
        self._held: list[RequestRecord] = []
        #: schedule index -> arrival (-1: none yet), for turn-0 records with an index
        self._slot = array("i")
        #: (index << 20 | turn, arrival) of the others that have an index
        self._other_keys = array("q")
        self._other_pos = array("q")
        self.keyed = False
        #: records received (duplicates included), and the duplicates among them
        self.received = 0
        self.duplicates = 0
        #: the earliest ``start``, the latest ``start`` and ``end`` seen (the run's span, without reading back)
        self.first_start: float | None = None
        self.last_start: float | None = None
        self.last_end: float | None = None

    def add(self, record: RequestRecord, index: int | None = None, *, counts_lag: bool = True) -> None:
        """Keep ``record`` (already compacted, labelled), filed under its schedule ``index`` and turn (None: in
        arrival order); ``counts_lag`` False: its schedule lag is not the client's (a re-assigned request, late
        on purpose)."""
        where = self.journal.add(record) if self.journal is not None else None
        if where is None:
            self._where.append(-1 - len(self._held))
            self._held.append(record)
        else:
            self._where.append(where[0])
        arrival = self.received
        if index is not None:
            self._file(index, record.turn, arrival)
        self._intended.append(record.intended_send if record.intended_send is not None else 0.0)
        lag = record.schedule_lag if counts_lag else None
        self._lags.append(math.nan if lag is None else lag)
        self.received += 1
        if self.first_start is None or record.start < self.first_start:
            self.first_start = record.start
        if self.last_start is None or record.start > self.last_start:
            self.last_start = record.start
        end = record.end
        if end is not None and (self.last_end is None or end > self.last_end):
            self.last_end = end

    def _file(self, index: int, turn: int, arrival: int) -> None:
        self.keyed = True
        if turn == 0 and 0 <= index < 1 << 31:
            if index >= len(self._slot):
                grow = max(index + 1 - len(self._slot), len(self._slot) // 2, 1024)
                self._slot.extend(array("i", [-1]) * grow)
            if self._slot[index] >= 0:
                self.duplicates += 1
            self._slot[index] = arrival
            return
        key = (index << TURN_BITS) | min(max(turn, 0), (1 << TURN_BITS) - 1)
        self._other_keys.append(key)
        self._other_pos.append(arrival)

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
        return JournalRecords(self, np.arange(start, max(start, stop), dtype=_index_type(self.received)))

    def __len__(self) -> int:
        """Records that count (a key's duplicates once)."""
        return int(self.distinct().size)

    def distinct(self) -> np.ndarray:
        """Arrival numbers of the records that count, by schedule index and turn (the last one of each); in
        arrival order for records kept without an index."""
        kind = _index_type(self.received)
        if not self.keyed:
            return np.arange(self.received, dtype=kind)
        slot = np.frombuffer(self._slot, dtype=np.int32)
        placed = np.flatnonzero(slot >= 0)
        if not self._other_keys:
            return slot[placed].astype(kind)
        keys = np.concatenate([placed.astype(np.int64) << TURN_BITS, np.frombuffer(self._other_keys, dtype=np.int64)])
        arrivals = np.concatenate([slot[placed].astype(np.int64), np.frombuffer(self._other_pos, dtype=np.int64)])
        order = np.lexsort((arrivals, keys))  # by key, then by arrival: the last of a key counts
        keys, arrivals = keys[order], arrivals[order]
        last = np.ones(keys.size, dtype=bool)
        last[:-1] = keys[1:] != keys[:-1]
        return arrivals[last].astype(kind)

    def lags(self, positions: np.ndarray | None = None) -> Chunked:
        """The schedule lags that count of the records at ``positions`` (None: every one), read from disk."""
        if positions is None or positions.size == self.received:
            return Chunked([self._lags], finite=True)  # every arrival counts: no need to pick
        chosen = np.zeros(self.received, dtype=bool)
        chosen[positions] = True
        picked = SpillColumn()
        lo = 0
        for chunk in self._lags.chunks():
            picked.extend(chunk[chosen[lo: lo + chunk.size]])
            lo += chunk.size
        return Chunked([picked], finite=True)

    def in_send_order(self, positions: np.ndarray | None = None, fix: Fix | None = None) -> JournalRecords:
        """The records that count (or those at ``positions``, already by key) in intended-send order (closed loop,
        where none has one: by key), each decoded when read; ``fix`` is applied to each record read."""
        if positions is None:
            positions = self.distinct()
        intended = np.frombuffer(self._intended, dtype=np.float64)
        if not _ascending(intended, positions):
            positions = positions[np.argsort(intended[positions], kind="stable")]
        return JournalRecords(self, positions, fix)

    def line(self, arrival: int) -> tuple[int, int]:
        """Where the record that arrived ``arrival``-th is: ``(offset, length)`` in the journal, or ``(-1 - i,
        0)``: the i-th record held in memory. The journal's lines are those of the first arrivals, one after the
        other (once a write fails, it takes no more)."""
        offsets, lengths = self.lines(np.asarray([arrival], dtype=np.int64))
        return int(offsets[0]), int(lengths[0])

    def lines(self, arrivals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`line` for many arrivals at once."""
        where = np.frombuffer(self._where, dtype=np.int64)
        offsets = where[arrivals]
        following = where[np.minimum(arrivals + 1, max(self.received - 1, 0))].copy()
        following[(arrivals + 1 >= self.received) | (following < 0)] = self.journal.size if self.journal else 0
        lengths = np.where(offsets >= 0, following - offsets, 0)
        return offsets, lengths

    def read(self, offset: int, length: int) -> RequestRecord:
        if offset < 0:
            return self._held[-1 - offset]
        assert self.journal is not None
        return RequestRecord.from_dict(orjson.loads(self.journal.read_line(offset, length)))


def _index_type(n: int) -> type[np.signedinteger]:
    """int32 positions while they fit (4 bytes a record), else int64."""
    return np.int32 if n < 1 << 31 else np.int64


def _ascending(values: np.ndarray, positions: np.ndarray) -> bool:
    """``values[positions]`` never decreases (checked a slice at a time: no copy of the whole)."""
    last = -math.inf
    for lo in range(0, positions.size, _ORDER_CHECK):
        part = values[positions[lo: lo + _ORDER_CHECK]]
        if part.size and (part[0] < last or bool(np.any(part[1:] < part[:-1]))):
            return False
        if part.size:
            last = float(part[-1])
    return True


class JournalRecords(OnRead[RequestRecord]):
    """Records read back from a run's journal when asked for, in a fixed order; each read decodes a new
    :class:`RequestRecord` (changing one changes nothing kept: ``fix`` is how a run's end amends them)."""

    def __init__(self, kept: KeptRecords, positions: np.ndarray, fix: Fix | None = None) -> None:
        self._kept = kept
        self._positions = positions
        self._fix = fix

    def with_fix(self, fix: Fix | None) -> JournalRecords:
        return JournalRecords(self._kept, self._positions, fix)

    def __len__(self) -> int:
        return int(self._positions.size)

    def _made(self, i: int) -> RequestRecord:
        return self._read(int(self._positions[i]))

    def __iter__(self) -> Iterator[RequestRecord]:
        for lo in range(0, self._positions.size, READ_BATCH):
            batch = self._positions[lo: lo + READ_BATCH].astype(np.int64)
            offsets, lengths = self._kept.lines(batch)
            first, blob = self._span(offsets, lengths)
            for offset, length in zip(offsets.tolist(), lengths.tolist(), strict=True):
                if offset >= 0 and blob is not None:
                    record = RequestRecord.from_dict(orjson.loads(blob[offset - first: offset - first + length]))
                else:
                    record = self._kept.read(offset, length)
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
        record = self._kept.read(*self._kept.line(position))
        if self._fix is not None:
            self._fix(record)
        return record
