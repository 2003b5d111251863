"""Mooncake traces: the format read as published (and with vLLM's timed_trace labels), prompts whose equal
``hash_ids`` are identical token blocks and whose lengths are the trace's, the trace's own reuse, and one-line
errors for a bad file. The shipped tokenizer (``builtin``) measures every prompt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmload.common.errors import DatasetError
from llmload.datasets import load_samples
from llmload.datasets.traces import detect_format, read_trace, sample_trace
from llmload.datasets.traces.blocks import BlockPrompts, default_mooncake_path, prefix_reuse
from llmload.datasets.traces.formats import MooncakeKeys, TraceRow
from llmload.datasets.traces.prompts import PromptBuilder
from llmload.tokenizer import load_counting_tokenizer

BLOCK = 512


@pytest.fixture(scope="module")
def tokenizer():
    return load_counting_tokenizer("builtin")


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_shipped_sample_is_detected_and_its_milliseconds_read_as_seconds() -> None:
    path = default_mooncake_path()
    assert detect_format(path) == "mooncake"
    rows = read_trace(path)
    raw = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == len(raw) >= 100
    assert [r.t for r in rows] == pytest.approx(sorted(x["timestamp"] / 1000.0 for x in raw))
    assert all(r.hash_ids and r.hash_ids[0] == 0 for r in rows)  # the shared system-prompt block


def test_equal_ids_are_identical_blocks_and_lengths_are_exact(tokenizer) -> None:
    rows = [TraceRow(0.0, 3 * BLOCK + 100, 10, 1, hash_ids=(7, 8, 9, 10)),
            TraceRow(1.0, 2 * BLOCK + 300, 10, 2, hash_ids=(7, 8, 11)),
            TraceRow(2.0, 3 * BLOCK + 100, 10, 3, hash_ids=(7, 8, 9, 10)),
            TraceRow(3.0, 2 * BLOCK, 10, 4, hash_ids=(12, 13))]
    built = BlockPrompts(PromptBuilder(tokenizer, seed=3)).build(rows)
    assert [n for _, n in built] == [r.input_tokens for r in rows]
    ids = [tokenizer(text, add_special_tokens=False).input_ids for text, _ in built]

    def shared(a: list[int], b: list[int]) -> int:
        k = 0
        while k < min(len(a), len(b)) and a[k] == b[k]:
            k += 1
        return k

    # rows 1 and 3 share three full blocks, then each has its own tail; rows 1 and 2 share two; row 4 none
    assert 3 * BLOCK - 2 <= shared(ids[0], ids[2]) < 3 * BLOCK + 100
    assert 2 * BLOCK - 2 <= shared(ids[0], ids[1]) < 2 * BLOCK + 16
    assert shared(ids[0], ids[3]) < 16
    # the same seed gives the same blocks in another run (every worker builds the same prompts)
    again = BlockPrompts(PromptBuilder(tokenizer, seed=3)).build(rows)
    assert again == built
    other = BlockPrompts(PromptBuilder(tokenizer, seed=4)).build(rows)
    assert other[0][0][:2000] != built[0][0][:2000]


def test_the_traces_own_reuse_counts_leading_blocks_seen_before() -> None:
    rows = [TraceRow(0, 3 * BLOCK + 1, 1, 1, hash_ids=(1, 2, 3, 4)),
            TraceRow(0, 5 * BLOCK + 1, 1, 2, hash_ids=(1, 2, 3, 4, 5, 6)),  # 4 blocks of row 1 (its 4th was full)
            TraceRow(0, 2 * BLOCK + 1, 1, 3, hash_ids=(1, 9, 3)),  # block 3 matches, but not its prefix
            TraceRow(0, 2 * BLOCK, 1, 4, hash_ids=(1, 2))]  # both full, both seen
    assert prefix_reuse(rows) == [0, 3 * BLOCK, 1 * BLOCK, 2 * BLOCK]


def test_vllm_timed_trace_labels_and_units(tmp_path: Path, tokenizer) -> None:
    path = _write(tmp_path / "t.jsonl", [{"ts": 0.0, "in": 600, "out": 5, "blocks": [1, 2]},
                                          {"ts": 2.5, "in": 700, "out": 6, "blocks": [1, 3]}])
    keys = MooncakeKeys(timestamp="ts", input_length="in", output_length="out", hash_ids="blocks",
                        seconds_per_unit=1.0)
    samples = load_samples("timed_trace", path, tokenizer, None, 0, mooncake=keys, block_size=256, time_scale=2.0)
    assert [s.arrival_s for s in samples] == [0.0, 1.25]
    assert [s.prompt_len for s in samples] == [600, 700]
    assert [s.expected_output_len for s in samples] == [5, 6]
    assert [s.trace_cached_tokens for s in samples] == [0, 256]


def test_a_window_of_the_trace_starts_its_clock_at_its_first_request(tokenizer) -> None:
    path = default_mooncake_path()
    rows = read_trace(path)
    samples = sample_trace(path, tokenizer, num_prompts=5, trace_start=10.0, time_scale=4.0)
    window = [r for r in rows if r.t >= rows[0].t + 10.0][:5]
    assert [s.arrival_s for s in samples] == pytest.approx([(r.t - window[0].t) / 4.0 for r in window])
    assert [s.prompt_len for s in samples] == [r.input_tokens for r in window]


@pytest.mark.parametrize(("row", "message"), [
    ({"timestamp": -1, "input_length": 5, "output_length": 1, "hash_ids": []}, "'timestamp' must be a non-negative"),
    ({"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": "abc"}, "'hash_ids' must be a list"),
    ({"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1, "x"]}, "'hash_ids' must be a list"),
    ({"timestamp": 0, "input_length": -5, "output_length": 1, "hash_ids": [1]}, "'input_length' must be"),
    ({"timestamp": 0, "output_length": 1, "hash_ids": [1]}, "'input_length' must be"),
])
def test_a_bad_row_is_one_line_naming_file_and_line(tmp_path: Path, row: dict, message: str) -> None:
    good = {"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]}
    path = _write(tmp_path / "bad.jsonl", [good, row])
    with pytest.raises(DatasetError) as err:
        read_trace(path, "mooncake")
    assert str(err.value).startswith(f"{path}:2: ") and message in str(err.value), err.value
    assert "\n" not in str(err.value)
