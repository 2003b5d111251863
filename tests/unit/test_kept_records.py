"""KeptRecords: a run's records on disk, a few numbers each in memory, read back in send order, exactly."""

from __future__ import annotations

from pathlib import Path

from llmload.client.records import RequestRecord
from llmload.client.records.journal import RecordJournal
from llmload.client.records.kept import KeptRecords


def _record(k: int, intended: float | None, text: str = "", turn: int = 0) -> RequestRecord:
    times = [100.0 + k + 0.01 * j for j in range(40)]
    r = RequestRecord(request_id=f"r{k}", backend="vllm", prompt_len=12, expected_output_len=40,
                      intended_send=intended, dispatched_at=None if intended is None else intended + 0.001 * k,
                      start=99.5 + k, first_token=times[0], chunk_times=times, chunk_tokens=[1] * 40,
                      output_tokens=40, generated_text=text or f"text {k} é", success=True, turn=turn)
    r.compact()
    return r


def test_records_come_back_in_send_order_the_last_duplicate_counting(tmp_path: Path) -> None:
    kept = KeptRecords(RecordJournal(tmp_path / "j.jsonl", print))
    # arrival order differs from send order; record 3 arrives twice (a frozen worker's resend): the last counts
    arrivals = [(3, 13.0, "first"), (0, 10.0, ""), (2, 12.0, ""), (1, 11.0, ""), (3, 13.0, "second")]
    expected = {}
    for k, intended, text in arrivals:
        r = _record(k, intended, text)
        expected[k] = r.to_dict()
        kept.add(r, k, counts_lag=k != 2)  # request 2 was re-assigned: its lag is not the client's
    assert kept.received == 5 and len(kept) == 4 and kept.duplicates == 1
    assert kept.last_end == max(r["chunk_times"][-1] for r in expected.values())
    records = kept.in_send_order()
    assert len(records) == 4
    assert [r.to_dict() for r in records] == [expected[k] for k in range(4)]
    assert records[3].text() == "second" and records[1].request_id == "r1"
    assert [r.request_id for r in records[1:3]] == ["r1", "r2"]
    lags = kept.lags(kept.distinct())
    want = sorted(expected[k]["dispatched_at"] - expected[k]["intended_send"] for k in (0, 1, 3))
    assert len(lags) == 3 and sorted(v for c in lags.chunks() for v in c.tolist()) == want


def test_turns_sort_within_their_conversation_and_a_fix_amends_each_read(tmp_path: Path) -> None:
    kept = KeptRecords(RecordJournal(None, print))
    for turn in (2, 1, 3):
        kept.add(_record(turn, None, turn=turn), 7, counts_lag=True)
    kept.add(_record(0, None), -1)  # a record no schedule entry names sorts first

    def mark(record: RequestRecord) -> None:
        record.output_tokens = -record.turn

    records = kept.in_send_order(fix=mark)
    assert [r.turn for r in records] == [0, 1, 2, 3]
    assert [r.output_tokens for r in records] == [0, -1, -2, -3]
    assert [r.output_tokens for r in records.with_fix(None)] == [40] * 4


def test_without_an_index_records_count_in_arrival_order_sorted_by_intended_send() -> None:
    kept = KeptRecords(None)
    made = [_record(k, 10.0 + k) for k in range(5)]
    for r in reversed(made):
        kept.add(r)
    records = kept.in_send_order()
    assert [r.request_id for r in records] == [f"r{k}" for k in range(5)]
    assert records[0] is made[0]  # held, not decoded: there is no journal
    assert [r.request_id for r in kept.in_arrival_order(1, 3)] == ["r3", "r2"]


def test_a_journal_that_stops_mid_run_keeps_the_rest_in_memory(tmp_path: Path) -> None:
    journal = RecordJournal(tmp_path / "j.jsonl", print)
    kept = KeptRecords(journal)
    for k in range(3):
        kept.add(_record(k, 10.0 + k), k)
    journal.failed = "No space left on device"  # what a failed write leaves (tested for real in test_record_journal)
    for k in range(3, 6):
        kept.add(_record(k, 10.0 + k), k)
    assert kept.in_memory == 3
    records = kept.in_send_order()
    assert [r.request_id for r in records] == [f"r{k}" for k in range(6)]
    assert [r.text() for r in records] == [f"text {k} é" for k in range(6)]
    assert [kept.line(k)[1] > 0 for k in range(6)] == [True] * 3 + [False] * 3
