"""Per-request lists streamed into the result JSON (issue 37): ``write_json`` writes a ``StreamedList`` as the
list it stands for, byte for byte what ``json.dumps(indent=2)`` writes of the plain lists, and so does
``--append-result``'s line; non-finite values are made safe item by item; the lists are never held whole."""

from __future__ import annotations

import json
import math
import tracemalloc
from pathlib import Path

from llmload.core.result import append_json_line, write_json
from llmload.metrics.streamed import StreamedList


def _data(n: int, streamed: bool) -> dict:
    def ttfts():
        return (0.001 * (k % 97) + (math.inf if k == 3 else 0.0) for k in range(n))

    def itls():
        return ([0.01 * j for j in range(k % 5)] for k in range(n))

    lists = {"ttfts": (ttfts, n), "itls": (itls, n), "errors": (lambda: ("" for _ in range(n)), n)}
    made = {k: StreamedList(length, f) if streamed else list(f()) for k, (f, length) in lists.items()}
    return {"date": "20261205-120000", "request_rate": math.inf, "completed": n, **made, "empty": []}


def test_streamed_lists_write_what_plain_ones_do(tmp_path: Path) -> None:
    write_json(tmp_path / "plain.json", _data(500, streamed=False))
    write_json(tmp_path / "streamed.json", _data(500, streamed=True))
    assert (tmp_path / "streamed.json").read_bytes() == (tmp_path / "plain.json").read_bytes()
    data = json.loads((tmp_path / "streamed.json").read_text())
    assert len(data["ttfts"]) == 500 and data["ttfts"][3] == "inf" and data["request_rate"] == "inf"
    append_json_line(tmp_path / "plain.jsonl", _data(50, streamed=False))
    append_json_line(tmp_path / "streamed.jsonl", _data(50, streamed=True))
    assert (tmp_path / "streamed.jsonl").read_bytes() == (tmp_path / "plain.jsonl").read_bytes()
    assert json.loads((tmp_path / "streamed.jsonl").read_text())["itls"][4] == [0.0, 0.01, 0.02, 0.03]


def test_a_streamed_list_reads_as_its_list() -> None:
    s = StreamedList(4, lambda: iter([1, 2, 3, 4]))
    assert len(s) == 4 and list(s) == [1, 2, 3, 4] and s[1] == 2 and s[-1] == 4
    assert s == [1, 2, 3, 4] and s == [1, 2, 3, 4] and s != [1, 2] and bool(s)
    assert not StreamedList(0, lambda: iter([]))


def test_the_lists_are_written_without_being_held(tmp_path: Path) -> None:
    n = 30_000
    plain = _data(n, streamed=False)
    tracemalloc.start()
    try:
        write_json(tmp_path / "streamed.json", _data(n, streamed=True))
        _, streamed_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        write_json(tmp_path / "plain.json", plain)
        _, plain_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (tmp_path / "streamed.json").stat().st_size == (tmp_path / "plain.json").stat().st_size
    assert streamed_peak < 500_000 < 4 * 500_000 < plain_peak, (streamed_peak, plain_peak)
