"""The record path: the in-process list, a worker's batches and the one message schema the master reads."""

from __future__ import annotations

from llmload.client.records import RequestRecord
from llmload.core.messages import RECORDS, clock_offset, job_items, job_requests, read_records_message
from llmload.core.schedule import Schedule, ScheduleSpec
from llmload.core.sink import BatchShipper, RecordList
from llmload.datasets.base import SampleRequest


def record(rid: str, t: float = 10.0) -> RequestRecord:
    return RequestRecord(request_id=rid, start=t, first_token=t + 0.1, chunk_times=[t + 0.1, t + 0.2],
                         chunk_tokens=[1, 1], output_tokens=2, intended_send=t - 0.01, dispatched_at=t - 0.005,
                         success=True)


def test_record_list_keeps_records_and_tells_listeners() -> None:
    sink, seen = RecordList(), []
    sink.listeners.append(seen.append)
    sink.add(record("a"))
    sink.add(record("b"))
    assert [r.request_id for r in sink.records] == ["a", "b"] == [r.request_id for r in seen]
    alias = sink  # live views hold the list itself: it reads its records back from the journal
    sink.clear()
    assert len(alias) == 0 and list(alias) == []
    sink.add(record("c"))
    assert [r.request_id for r in alias[0:]] == ["c"] and alias[-1].request_id == "c"


def test_batches_carry_records_and_dispatched_indices_once() -> None:
    sent: list[tuple[str, dict]] = []
    shipper = BatchShipper(lambda name, data: sent.append((name, data)))
    shipper.flush()
    assert sent == []  # nothing to say
    shipper.dispatched(3)
    shipper.add(record("r3"))
    shipper.dispatched(5)
    assert shipper.pending == 1
    shipper.flush()
    shipper.add(record("r5"))
    shipper.flush()
    assert [name for name, _ in sent] == [RECORDS, RECORDS]
    assert sent[0][1]["dispatched"] == [3, 5] and sent[1][1]["dispatched"] == []
    assert [r["request_id"] for _, data in sent for r in data["records"]] == ["r3", "r5"]
    assert shipper.shipped == 2 and shipper.pending == 0


def test_master_reads_a_batch_onto_its_own_clock() -> None:
    sent: list[tuple[str, dict]] = []
    shipper = BatchShipper(lambda name, data: sent.append((name, data)))
    original = record("x", t=100.0)
    shipper.add(original)
    shipper.flush()
    data = dict(sent[0][1])
    data["clock"] = clock_offset() + 2.5  # a worker whose perf_counter is 2.5 s behind this process's
    batch = read_records_message(data, clock_offset())
    got = batch.records[0]
    assert got.request_id == "x" and got.success
    assert abs(got.start - (original.start + 2.5)) < 1e-3
    assert all(abs(a - (b + 2.5)) < 1e-3 for a, b in zip(got.chunk_times, original.chunk_times, strict=True))
    assert abs((got.first_token - got.start) - (original.first_token - original.start)) < 1e-9


def test_job_items_carry_everything_a_worker_sends() -> None:
    samples = [SampleRequest(prompt=f"p{i}", prompt_len=i + 3, expected_output_len=7, request_id=f"id{i}")
               for i in range(5)]
    schedule = Schedule.build(ScheduleSpec(request_rate=10, seed=2), samples, [("Chat", 1.0), ("Long", 1.0)])
    back = job_requests(job_items(schedule, [1, 3, 4]))
    for got, want in zip(back, [schedule[1], schedule[3], schedule[4]], strict=True):
        assert (got.index, got.offset, got.request_id, got.user_class) == \
            (want.index, want.offset, want.request_id, want.user_class)
        assert (got.sample.prompt, got.sample.prompt_len, got.sample.expected_output_len) == \
            (want.sample.prompt, want.sample.prompt_len, want.sample.expected_output_len)
