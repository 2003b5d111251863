"""A set of request indices in one bit each: what the master tracks per worker (assigned, dispatched, received).

A Python ``set`` of ints costs ~60 bytes an index (the int and its slot); a worker's three sets were ~180 bytes
for every request of a run, growing without bound over a soak (issue 37). The schedule's indices are dense
(0 to N-1), so a bitmap holds them in N/8 bytes, and the differences the master takes (``assigned - dispatched -
received``) become byte-wise operations. Negative indices (a record the master cannot place) are rare and go in a
small plain set beside the bitmap.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np


class IndexSet:
    """A set of ints, non-negative ones as bits: ``add``, ``discard``, ``update``, ``difference_update``, ``in``,
    ``len``, ``-`` and iteration in ascending order (so ``sorted(s)`` is cheap)."""

    __slots__ = ("_bits", "_count", "_negative")

    def __init__(self, indices: Iterable[int] = ()) -> None:
        self._bits = bytearray()
        self._count = 0
        self._negative: set[int] = set()
        self.update(indices)

    def add(self, index: int) -> None:
        if index < 0:
            self._negative.add(index)
            return
        byte, bit = index >> 3, 1 << (index & 7)
        if byte >= len(self._bits):
            self._bits.extend(bytes(max(byte + 1 - len(self._bits), len(self._bits))))
        if not self._bits[byte] & bit:
            self._bits[byte] |= bit
            self._count += 1

    def discard(self, index: int) -> None:
        if index < 0:
            self._negative.discard(index)
            return
        byte, bit = index >> 3, 1 << (index & 7)
        if byte < len(self._bits) and self._bits[byte] & bit:
            self._bits[byte] &= ~bit & 0xFF
            self._count -= 1

    def update(self, indices: Iterable[int]) -> None:
        for index in indices:
            self.add(index)

    def difference_update(self, indices: Iterable[int]) -> None:
        if isinstance(indices, IndexSet):
            self._replace(self._and_not(indices), self._negative - indices._negative)
            return
        for index in indices:
            self.discard(index)

    def between(self, lo: int, hi: int) -> list[int]:
        """The non-negative members in ``[lo, hi)``, ascending."""
        lo, hi = max(0, lo), min(hi, len(self._bits) * 8)
        if hi <= lo:
            return []
        first, last = lo >> 3, (hi + 7) >> 3
        bits = np.unpackbits(np.frombuffer(bytes(self._bits[first:last]), dtype=np.uint8), bitorder="little")
        found = np.flatnonzero(bits) + first * 8
        return found[(found >= lo) & (found < hi)].tolist()

    def __contains__(self, index: object) -> bool:
        if not isinstance(index, int | np.integer):
            return False
        index = int(index)
        if index < 0:
            return index in self._negative
        byte = index >> 3
        return byte < len(self._bits) and bool(self._bits[byte] & (1 << (index & 7)))

    def __len__(self) -> int:
        return self._count + len(self._negative)

    def __bool__(self) -> bool:
        return len(self) > 0

    def __iter__(self) -> Iterator[int]:
        yield from sorted(self._negative)
        if self._count:
            bits = np.unpackbits(np.frombuffer(bytes(self._bits), dtype=np.uint8), bitorder="little")
            yield from np.flatnonzero(bits).tolist()

    def __sub__(self, other: IndexSet | Iterable[int]) -> IndexSet:
        if not isinstance(other, IndexSet):
            other = IndexSet(other)
        out = IndexSet()
        out._replace(self._and_not(other), self._negative - other._negative)
        return out

    def __eq__(self, other: object) -> bool:
        if isinstance(other, IndexSet | set | frozenset):
            return set(self) == set(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, as set

    def __repr__(self) -> str:
        return f"IndexSet({len(self)} indices)"

    def _and_not(self, other: IndexSet) -> bytearray:
        mine = np.frombuffer(bytes(self._bits), dtype=np.uint8)
        theirs = np.zeros(len(mine), dtype=np.uint8)
        n = min(len(mine), len(other._bits))
        theirs[:n] = np.frombuffer(bytes(other._bits[:n]), dtype=np.uint8)
        return bytearray((mine & ~theirs).tobytes())

    def _replace(self, bits: bytearray, negative: set[int]) -> None:
        self._bits = bits
        self._count = int.from_bytes(bits, "little").bit_count() if bits else 0
        self._negative = negative
