"""Per-request lists written without being held (issue 37): a result JSON's ``latencies``, ``ttfts``, ``itls``,
``generated_texts`` ... for a million requests are hundreds of megabytes as Python lists and again as JSON text,
built at the very end of a run. A :class:`StreamedList` knows its length and makes its items afresh each time it
is iterated (from the records, whose texts the journal holds), so ``llmload.core.result.write_json`` writes them
one by one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any


class StreamedList(list):  # type: ignore[type-arg]
    """A list whose items are made when it is iterated; its own storage stays empty. Reads as the list it stands
    for (``len``, iteration, indexing, ``==``); a JSON encoder must iterate it (Python's ``json`` with an indent,
    or ``JSONEncoder.iterencode``; the C encoder without one reads a list's storage and would write ``[]``)."""

    def __init__(self, length: int, items: Callable[[], Iterable[Any]]) -> None:
        super().__init__()
        self._length = length
        self._items = items

    def __iter__(self) -> Iterator[Any]:
        return iter(self._items())

    def __len__(self) -> int:
        return self._length

    def __bool__(self) -> bool:
        return self._length > 0

    def __getitem__(self, index: Any) -> Any:
        return list(self._items())[index]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, list) and list(self._items()) == list(other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"StreamedList({self._length} items)"

    def mapped(self, f: Callable[[Any], Any]) -> StreamedList:
        """The same list with ``f`` applied to each item as it is made."""
        return StreamedList(self._length, lambda: (f(x) for x in self._items()))
