"""The scrapes of a run, on disk as they come: what a soak of a day scrapes does not stay in memory.

A scrape of a vLLM page keeps ~10 KB (its histograms' buckets and up to 2,000 raw samples); at one a second, a day
is 86,400 of them, most of a gigabyte (issue 37). :class:`SnapshotLog` writes each one as the series file's line
(:mod:`llmload.servermetrics.store`) to an unnamed temporary file and keeps its place and time (24 bytes) and the
latest scrape whole (the saturation checks and the live tab read it every second). A scrape read back is decoded
from its line; the live tab reads a few hundred of them; the end-of-run summary reads them once, without their
histograms and raw samples (:meth:`slim`). ``save`` copies the file out as the run's ``X.server_metrics.jsonl``.
Where no temporary file can be made, the scrapes are kept whole in memory, as before.
"""

from __future__ import annotations

import os
import tempfile
import time
from array import array
from pathlib import Path
from typing import IO

import orjson

from llmload.common.onread import OnReadByValue
from llmload.servermetrics.snapshot import Snapshot
from llmload.servermetrics.store import decode_line, encode_line


class SnapshotLog(OnReadByValue[Snapshot]):
    """Scrapes in the order taken: ``append``, ``len``, indexing (the last one held whole), ``slim``, ``save``."""

    def __init__(self, clock_offset: float | None = None) -> None:
        # the file's ``clock`` (wall - perf_counter of this process; a reader on another clock moves ``t`` by it)
        self._clock = time.time() - time.perf_counter() if clock_offset is None else clock_offset
        self._file: IO[bytes] | None
        try:
            self._file = tempfile.TemporaryFile(prefix="llmload-scrapes-")  # noqa: SIM115  (lives with the log)
        except OSError:
            self._file = None
        self._held: list[Snapshot] = []  # only without a file
        self._starts = array("q")
        self._lengths = array("q")
        self._size = 0
        self._latest: Snapshot | None = None

    def append(self, snapshot: Snapshot) -> None:
        self._latest = snapshot
        self._size += 1
        if self._file is None:
            self._held.append(snapshot)
            return
        line = encode_line(snapshot, self._clock)
        self._file.seek(0, os.SEEK_END)
        self._starts.append(self._file.tell())
        self._lengths.append(len(line))
        self._file.write(line)

    def __len__(self) -> int:
        return self._size

    def _made(self, i: int) -> Snapshot:
        if self._file is None:
            return self._held[i]
        if i == self._size - 1 and self._latest is not None:
            return self._latest
        return self._read(i, slim=False)

    def slim(self) -> list[Snapshot]:
        """Every scrape without its histograms and raw samples (what a summary reads: ~1 KB each)."""
        if self._file is None:
            return [Snapshot(s.t, s.wall, s.engine, s.series) for s in self._held]
        return [self._read(i, slim=True) for i in range(self._size)]

    def save(self, path: Path) -> None:
        """The series file (:func:`~llmload.servermetrics.store.write_series`'s lines), written atomically."""
        from llmload.servermetrics.store import write_series

        if self._file is None:
            write_series(path, self._held, self._clock)
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        try:
            with open(tmp, "wb") as out:
                self._file.seek(0)
                while block := self._file.read(1 << 20):
                    out.write(block)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def _read(self, i: int, *, slim: bool) -> Snapshot:
        assert self._file is not None
        self._file.seek(self._starts[i])
        obj = orjson.loads(self._file.read(self._lengths[i]))
        if slim:
            obj.pop("histograms", None)
            obj.pop("raw", None)
        return decode_line(obj, None)
