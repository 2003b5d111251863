"""The records journal: a kept record is on disk the moment it arrives, its text only there, and everything
written from it afterwards is byte for byte what it was (docs/reliability.md, "Records journal").

Real files in ``tmp_path``; the disk-full case runs in a child process whose file size limit (RLIMIT_FSIZE)
makes a write fail with EFBIG, as on a full disk.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from llmload.client.records import RequestRecord
from llmload.client.records.file import read_records, write_records
from llmload.client.records.journal import RecordJournal
from llmload.core.outcome import finish_records
from llmload.core.sink import RecordList
from llmload.metrics import compute_metrics, detailed_lists

_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=300)


def _record(k: int, text: str, tokens: int = 30, source: str = "chunks") -> RequestRecord:
    times = [100.0 + k + 0.01 * j for j in range(tokens)]
    return RequestRecord(request_id=f"r{k}", backend="vllm", prompt_len=12, expected_output_len=tokens,
                         intended_send=99.0 + k, start=99.5 + k, first_token=times[0] if times else None,
                         chunk_times=times, chunk_tokens=[1] * tokens, output_tokens=tokens,
                         output_tokens_source=source, generated_text=text, success=bool(tokens),
                         reasoning_text="thinking" if k % 3 == 0 else "")


def _kept(records: list[RequestRecord], journal: RecordJournal | None) -> RecordList:
    keeper = RecordList(journal)
    for r in records:
        keeper.add(r)
    return keeper


@settings(max_examples=30, deadline=None)
@given(st.lists(_TEXT, min_size=1, max_size=12))
def test_journaled_records_write_what_the_plain_ones_do(tmp_path_factory, texts: list[str]) -> None:
    tmp = tmp_path_factory.mktemp("journal")
    journal = RecordJournal(tmp / "run.journal.jsonl", print)
    plain = _kept([_record(k, t) for k, t in enumerate(texts)], None)
    held = _kept([_record(k, t) for k, t in enumerate(texts)], journal)
    # the records left memory: they are read back from the journal, texts and all, exactly
    assert len(held) == len(texts) and held.kept.received == len(texts)
    assert [r.text() for r in held] == texts
    assert [r.to_dict() for r in held] == [r.to_dict() for r in plain]
    write_records(tmp / "plain.jsonl", plain)
    write_records(tmp / "held.jsonl", held)
    assert (tmp / "held.jsonl").read_bytes() == (tmp / "plain.jsonl").read_bytes()
    # the journal itself: one whole record a line, in arrival order, readable as a records file
    assert journal.complete and journal.records == len(texts)
    assert [r.to_dict() for r in read_records(tmp / "run.journal.jsonl")] == [r.to_dict() for r in plain]


def test_statistics_detailed_lists_and_retokenized_counts_are_unchanged(tmp_path: Path) -> None:
    texts = ["alpha beta gamma", "", "one two", "x " * 40]
    plain = [_record(k, t, source="pending") for k, t in enumerate(texts)]
    held = _kept([_record(k, t, source="pending") for k, t in enumerate(texts)],
                 RecordJournal(tmp_path / "j.jsonl", print))

    def words(text: str, add_special_tokens: bool = False):
        return type("Encoded", (), {"input_ids": text.split()})()

    plain, held = finish_records(plain, words), finish_records(held, words)
    assert [r.output_tokens for r in held] == [len(t.split()) for t in texts]
    assert [r.output_tokens for r in held] == [r.output_tokens for r in plain]
    assert compute_metrics(held, 5.0).to_result_dict() == compute_metrics(plain, 5.0).to_result_dict()
    assert detailed_lists(held)["generated_texts"] == texts == detailed_lists(plain)["generated_texts"]


def test_an_unnamed_journal_holds_the_texts_and_leaves_no_file(tmp_path: Path) -> None:
    held = _kept([_record(k, f"text {k}") for k in range(5)], RecordJournal(None, print))
    assert [r.text() for r in held] == [f"text {k}" for k in range(5)]
    assert held.kept.in_memory == 0  # every record is on disk, none held


def test_remove_deletes_the_file_and_the_texts_stay_readable(tmp_path: Path) -> None:
    path = tmp_path / "run.journal.jsonl"
    journal = RecordJournal(path, print)
    held = _kept([_record(k, f"answer {k}") for k in range(3)], journal)
    journal.remove()
    assert not path.exists()
    assert [r.text() for r in held] == ["answer 0", "answer 1", "answer 2"]
    journal.remove()  # twice is harmless


def test_a_second_test_writes_a_fresh_journal(tmp_path: Path) -> None:
    keeper = RecordList(RecordJournal(tmp_path / "a.jsonl", print))
    keeper.add(_record(0, "first"))
    keeper.clear(RecordJournal(tmp_path / "b.jsonl", print))
    keeper.add(_record(1, "second"))
    assert [r.request_id for r in read_records(tmp_path / "a.jsonl")] == ["r0"]
    assert [r.request_id for r in read_records(tmp_path / "b.jsonl")] == ["r1"]
    assert keeper.records[0].text() == "second"


_DISK_FULL = r"""
import json, resource, sys
from pathlib import Path
from llmload.client.records import RequestRecord
from llmload.client.records.journal import RecordJournal
from llmload.core.sink import RecordList

limit, path = int(sys.argv[1]), Path(sys.argv[2])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
warnings = []
keeper = RecordList(RecordJournal(path, warnings.append))
texts = [f"answer {k} " + "word " * 100 for k in range(40)]
for k, text in enumerate(texts):
    keeper.add(RequestRecord(request_id=f"r{k}", chunk_times=[1.0 + k, 1.5 + k], chunk_tokens=[1, 1],
                             generated_text=text, success=True))
print(json.dumps({"warnings": warnings, "texts_ok": [r.text() for r in keeper.records] == texts,
                  "in_memory": keeper.kept.in_memory,
                  "journaled": keeper.journal.records, "complete": keeper.journal.complete}))
"""


def test_a_full_disk_stops_the_journal_with_one_warning_and_loses_nothing(tmp_path: Path) -> None:
    path = tmp_path / "run.journal.jsonl"
    limit = 8_000  # room for a dozen of the 40 lines
    out = subprocess.run([sys.executable, "-c", _DISK_FULL, str(limit), str(path)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout)
    assert len(seen["warnings"]) == 1, seen
    assert str(path) in seen["warnings"][0] and "File too large" in seen["warnings"][0], seen
    assert seen["texts_ok"] and not seen["complete"], seen
    assert 0 < seen["journaled"] < 40 and seen["in_memory"] == 40 - seen["journaled"], seen
    data = path.read_bytes()
    assert len(data) <= limit and data.endswith(b"\n")
    lines = data.splitlines()
    assert len(lines) == seen["journaled"]
    assert [orjson.loads(line)["request_id"] for line in lines] == [f"r{k}" for k in range(len(lines))]


def test_llmload_report_reads_a_journal_alone(tmp_path: Path) -> None:
    from llmload.report.loader import load_run

    path = tmp_path / "run.journal.jsonl"
    journal = RecordJournal(path, print)
    records = [_record(k, f"answer {k}") for k in range(4)]
    for r in [*records, _record(2, "answer 2 again")]:  # a frozen worker's record, sent twice
        journal.add(r)
    run = load_run(path)
    assert [r.request_id for r in run.records] == ["r0", "r1", "r2", "r3"]
    assert run.records[2].text() == "answer 2 again"
    first, last = min(r.start for r in records), max(r.chunk_times[-1] for r in records)
    assert abs(run.duration - (last - first)) < 1e-9
    assert any("without a result JSON" in note for note in run.notes)


def test_the_journal_packs_chunk_times_and_reads_them_back_bit_for_bit(tmp_path: Path) -> None:
    """Issue 37: a 200-token record's chunk times go into the journal packed (~7 characters a time, not ~19 as
    JSON numbers) and its one-token counts as a count; read_records gives back the same record."""
    import numpy as np

    rng = np.random.default_rng(5)
    records = []
    for k in range(20):
        r = _record(k, f"text {k}", tokens=200)
        r.chunk_times = (np.cumsum(rng.exponential(0.01, 200)) + 50_000.0 + k).tolist()
        records.append(r)
    plain = [RequestRecord.from_dict(r.to_dict()) for r in records]
    journal = RecordJournal(tmp_path / "run.journal.jsonl", print)
    held = _kept(records, journal)
    line = (tmp_path / "run.journal.jsonl").read_bytes().splitlines()[0]
    assert b'"chunk_times":{"packed":"' in line and b'"chunk_tokens":{"ones":200}' in line
    plain_line = orjson.dumps(plain[0].to_dict())
    assert len(line) < len(plain_line) / 2, (len(line), len(plain_line))  # JSON numbers: ~20 bytes a time
    back = read_records(tmp_path / "run.journal.jsonl")
    assert [r.to_dict() for r in back] == [r.to_dict() for r in plain] == [r.to_dict() for r in held]
    for r, p in zip(back, plain, strict=True):
        assert np.asarray(r.chunk_times).view(np.uint64).tolist() == np.asarray(p.chunk_times).view(
            np.uint64).tolist()
