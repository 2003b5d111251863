"""Value columns that move to disk past a size, and the summaries of one read back in chunks (issue 37).

A run's statistics need every TTFT, ITL, E2EL... of the run. Held as float64 arrays they are 8 bytes a value:
a million requests of 16 tokens are ~150 MB of ITLs alone. A :class:`SpillColumn` keeps its first
:data:`SPILL_AFTER` values in memory, as before; past that it writes them to an unnamed temporary file and
keeps only what has come since the last write. A :class:`Chunked` source stands for the values of one or more
columns (NaN left out where asked) and is read a chunk at a time: :func:`summary` gives what
:class:`~llmload.metrics.distribution.Distribution` reports, with the percentiles, median and max exact
(:mod:`llmload.metrics.exact`: numpy's bit for bit) and the mean and standard deviation from correctly rounded
sums (numpy's own pairwise sums agree with them to the last bit or two).

A run below :data:`SPILL_AFTER` values a column never touches the disk and gets numpy's numbers from one array,
exactly as before.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from itertools import chain
from typing import IO

import numpy as np

from llmload.common.errors import ConfigError
from llmload.metrics.exact import exact_order_statistics

#: values a column keeps in memory before it writes them to disk (512 KiB of float64); ``LLMLOAD_SPILL_AFTER``
#: sets another (a test spills a small run with it; 0: every value goes to disk)
SPILL_AFTER = 1 << 16
SPILL_AFTER_VARIABLE = "LLMLOAD_SPILL_AFTER"


def spill_threshold(*, strict: bool = True) -> int:
    """The threshold in force: ``LLMLOAD_SPILL_AFTER`` when set, else :data:`SPILL_AFTER`. ConfigError (one line)
    when it is not a whole number >= 0 (a run's configuration checks it before the first request); not
    ``strict`` (a column being made mid-run): the default then."""
    text = os.environ.get(SPILL_AFTER_VARIABLE, "").strip()
    if not text or (not strict and not text.isdigit()):
        return SPILL_AFTER
    if not text.isdigit():
        raise ConfigError(f"{SPILL_AFTER_VARIABLE}={text!r}: expected a whole number of values (0 or more)")
    return int(text)


#: values read back at once (512 KiB)
READ_CHUNK = 1 << 16
#: values gathered in one preallocated block before it joins the column (32 KiB: no array per record)
BLOCK = 4096


class SpillColumn:
    """A float64 column grown one value (or one array) at a time; its values are read back whole
    (:meth:`array`, while small) or in chunks (:meth:`chunks`, always)."""

    def __init__(self, spill_after: int | None = None) -> None:
        self._parts: list[np.ndarray] = []
        self._block = np.empty(BLOCK)
        self._filled = 0
        self._held = 0
        self._file: IO[bytes] | None = None
        self._on_disk = 0
        self.spill_after = spill_after if spill_after is not None else spill_threshold(strict=False)
        self.size = 0

    @property
    def spilled(self) -> bool:
        """Some of its values are on disk (:meth:`array` would read them all back)."""
        self._flush()
        return self._file is not None

    def append(self, value: float) -> None:
        self._block[self._filled] = value
        self._filled += 1
        self.size += 1
        if self._filled == BLOCK:
            self._flush()

    def extend(self, values: np.ndarray) -> None:
        values = np.asarray(values, dtype=np.float64).ravel()
        self.size += int(values.size)
        while values.size:
            room = BLOCK - self._filled
            take = values[:room]
            self._block[self._filled: self._filled + take.size] = take
            self._filled += take.size
            values = values[take.size:]
            if self._filled == BLOCK:
                self._flush()

    def _flush(self) -> None:
        """The block's values join the column (and go to disk past the threshold)."""
        if not self._filled:
            return
        if self._filled == BLOCK:
            self._parts.append(self._block)
            self._block = np.empty(BLOCK)
        else:
            self._parts.append(self._block[: self._filled].copy())
        self._held += self._filled
        self._filled = 0
        self._maybe_spill()

    def _maybe_spill(self) -> None:
        if self._held <= self.spill_after:
            return
        if self._file is None:
            self._file = tempfile.TemporaryFile(prefix="llmload-values-")  # noqa: SIM115  (lives with the column)
        self._file.seek(0, 2)
        for part in self._parts:
            self._file.write(np.ascontiguousarray(part, dtype=np.float64).tobytes())
        self._on_disk += self._held
        self._parts, self._held = [], 0

    def array(self) -> np.ndarray:
        """Every value as one array (the disk's too: for columns that never spilled, or a test)."""
        self._flush()
        if self._file is not None:
            return np.concatenate([*self.chunks()]) if self.size else np.zeros(0)
        if len(self._parts) > 1:
            self._parts = [np.concatenate(self._parts)]
        return self._parts[0] if self._parts else np.zeros(0)

    def chunks(self, step: int = READ_CHUNK) -> Iterator[np.ndarray]:
        """The values in order, ``step`` at a time (the last chunk shorter); columns of the same size give
        chunks that line up row for row."""
        self._flush()
        if self._file is not None:
            self._file.flush()
            self._file.seek(0)
            for lo in range(0, self._on_disk, step):
                n = min(step, self._on_disk - lo)
                yield np.frombuffer(self._file.read(8 * n), dtype=np.float64)
        memory = self._parts[0] if len(self._parts) == 1 else (
            np.concatenate(self._parts) if self._parts else np.zeros(0))
        for lo in range(0, memory.size, step):
            yield memory[lo: lo + step]


class Chunked:
    """The values of some columns one after the other (NaN left out with ``finite``), read in chunks; what a
    metric's summary is computed from once a column spilled."""

    def __init__(self, columns: Sequence[SpillColumn], *, finite: bool = False) -> None:
        self.columns = list(columns)
        self.finite = finite
        self._count: int | None = None

    def chunks(self) -> Iterator[np.ndarray]:
        for column in self.columns:
            for chunk in column.chunks():
                yield chunk[~np.isnan(chunk)] if self.finite else chunk

    def __len__(self) -> int:
        if self._count is None:
            self._count = sum(c.size for c in self.columns) if not self.finite else sum(
                int(chunk.size) for chunk in self.chunks())
        return self._count

    def scaled(self, factor: float) -> Iterator[np.ndarray]:
        for chunk in self.chunks():
            yield chunk * factor


def summary(values: Chunked, percentiles: Sequence[float], scale: float = 1000.0
            ) -> tuple[int, float, float, float, float, list[float]]:
    """``(count, mean, median, std, max, [percentiles])`` of ``values`` × ``scale``, as numpy computes them over
    one array (percentiles, median and max exactly; mean and std correctly rounded); zeros when empty."""
    n = len(values)
    if n == 0:
        return 0, 0.0, 0.0, 0.0, 0.0, [0.0 for _ in percentiles]

    def scaled() -> Iterator[np.ndarray]:
        return values.scaled(scale)

    total = _fsum(scaled())
    mean = total / n
    if math.isnan(mean):
        nan = float("nan")
        return n, nan, nan, nan, nan, [nan for _ in percentiles]
    squares = _fsum(np.abs(chunk - mean) ** 2 for chunk in scaled())
    std = math.sqrt(squares / n)
    middle = [n // 2] if n % 2 else [n // 2 - 1, n // 2]
    pcts, stats = exact_order_statistics(scaled, percentiles, [*middle, n - 1])
    median = stats[0] if n % 2 else float(np.true_divide(np.float64(stats[0]) + np.float64(stats[1]), 2))
    return n, mean, median, std, stats[-1], pcts


#: values turned into Python floats at once for a correctly rounded sum (a list of floats is 32 bytes a value)
_FSUM_SLICE = 1 << 14


def _fsum(chunks: Iterable[np.ndarray]) -> float:
    """The correctly rounded sum of every value of ``chunks`` (one ``math.fsum``), fed a slice at a time."""
    return math.fsum(chain.from_iterable(chunk[lo: lo + _FSUM_SLICE].tolist()
                                         for chunk in chunks for lo in range(0, chunk.size, _FSUM_SLICE)))
