"""Today's ``vllm bench serve`` dataset flags on the real datasets: ``--random-range-ratio`` as one ratio or its
JSON pair, ``--disable-shuffle`` keeping the file's order, and the oversampling that fills a short dataset up
to ``--num-prompts`` (``--no-oversample``: not)."""

from __future__ import annotations

import json
from argparse import ArgumentTypeError
from pathlib import Path
from types import SimpleNamespace

import pytest

from llmload.argtypes import range_ratios
from llmload.core.run import oversample, oversamples
from llmload.datasets import sample_random, sample_sharegpt
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
