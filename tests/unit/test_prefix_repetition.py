"""``prefix_repetition``: vLLM's PrefixRepetitionRandomDataset (num_prefixes shared prefixes, random suffixes)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from llmload.common.errors import ConfigError, DatasetError
from llmload.datasets import DATASET_NAMES, load_samples, sample_prefix_repetition
from llmload.tokenizer import load_counting_tokenizer


@pytest.fixture(scope="module")
def tok():
    return load_counting_tokenizer("builtin")


def count(tok, s: str) -> int:
    return len(tok.encode(s, add_special_tokens=False))


def common_prefix(texts: list[str]) -> str:
    """The longest string every text starts with."""
    first, last = min(texts), max(texts)
    n = 0
    while n < min(len(first), len(last)) and first[n] == last[n]:
        n += 1
    return first[:n]


def groups(samples) -> Counter:
    """Prompts by their first 40 characters: a prefix of 32+ random tokens is far longer than that."""
    return Counter(s.prompt[:40] for s in samples)


@pytest.mark.parametrize(("num_prompts", "num_prefixes", "made"), [(20, 4, 20), (23, 4, 20), (7, 7, 7), (5, 1, 5)])
def test_counts_are_whole_groups(tok, num_prompts, num_prefixes, made):
    got = sample_prefix_repetition(tok, num_prompts, 0, prefix_len=32, suffix_len=16, num_prefixes=num_prefixes)
    assert len(got) == made  # vLLM: num_prefixes * (num_prompts // num_prefixes)
    assert sorted(groups(got).values()) == [made // num_prefixes] * num_prefixes


def test_each_prefix_is_shared_by_its_group_only(tok):
    got = sample_prefix_repetition(tok, 30, 1, prefix_len=64, suffix_len=32, num_prefixes=5)
    by_group: dict[str, list[str]] = {}
    for s in got:
        by_group.setdefault(s.prompt[:40], []).append(s.prompt)
    assert len(by_group) == 5 and all(len(p) == 6 for p in by_group.values())
    heads = []
    for prompts in by_group.values():
        common = common_prefix(prompts)
        assert count(tok, common) >= 64 - 3  # the whole prefix is common
        assert len(set(prompts)) == len(prompts)  # the suffixes differ
        heads.append(common)
    for i, a in enumerate(heads):
        for b in heads[i + 1:]:
            assert count(tok, common_prefix([a, b])) < 5


def test_lengths_and_output_len(tok):
    got = sample_prefix_repetition(tok, 40, 2, prefix_len=100, suffix_len=50, num_prefixes=4, output_len=77)
    assert all(s.expected_output_len == 77 for s in got)
    assert all(abs(s.prompt_len - 150) <= 2 for s in got)
    assert sum(s.prompt_len == 150 for s in got) >= 36
    assert all(abs(count(tok, s.prompt) - s.prompt_len) <= 4 for s in got)


def test_defaults_are_vllms(tok):
    got = sample_prefix_repetition(tok, 10)
    assert len(got) == 10 and len(groups(got)) == 10
    assert {s.expected_output_len for s in got} == {128}
    assert all(abs(s.prompt_len - 512) <= 2 for s in got)


def test_shuffled_and_deterministic(tok):
    kw = {"prefix_len": 16, "suffix_len": 8, "num_prefixes": 4}
    got = sample_prefix_repetition(tok, 40, 3, **kw)
    ids = [s.request_id for s in got]
    assert sorted(ids) == sorted(f"prefix-{p}-{j}" for p in range(4) for j in range(10))
    assert ids != sorted(ids, key=lambda r: tuple(int(x) for x in r.split("-")[1:]))  # not in build order
    assert sample_prefix_repetition(tok, 40, 3, **kw) == got
    other = sample_prefix_repetition(tok, 40, 4, **kw)
    assert {s.prompt for s in other} != {s.prompt for s in got}


def test_does_not_touch_global_random(tok):
    random.seed(9)
    before = random.random()
    random.seed(9)
    sample_prefix_repetition(tok, 10, 0, prefix_len=8, suffix_len=8, num_prefixes=2)
    assert random.random() == before


@pytest.mark.parametrize(
    ("num_prompts", "kw", "match"),
    [
        (5, {"num_prefixes": 10}, r"--num-prompts \(5\) must be at least --prefix-repetition-num-prefixes \(10\)"),
        (5, {"num_prefixes": 0}, "num-prefixes"),
        (5, {"num_prefixes": 1, "output_len": 0}, "output-len"),
        (5, {"num_prefixes": 1, "prefix_len": 0, "suffix_len": 0}, "not both 0"),
        (5, {"num_prefixes": 1, "prefix_len": -1}, "prefix-len"),
    ],
)
def test_errors_are_one_line(tok, num_prompts, kw, match):
    with pytest.raises(DatasetError, match=match) as err:
        sample_prefix_repetition(tok, num_prompts, 0, **kw)
    assert "\n" not in str(err.value)


def test_load_samples(tok):
    assert "prefix_repetition" in DATASET_NAMES
    got = load_samples("prefix_repetition", None, tok, 12, 0, prefix_len=16, suffix_len=8, num_prefixes=3,
                       output_len=None)
    assert len(got) == 12 and len(groups(got)) == 3 and {s.expected_output_len for s in got} == {128}
    assert got == sample_prefix_repetition(tok, 12, 0, prefix_len=16, suffix_len=8, num_prefixes=3)
    with pytest.raises(ConfigError, match="input_len"):
        load_samples("prefix_repetition", None, tok, 12, 0, input_len=5)
