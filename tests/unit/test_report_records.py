"""``llmload report``'s reader of a records file (report/records.RecordsFile): a bad file is one line naming the
file and the line before any figure; a good one reads back in order, any record on its own, and a journal's
duplicate keeps its last line in its first place."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest

from llmload.client.records import RequestRecord
from llmload.common.errors import DatasetError
from llmload.report.loader import load_run
from llmload.report.records import RecordsFile, records_span


def _line(k: int, text: str = "x") -> bytes:
    record = RequestRecord(request_id=f"r{k}", start=10.0 + k, first_token=10.1 + k, chunk_times=[10.1 + k, 10.2 + k],
                           chunk_tokens=[1, 1], output_tokens=2, success=True, generated_text=text)
    return orjson.dumps(record.to_dict()) + b"\n"


def test_records_read_back_in_order_and_one_by_one(tmp_path: Path) -> None:
    path = tmp_path / "run.records.jsonl"
    path.write_bytes(b"".join(_line(k) for k in range(10)) + b"\n  \n" + _line(10).rstrip(b"\n"))  # no last newline
    records = RecordsFile(path)
    assert [r.request_id for r in records] == [f"r{k}" for k in range(11)]
    assert records[-1].request_id == "r10" and records[3].start == 13.0
    assert records_span(records) == (10.0, 20.2)


def test_a_journal_keeps_each_ids_last_line_in_its_first_place(tmp_path: Path) -> None:
    path = tmp_path / "run.journal.jsonl"
    path.write_bytes(_line(0) + _line(1, "old") + _line(2) + _line(1, "new"))
    records = RecordsFile(path, last_wins=True)
    assert [(r.request_id, r.generated_text) for r in records] == [("r0", "x"), ("r1", "new"), ("r2", "x")]


@pytest.mark.parametrize(("content", "says"), [
    (b'{"request_id": "r0"}\n{"request_id": \n', ":2: cannot read request records (not JSON"),
    (b'[1, 2]\n', ":1: cannot read request records (expected a JSON object)"),
])
def test_a_bad_line_is_one_error_naming_it(tmp_path: Path, content: bytes, says: str) -> None:
    path = tmp_path / "run.records.jsonl"
    path.write_bytes(content)
    with pytest.raises(DatasetError, match=re.escape(f"run.records.jsonl{says}")):
        RecordsFile(path)


def test_an_empty_records_file_is_one_error(tmp_path: Path) -> None:
    path = tmp_path / "run.records.jsonl"
    path.write_bytes(b"\n")
    with pytest.raises(DatasetError, match="holds no request records"):
        load_run(path)
