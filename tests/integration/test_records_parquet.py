"""``--records-format parquet`` (pyarrow, the ``parquet`` extra): the records file a real run writes reads back
through pandas and ``llmload report`` with the same numbers as the same records in JSONL."""

from __future__ import annotations

import csv
import math
import shutil
from pathlib import Path

import pytest
from support import llmload_command, offline_env

from llmload.bench.results import read_records, write_records

pd = pytest.importorskip("pandas")
pytest.importorskip("pyarrow")  # the parquet extra; the test extra includes it

WORKLOAD = ("--sim-args", "--ttft-ms 5 --itl-ms 2 --error-rate 0.2 --seed 3", "--tokenizer", "builtin",
            "--num-prompts", "20", "--request-rate", "40", "--sharegpt-output-len", "8", "--seed", "2",
            "--no-initial-test", "--save-result", "--save-detailed", "--result-filename", "run.json",
            "--disable-tqdm")


def _report(child_runner, result: Path, out: Path) -> dict[str, str]:
    run = child_runner.run([*llmload_command(), "report", str(result), "--output", str(out)], env=offline_env(),
                           timeout=120)
    assert run.returncode == 0, run.describe()
    with (out / "report.csv").open() as f:
        return {row["key"]: row["run"] for row in csv.DictReader(f)}


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


@pytest.mark.slow
def test_parquet_records_read_back_like_jsonl(child_runner, tmp_path: Path) -> None:
    run = child_runner.bench(*WORKLOAD, "--records-format", "parquet", "--result-dir", str(tmp_path / "parquet"))
    assert run.returncode == 0, run.describe()
    result = run.result()
    parquet = tmp_path / "parquet" / "run.records.parquet"
    assert parquet.is_file() and not (tmp_path / "parquet" / "run.records.jsonl").exists()

    records = read_records(parquet)
    assert len(records) == result["completed"] + result["failed"] + result["cut_off"] == 20
    assert 0 < result["failed"] < 20  # failed requests (None in the optional columns) are in the table too
    # the same records as JSONL, beside a copy of the same result
    jsonl_dir = tmp_path / "jsonl"
    jsonl_dir.mkdir()
    shutil.copy(tmp_path / "parquet" / "run.json", jsonl_dir / "run.json")
    write_records(jsonl_dir / "run.records.jsonl", records, "jsonl")
    assert [r.to_dict() for r in read_records(jsonl_dir / "run.records.jsonl")] == [r.to_dict() for r in records]

    # pandas: one row per request, every column as the JSONL has it
    table, lines = pd.read_parquet(parquet), pd.read_json(jsonl_dir / "run.records.jsonl", lines=True)
    assert len(table) == len(lines) == 20 and set(table.columns) == set(lines.columns)
    for column in ("request_id", "success", "failure_kind", "start", "first_token", "output_tokens", "prompt_len"):
        assert all(_same(a, b) for a, b in zip(table[column].tolist(), lines[column].tolist(), strict=True)), column
    assert [list(c) for c in table["chunk_times"]] == [list(c) for c in lines["chunk_times"]]

    # llmload report: the same numbers from either file, and the run's own
    from_parquet = _report(child_runner, tmp_path / "parquet" / "run.json", tmp_path / "report-parquet")
    from_jsonl = _report(child_runner, jsonl_dir / "run.json", tmp_path / "report-jsonl")
    assert from_parquet == from_jsonl
    assert float(from_parquet["completed"]) == result["completed"]
