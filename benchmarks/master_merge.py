"""How fast a master takes in its workers' records, and how much memory each kept record costs.

Builds record batches exactly as a worker ships them (``BatchShipper`` → one ``llm_records`` message of
``RequestRecord.to_dict()`` rows, ``--chunks`` chunks each), then times the master's part of each batch in this
process: decoding the message (``core.messages.read_records_message``, the clock shift included), compacting each
record, keeping it and writing it to the records journal, which then holds its text (what
``BenchMaster._on_records`` does per record; ``--no-journal``: the master before the journal). Reports records/s the master can take on
one core, CPU µs per record, and the bytes each kept record holds (``tracemalloc``), split by what holds them.
The messages' transport (msgpack over ZeroMQ, done by Locust) is not included.

    python benchmarks/master_merge.py --records 20000 --chunks 200

Not a test: timing depends on the machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from llmload.client.records import RequestRecord
from llmload.client.records.journal import RecordJournal
from llmload.core.messages import clock_offset, read_records_message, records_message

#: where this machine's perf_counter is now: how many bytes a packed chunk time takes depends on it
CLOCK_BASE = time.perf_counter()


def record(i: int, chunks: int) -> RequestRecord:
    """A successful streamed request of ``chunks`` one-token chunks, 10 ms apart, with its text."""
    t0 = CLOCK_BASE + i * 0.01
    return RequestRecord(
        request_id=str(i), backend="vllm", prompt_len=64, expected_output_len=chunks, intended_send=t0,
        dispatched_at=t0, start=t0 + 0.0001, first_token=t0 + 0.05,
        chunk_times=[t0 + 0.05 + 0.01 * k for k in range(chunks)], chunk_tokens=[1] * chunks,
        output_tokens=chunks, output_tokens_source="usage", server_prompt_tokens=64,
        generated_text=" word" * chunks, success=True, status_code=200, worker="worker0")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--chunks", type=int, default=200, help="chunks (tokens) per request")
    parser.add_argument("--batch", type=int, default=50, help="records per llm_records message (0.25 s of them)")
    parser.add_argument("--no-journal", dest="journal", action="store_false",
                        help="keep every text in memory (no records journal), as the master did before it")
    args = parser.parse_args()

    def new_journal() -> RecordJournal | None:
        return RecordJournal(None, print) if args.journal else None

    batches = []
    for start in range(0, args.records, args.batch):
        rows = [record(i, args.chunks).to_dict() for i in range(start, min(args.records, start + args.batch))]
        batches.append(records_message(rows, list(range(start, start + len(rows))))[1])
    mine = clock_offset()

    kept: dict[tuple[int, int], RequestRecord] = {}
    journal = new_journal()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for data in batches:
        for r in read_records_message(data, mine).records:
            r.compact()
            kept[(int(r.request_id), r.turn)] = r
            if journal is not None:
                journal.add(r)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    n = len(kept)
    print(f"{'with' if args.journal else 'without'} the records journal")
    print(f"{n:,} records of {args.chunks} chunks in batches of {args.batch}: {n / cpu:,.0f} records/s on one core "
          f"({cpu / n * 1e6:.1f} µs CPU per record, {wall:.2f} s wall)")

    kept.clear()
    journal = new_journal()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for data in batches:
        fresh = json.loads(json.dumps(data))  # as off the wire: every string the record keeps is its own
        for r in read_records_message(fresh, mine).records:
            r.compact()
            kept[(int(r.request_id), r.turn)] = r
            if journal is not None:
                journal.add(r)
        del fresh
    after = tracemalloc.take_snapshot()
    diff = after.compare_to(before, "lineno")
    total = sum(s.size_diff for s in diff)
    print(f"memory kept: {total / n:,.0f} bytes per record ({total / 2**20:,.1f} MiB for {n:,}); "
          f"1,000,000 records would need ~{total / n * 1e6 / 2**30:.1f} GiB")
    for stat in diff[:5]:
        frame = stat.traceback[0]
        print(f"  {stat.size_diff / n:8,.0f} B/record  {Path(frame.filename).name}:{frame.lineno}")


if __name__ == "__main__":
    main()
