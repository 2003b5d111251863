"""A run's records read from its file when asked for, for ``llmload report`` and ``llmload compare``.

A report used to load every record of a run as an object: ~2 KB a request, so a soak of a million requests needed
gigabytes before its first figure (issue 37). :class:`RecordsFile` keeps where each record's line starts in the
file (JSONL) or which row holds it (Parquet), and decodes a record each time it is read: a pass over the run costs
one decode a record and holds a batch at a time. A report makes a few such passes (the statistics, the columns
of per-request numbers, the figures over time), each in bounded memory.

Opening a file reads it through once: every line must be a JSON object (else a :class:`DatasetError` naming the
line). A journal (records of a run
that died) can hold a record twice, when a frozen worker sent it again: the last one counts, as in the records
file the run would have written.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from llmload.client.records import RequestRecord
from llmload.client.records.file import record_from_row
from llmload.common.errors import DatasetError
from llmload.common.onread import OnRead

#: bytes read at once while the file is scanned
SCAN_BYTES = 8 << 20
#: records decoded together when read in order (a Parquet batch, a run of JSONL lines)
READ_BATCH = 4096


class RecordsFile(OnRead[RequestRecord]):
    """The records of one file (``.jsonl`` or ``.parquet``), each decoded when it is read."""

    def __init__(self, path: Path, *, last_wins: bool = False) -> None:
        self.path = path
        self._parquet = path.suffix == ".parquet"
        try:
            if self._parquet:
                self._rows, self._group_starts = _scan_parquet(path)
                self._starts = self._lengths = np.zeros(0, dtype=np.int64)
            else:
                self._starts, self._lengths = _scan_jsonl(path, last_wins)
                self._rows = np.arange(self._starts.size, dtype=np.int64)
                self._group_starts = np.zeros(1, dtype=np.int64)
        except OSError as exc:
            raise DatasetError(f"{path}: cannot read request records ({exc.strerror or exc})") from None
        self._group_cache: tuple[int, list[dict[str, Any]]] | None = None

    def __len__(self) -> int:
        return int(self._rows.size)

    def _made(self, i: int) -> RequestRecord:
        return next(self.at(np.asarray([i])))

    def __iter__(self) -> Iterator[RequestRecord]:
        return self.at(np.arange(len(self)))

    def at(self, positions: np.ndarray) -> Iterator[RequestRecord]:
        """The records at ``positions`` (ascending reads fastest), decoded a batch at a time."""
        for lo in range(0, positions.size, READ_BATCH):
            batch = positions[lo: lo + READ_BATCH]
            rows = self._parquet_rows(batch) if self._parquet else self._jsonl_rows(batch)
            for row in rows:
                try:
                    yield record_from_row(row) if self._parquet else RequestRecord.from_dict(row)
                except (TypeError, ValueError, KeyError) as exc:
                    raise DatasetError(f"{self.path}: a request record that is not one ({exc})") from None

    def _jsonl_rows(self, batch: np.ndarray) -> Iterator[Any]:
        starts, lengths = self._starts[batch], self._lengths[batch]
        first, last = int(starts.min()), int((starts + lengths).max())
        with open(self.path, "rb") as f:
            if last - first <= 4 * int(lengths.sum()) + (1 << 16):  # close together: one read
                f.seek(first)
                blob = f.read(last - first)
                for start, length in zip(starts.tolist(), lengths.tolist(), strict=True):
                    yield orjson.loads(blob[start - first: start - first + length])
                return
            for start, length in zip(starts.tolist(), lengths.tolist(), strict=True):
                f.seek(start)
                yield orjson.loads(f.read(length))

    def _parquet_rows(self, batch: np.ndarray) -> Iterator[dict[str, Any]]:
        import pyarrow.parquet as pq

        rows = self._rows[batch]
        groups = np.searchsorted(self._group_starts, rows, side="right") - 1
        for row, group in zip(rows.tolist(), groups.tolist(), strict=True):
            if self._group_cache is None or self._group_cache[0] != group:
                table = pq.ParquetFile(self.path).read_row_group(group)
                self._group_cache = (group, table.to_pylist())
            yield self._group_cache[1][row - int(self._group_starts[group])]


def _scan_jsonl(path: Path, last_wins: bool) -> tuple[np.ndarray, np.ndarray]:
    """Each non-blank line's start and length, every line checked to be a JSON object; with ``last_wins`` each
    request id keeps its last line, in the place of its first."""
    starts, lengths, ids = array("q"), array("q"), array("q")
    base, lineno, carry = 0, 0, b""
    with open(path, "rb") as f:
        while True:
            block = f.read(SCAN_BYTES)
            data = carry + block
            if not data:
                break
            ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
            if not block:  # the last line may have no newline
                ends = np.append(ends, len(data))
            begin = np.concatenate([[0], ends[:-1] + 1]) if ends.size else np.zeros(0, dtype=np.int64)
            for b, e in zip(begin.tolist(), ends.tolist(), strict=True):
                lineno += 1
                line = data[b:e]
                if not line.strip():
                    continue
                obj = _object(line, path, lineno)
                if last_wins:
                    ids.append(hash(str(obj.get("request_id", ""))))
                starts.append(base + b)
                lengths.append(e - b)
            consumed = int(ends[-1]) + 1 if ends.size else 0
            carry = data[consumed:] if block else b""
            base += consumed
            if not block:
                break
    start_arr = np.frombuffer(starts, dtype=np.int64) if starts else np.zeros(0, dtype=np.int64)
    length_arr = np.frombuffer(lengths, dtype=np.int64) if lengths else np.zeros(0, dtype=np.int64)
    if last_wins and ids:
        keys = np.frombuffer(ids, dtype=np.int64)
        # each id in the place it first came, with its last line (a dict's order: first key, last value)
        _, first = np.unique(keys, return_index=True)
        _, from_end = np.unique(keys[::-1], return_index=True)
        order = np.argsort(first, kind="stable")
        keep = (keys.size - 1 - from_end)[order]
        start_arr, length_arr = start_arr[keep], length_arr[keep]
    return start_arr, length_arr


def _object(line: bytes, path: Path, lineno: int) -> dict[str, Any]:
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise DatasetError(f"{path}:{lineno}: cannot read request records (not JSON: {exc})") from None
    if not isinstance(obj, dict):
        raise DatasetError(f"{path}:{lineno}: cannot read request records (expected a JSON object)")
    return obj


def _scan_parquet(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Every row, and where each row group starts."""
    import pyarrow.parquet as pq

    try:
        meta = pq.ParquetFile(path).metadata
    except Exception as exc:  # pyarrow raises many kinds for a file that is not Parquet
        raise DatasetError(f"{path}: cannot read request records ({exc})") from None
    sizes = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
    groups = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) if sizes else np.zeros(1, np.int64)
    return np.arange(meta.num_rows, dtype=np.int64), groups


def records_span(records: Iterable[RequestRecord]) -> tuple[float, float] | None:
    """``(first start, last end)`` of records, in one pass (None without records)."""
    lo, hi = math.inf, -math.inf
    for r in records:
        lo = min(lo, r.start)
        hi = max(hi, r.end if r.end is not None else r.start)
    return (lo, hi) if lo <= hi else None


class RecordsView(OnRead[RequestRecord]):
    """Some of a run's records (its completed ones, its failed ones) by position, read when iterated."""

    def __init__(self, records: Sequence[RequestRecord], positions: np.ndarray) -> None:
        self._records = records
        self._positions = positions

    def __len__(self) -> int:
        return int(self._positions.size)

    def _made(self, i: int) -> RequestRecord:
        return self._records[int(self._positions[i])]

    def __iter__(self) -> Iterator[RequestRecord]:
        if isinstance(self._records, RecordsFile):
            return self._records.at(self._positions)
        return (self._records[int(p)] for p in self._positions)
