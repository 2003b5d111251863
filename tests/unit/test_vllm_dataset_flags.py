"""Today's ``vllm bench serve`` dataset flags on the real datasets: ``--random-range-ratio`` as one ratio or its
JSON pair, ``--disable-shuffle`` keeping the file's order, and the oversampling that fills a short dataset up
to ``--num-prompts`` (``--no-oversample``: not)."""

from __future__ import annotations

import json
from argparse import ArgumentTypeError
from pathlib import Path
from types import SimpleNamespace

import pytest

from llmload.core.run import oversample, oversamples
from llmload.datasets import sample_random, sample_sharegpt
from llmload.options.argtypes import range_ratios
from llmload.tokenizer import BUILTIN, load_counting_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return load_counting_tokenizer(BUILTIN)


def test_range_ratio_takes_one_ratio_or_vllm_s_json_pair() -> None:
    assert range_ratios("0.25") == 0.25
    assert range_ratios('{"input": 0.5, "output": 0}') == (0.5, 0.0)
    for bad, says in (('{"input": 0.5}', "'input' and 'output' keys"), ('{"input": 1, "output": 0}',
                      "input_range_ratio must be in [0, 1)"), ("1.5", "[0, 1)"), ("{nope", "not a number")):
        with pytest.raises(ArgumentTypeError, match=says.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
            range_ratios(bad)


def test_separate_ratios_spread_input_and_keep_output(tokenizer) -> None:
    samples = sample_random(tokenizer, 200, 1, input_len=100, output_len=40, range_ratio=(0.5, 0.0))
    inputs = {s.prompt_len for s in samples}
    assert {s.expected_output_len for s in samples} == {40}
    assert min(inputs) < 70 and max(inputs) > 120  # spread over [~50, ~150]


def test_disable_shuffle_keeps_the_file_order(tokenizer, tmp_path: Path) -> None:
    rows = [{"id": f"c{i}", "conversations": [{"from": "human", "value": f"question number {i} " * 3},
                                              {"from": "gpt", "value": f"answer number {i} " * 3}]}
            for i in range(12)]
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(rows))
    kept = [s.prompt for s in sample_sharegpt(path, tokenizer, 12, 0, shuffle=False)]
    assert kept == [r["conversations"][0]["value"] for r in rows]
    shuffled = [s.prompt for s in sample_sharegpt(path, tokenizer, 12, 0)]
    assert sorted(shuffled) == sorted(kept) and shuffled != kept


def test_oversampling_fills_up_by_seed(tokenizer) -> None:
    samples = sample_random(tokenizer, 3, 0, input_len=16, output_len=4)
    filled = oversample(samples, 10, seed=7)
    assert len(filled) == 10 and filled[:3] == samples and all(s in samples for s in filled[3:])
    assert [id(s) for s in oversample(samples, 10, seed=7)] == [id(s) for s in filled]  # the seed decides
    assert oversamples(SimpleNamespace(dataset_name="sharegpt"))
    assert not oversamples(SimpleNamespace(dataset_name="sharegpt", no_oversample=True))
    assert not oversamples(SimpleNamespace(dataset_name="mooncake"))
    assert not oversamples(SimpleNamespace(dataset_name="sharegpt", multi_turn=True))


def test_sonnet_prompts_share_the_prefix_and_fit(tokenizer) -> None:
    from llmload.datasets import load_samples
    from llmload.datasets.sonnet import BASE_PROMPT, default_sonnet_path

    samples = load_samples("sonnet", None, tokenizer, 20, 3, input_len=150, output_len=9, prefix_len=60)
    lines = default_sonnet_path().read_text().splitlines(keepends=True)
    assert len(samples) == 20 and all(s.prompt.startswith(BASE_PROMPT + lines[0]) for s in samples)
    assert all(s.prompt_len <= 150 and s.expected_output_len == 9 for s in samples)
    assert len({s.prompt for s in samples}) > 10  # the lines after the prefix are drawn


def test_burstgpt_takes_gpt4_rows_with_a_response(tokenizer, tmp_path: Path) -> None:
    from llmload.datasets import load_samples

    csv = tmp_path / "burst.csv"
    csv.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                   "1,GPT-4,40,12,52,Conversation log\n2,ChatGPT,30,9,39,Conversation log\n"
                   "3,GPT-4,25,0,25,Conversation log\n4,GPT-4,33,7,40,API log\n")
    samples = load_samples("burstgpt", csv, tokenizer, 6, 0)
    assert len(samples) == 6  # two usable rows, drawn with replacement
    assert {(s.prompt_len, s.expected_output_len) for s in samples} <= {(40, 12), (33, 7)}
    with pytest.raises(Exception, match="not a BurstGPT CSV"):
        (tmp_path / "bad.csv").write_text("a,b\n1,2\n")
        load_samples("burstgpt", tmp_path / "bad.csv", tokenizer, 2, 0)


def test_spec_bench_first_turns_of_a_category(tokenizer, tmp_path: Path) -> None:
    from llmload.datasets import load_samples

    path = tmp_path / "question.jsonl"
    path.write_text("".join(json.dumps({"question_id": i, "category": "math" if i % 2 else "writing",
                                        "turns": [f"first turn {i}", "second"]}) + "\n" for i in range(6)))
    samples = load_samples("spec_bench", path, tokenizer, None, 0, output_len=32, category="math", shuffle=False)
    assert [s.prompt for s in samples] == ["first turn 1", "first turn 3", "first turn 5"]
    assert {s.expected_output_len for s in samples} == {32}


def test_hf_reads_local_copies_by_vllm_s_rules(tokenizer, tmp_path: Path) -> None:
    import pandas as pd

    from llmload.common.errors import DatasetError
    from llmload.datasets import load_samples

    root = tmp_path / "InstructCoder"
    (root / "data").mkdir(parents=True)
    pd.DataFrame({"instruction": ["Add a docstring.", "Rename x."], "input": ["def f(): pass", "x = 1"]}).to_parquet(
        root / "data" / "train-00000.parquet")
    pd.DataFrame({"instruction": ["Test row."], "input": ["y = 2"]}).to_parquet(root / "data" / "test-00000.parquet")
    coder = load_samples("hf", root, tokenizer, None, 0, name="likaixin/InstructCoder", shuffle=False)
    assert [s.prompt for s in coder] == [
        "def f(): pass\n\nAdd a docstring. Just output the code, do not include any explanation.",
        "x = 1\n\nRename x. Just output the code, do not include any explanation."]
    assert {s.expected_output_len for s in coder} == {200}  # vLLM's default for InstructCoder
    test_split = load_samples("hf", root, tokenizer, None, 0, split="test", output_len=9)
    # no --hf-name: the first known prompt column (instruction before input)
    assert [s.prompt for s in test_split] == ["Test row."] and test_split[0].expected_output_len == 9
    generic = tmp_path / "q.jsonl"
    generic.write_text('{"question": "why?"}\n{"question": "how?"}\n')
    assert {s.prompt for s in load_samples("hf", generic, tokenizer, 5, 0)} == {"why?", "how?"}
    for path, says in (("nobody-has/this-dataset", "not in the local Hugging Face cache"),
                       (root, "no file of --hf-split 'validation'")):
        with pytest.raises(DatasetError, match=says):
            load_samples("hf", path, tokenizer, 2, 0, split="validation")
