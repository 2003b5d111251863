"""A sequence whose items are made when they are read, not held (issue 37: a run of millions keeps a few numbers an
item): a schedule's entries, a worker's job, a random dataset's prompts, a run's scrapes and records read back.
A subclass gives ``__len__`` and :meth:`OnRead._made`; indexing (negative indices, slices, ``IndexError`` past the
end) and iteration come from here, and a subclass may read faster in order by overriding ``__iter__``."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar, overload

T = TypeVar("T")


class OnRead(Sequence[T]):
    """Items made by :meth:`_made` each time they are read."""

    def __len__(self) -> int:
        raise NotImplementedError

    def _made(self, i: int) -> T:
        raise NotImplementedError

    @overload
    def __getitem__(self, index: int) -> T: ...
    @overload
    def __getitem__(self, index: slice) -> list[T]: ...
    def __getitem__(self, index: int | slice) -> T | list[T]:
        if isinstance(index, slice):
            return [self._made(i) for i in range(*index.indices(len(self)))]
        return self._made(range(len(self))[index])  # negative indices, and IndexError past the end

    def __iter__(self) -> Iterator[T]:
        return (self._made(i) for i in range(len(self)))


class OnReadByValue(OnRead[T]):
    """An :class:`OnRead` equal to a list of the same items (so not hashable, like that list)."""

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]
