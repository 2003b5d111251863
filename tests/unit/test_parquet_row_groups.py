"""``--records-format parquet`` for a long run: written a row group at a time (issue 37), read back like JSONL.

The row-group size is lowered so that a thousand records make ten groups, with columns that are null in some
groups and numbers in others (a group of failed requests, cached tokens only in later groups)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from llmload.client.records import RequestRecord
from llmload.client.records import file as records_file
from llmload.client.records.file import read_records, write_records

pytest.importorskip("pyarrow")


def _record(k: int) -> RequestRecord:
    ok = not 300 <= k < 400  # a whole group of failures: empty chunk lists, no first token
    times = [10.0 + k + 0.01 * j for j in range(1 + k % 5)] if ok else []
    return RequestRecord(request_id=f"r{k}", backend="vllm", prompt_len=5 + k % 7, expected_output_len=5,
                         intended_send=9.0 + k, start=9.5 + k, first_token=times[0] if times else None,
                         chunk_times=times, chunk_tokens=[1] * len(times), output_tokens=len(times), success=ok,
                         error="" if ok else "HTTP 500", failure_kind="" if ok else "http_5xx",
                         status_code=200 if ok else 500, generated_text=f"t{k}" if ok else "",
                         cached_tokens=k % 3 if k >= 600 else None, server_prompt_tokens=7 if k >= 500 else None)


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def test_row_groups_read_back_as_one_dataframe_and_jsonl_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    records = [_record(k) for k in range(1000)]
    write_records(tmp_path / "one.parquet", records, "parquet")  # one group: one DataFrame, as before
    monkeypatch.setattr(records_file, "PARQUET_ROWS", 100)
    write_records(tmp_path / "groups.parquet", records, "parquet")
    write_records(tmp_path / "plain.jsonl", records)
    import pyarrow.parquet as pq

    assert pq.ParquetFile(tmp_path / "groups.parquet").num_row_groups == 10
    grouped = [r.to_dict() for r in read_records(tmp_path / "groups.parquet")]
    whole = [r.to_dict() for r in read_records(tmp_path / "one.parquet")]
    plain = [r.to_dict() for r in read_records(tmp_path / "plain.jsonl")]
    assert len(grouped) == len(whole) == len(plain) == 1000
    for g, w, p in zip(grouped, whole, plain, strict=True):
        assert g.keys() == w.keys()
        assert all(_same(g[k], w[k]) for k in g), [k for k in g if not _same(g[k], w[k])]
        assert all(_same(g[k], p[k]) for k in g), [k for k in g if not _same(g[k], p[k])]


def test_a_report_reads_a_parquet_file_a_row_group_at_a_time_as_it_reads_jsonl(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``llmload report``'s reader (report/records.RecordsFile) gives the same records from Parquet row groups,
    in order or picked out, as from the JSONL file."""
    import numpy as np

    from llmload.report.records import RecordsFile, RecordsView

    records = [_record(k) for k in range(1000)]
    monkeypatch.setattr(records_file, "PARQUET_ROWS", 100)
    write_records(tmp_path / "groups.parquet", records, "parquet")
    write_records(tmp_path / "plain.jsonl", records)
    parquet, jsonl = RecordsFile(tmp_path / "groups.parquet"), RecordsFile(tmp_path / "plain.jsonl")
    assert len(parquet) == len(jsonl) == 1000
    picked = np.asarray([0, 99, 100, 101, 350, 999])
    for got in (list(parquet), list(RecordsView(parquet, picked)), [parquet[int(i)] for i in picked]):
        want = [r.to_dict() for r in (jsonl if len(got) == 1000 else RecordsView(jsonl, picked))]
        assert len(got) == len(want)
        for g, w in zip((r.to_dict() for r in got), want, strict=True):
            assert all(_same(g[k], w[k]) for k in g), [k for k in g if not _same(g[k], w[k])]
