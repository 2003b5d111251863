"""Workloads are sampled like vLLM (ShareGPT shuffle-then-filter, RandomDataset) and bad files fail in one line."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import numpy as np
import pytest

from llmload.common.errors import ConfigError, DatasetError
from llmload.datasets import (
    SampleRequest,
    default_sharegpt_path,
    load_conversations,
    load_samples,
    sample_custom,
    sample_random,
    sample_sharegpt,
)
from llmload.tokenizer import load_counting_tokenizer


@pytest.fixture(scope="module")
def tok():
    return load_counting_tokenizer("builtin")


def words(n: int) -> str:
    """``n`` words that the builtin tokenizer counts as exactly ``n`` tokens (plus <s>)."""
    return " ".join(["the"] * n)


def conv(cid: str, *texts: str) -> dict:
    return {
        "id": cid,
        "conversations": [
            {"from": "human" if i % 2 == 0 else "gpt", "value": t} for i, t in enumerate(texts)
        ],
    }


def write(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data))
    return path


def test_words_helper_counts_tokens(tok):
    for n in (2, 3, 1023, 1024, 1500):
        assert len(tok(words(n)).input_ids) == n + 1


# Conversations labelled by construction: "ok" ones pass every filter, each other kind breaks one rule.
KINDS = {
    "ok": lambda i: (f"question {i} " + words(20), words(30)),
    "tiny_prompt": lambda i: ("hi", words(30)),  # prompt 2 tokens < 4
    "tiny_output": lambda i: (f"question {i} " + words(20), "ok"),  # output 2 tokens < 4
    "long_prompt": lambda i: (f"q{i} " + words(1100), words(10)),  # prompt > 1024
    "long_total": lambda i: (f"q{i} " + words(900), words(1200)),  # prompt + output > 2048
}


@pytest.fixture
def labelled(tmp_path):
    rng = random.Random(7)
    data, labels = [], {}
    for i in range(120):
        kind = rng.choice(list(KINDS))
        prompt, answer = KINDS[kind](i)
        data.append(conv(f"c{i}", prompt, answer, "follow-up " + words(5), words(6)))
        labels[f"c{i}"] = kind
    data.insert(5, conv("single", "only one turn " + words(10)))  # < 2 turns: never a candidate
    data.insert(50, {"id": "empty", "conversations": []})
    return write(tmp_path / "sg.json", data), data, labels


def shuffled_pairs(data: list[dict], seed: int) -> list[str]:
    ids = [c["id"] for c in data if len(c["conversations"]) >= 2]
    random.Random(seed).shuffle(ids)
    return ids


@pytest.mark.parametrize("seed", [0, 1, 42])
def test_sharegpt_order_is_the_seeded_shuffle_then_filter(labelled, tok, seed):
    path, data, labels = labelled
    got = sample_sharegpt(path, tok, 15, seed)
    expected = [cid for cid in shuffled_pairs(data, seed) if labels[cid] == "ok"][:15]
    assert [s.request_id for s in got] == expected


def test_sharegpt_filters_and_lengths(labelled, tok):
    path, data, labels = labelled
    got = sample_sharegpt(path, tok, 1000, 3)
    n_ok = sum(1 for k in labels.values() if k == "ok")
    assert len(got) == n_ok  # fewer than asked: all that pass, no error
    by_id = {c["id"]: c for c in data}
    for s in got:
        assert isinstance(s, SampleRequest)
        assert labels[s.request_id] == "ok"
        assert s.prompt == by_id[s.request_id]["conversations"][0]["value"]
        assert s.prompt_len == len(tok(s.prompt).input_ids)
        assert s.expected_output_len == len(tok(by_id[s.request_id]["conversations"][1]["value"]).input_ids)
        assert 4 <= s.prompt_len <= 1024 and s.prompt_len + s.expected_output_len <= 2048
        assert s.conversation == by_id[s.request_id]["conversations"] and len(s.conversation) == 4


def test_sharegpt_fixed_output_len_keeps_short_completions(labelled, tok):
    path, _, labels = labelled
    got = sample_sharegpt(path, tok, 1000, 0, fixed_output_len=8)
    assert {labels[s.request_id] for s in got} == {"ok", "tiny_output", "long_total"}
    assert all(s.expected_output_len == 8 for s in got)
    with pytest.raises(DatasetError, match="--sharegpt-output-len"):
        sample_sharegpt(path, tok, 10, 0, fixed_output_len=3)


def test_sharegpt_boundaries(tmp_path, tok):
    # prompt_len counts <s>: words(n) has n + 1 tokens.
    data = [
        conv("p4", words(3), words(10)),  # prompt 4: kept
        conv("p3", words(2), words(10)),  # prompt 3: dropped
        conv("o4", words(10), words(3)),  # output 4: kept
        conv("o3", words(10), words(2)),  # output 3: dropped
        conv("p1024", words(1023), words(10)),  # prompt 1024: kept
        conv("p1025", words(1024), words(10)),  # prompt 1025: dropped
        conv("t2048", words(999), words(1047)),  # 1000 + 1048 = 2048: kept
        conv("t2049", words(999), words(1048)),  # 2049: dropped
    ]
    got = sample_sharegpt(write(tmp_path / "b.json", data), tok, 100, 0)
    assert sorted(s.request_id for s in got) == ["o4", "p1024", "p4", "t2048"]


def test_sharegpt_deterministic_per_seed_and_seeds_differ(labelled, tok):
    path, _, _ = labelled
    a = [s.request_id for s in sample_sharegpt(path, tok, 10, 5)]
    b = [s.request_id for s in sample_sharegpt(path, tok, 10, 5)]
    c = [s.request_id for s in sample_sharegpt(path, tok, 10, 6)]
    assert a == b and a != c


def test_sharegpt_does_not_touch_global_random(labelled, tok):
    random.seed(123)
    before = random.random()
    random.seed(123)
    sample_sharegpt(labelled[0], tok, 5, 0)
    assert random.random() == before


def test_sharegpt_gzip_is_transparent(labelled, tok, tmp_path):
    path, data, _ = labelled
    gz = tmp_path / "sg.json.gz"
    gz.write_bytes(gzip.compress(json.dumps(data).encode()))
    assert sample_sharegpt(gz, tok, 20, 9) == sample_sharegpt(path, tok, 20, 9)


@pytest.mark.slow
def test_shipped_sample_resembles_sharegpt_after_filtering(tok):
    path = default_sharegpt_path()
    assert path.parent.parts[-2:] == ("llmload", "data") and path.stat().st_size < 8_000_000
    turns = [len(c["conversations"]) for c in load_conversations(path)]
    assert 2500 <= len(turns) <= 4000
    assert turns.count(1) > 0 and max(turns) >= 16
    assert turns.count(2) / len(turns) > 0.35  # mostly single exchanges
    got = load_samples("sharegpt", None, tok, 1000, 0)
    assert len(got) == 1000
    prompt = np.mean([s.prompt_len for s in got])
    output = np.mean([s.expected_output_len for s in got])
    assert 180 <= prompt <= 260, prompt
    assert 160 <= output <= 240, output
    assert len({s.request_id for s in got}) == 1000


# --- random ----------------------------------------------------------------------------------


def test_random_fixed_lengths_by_default_ratio(tok):
    got = sample_random(tok, 20, 0, input_len=64, output_len=16)
    # vLLM leaves room for the special tokens the tokenizer adds (<s>): 64 - 1.
    assert [s.prompt_len for s in got] == [63] * 20
    assert [s.expected_output_len for s in got] == [16] * 20
    assert len({s.prompt for s in got}) == 20


def test_random_ranges_prefix_and_seed(tok):
    kw = {"input_len": 200, "output_len": 50, "range_ratio": 0.5, "prefix_len": 10}
    got = sample_random(tok, 200, 3, **kw)
    lens = [s.prompt_len - 10 for s in got]
    outs = [s.expected_output_len for s in got]
    assert min(lens) >= int(199 * 0.5) and max(lens) <= int(199 * 1.5)
    assert min(outs) >= 25 and max(outs) <= 75
    assert len(set(lens)) > 50  # actually spread over the range
    for s in got[:20]:
        n = len(tok.encode(s.prompt, add_special_tokens=False))
        assert abs(n - s.prompt_len) <= max(3, s.prompt_len // 20)
    assert sample_random(tok, 200, 3, **kw) == got
    assert sample_random(tok, 200, np.random.RandomState(3), **kw) == got
    assert sample_random(tok, 200, 4, **kw) != got
    with pytest.raises(DatasetError, match="range-ratio"):
        sample_random(tok, 1, 0, range_ratio=1.0)


# --- custom ----------------------------------------------------------------------------------


def test_custom_jsonl(tmp_path, tok):
    path = tmp_path / "c.jsonl"
    path.write_text('{"prompt": "hello there world"}\n\n{"prompt": "write a poem", "output_len": 77}\n')
    got = sample_custom(path, tok, None, default_output_len=33)
    assert [s.prompt for s in got] == ["hello there world", "write a poem"]
    assert [s.expected_output_len for s in got] == [33, 77]
    assert got[0].prompt_len == len(tok("hello there world").input_ids)
    assert len(load_samples("custom", path, tok, 1, 0)) == 1


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('{"prompt": "a"}\n{"prompt": "b",\n', r"c\.jsonl:2: column \d+: invalid JSON"),
        ('{"prompt": "a"}\n{"text": "b"}\n', r"c\.jsonl:2: .*'prompt'"),
        ('["a"]\n', r"c\.jsonl:1: expected a JSON object"),
        ('{"prompt": "a", "output_len": "x"}\n', r"c\.jsonl:1: 'output_len'"),
        ("\n\n", r"c\.jsonl: no prompts"),
    ],
)
def test_custom_malformed(tmp_path, tok, text, match):
    path = tmp_path / "c.jsonl"
    path.write_text(text)
    with pytest.raises(DatasetError, match=match):
        sample_custom(path, tok, 10)


# --- malformed ShareGPT and the factory -----------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ('[{"id": "a", "conversations": []},\n oops]', r"bad\.json: invalid JSON at line 2"),
        ('{"id": "a"}', r"bad\.json: expected a JSON list"),
        ('[{"id": "a"}]', r"bad\.json: entry 0 has no 'conversations'"),
        (
            '[{"conversations": [{"from": "human"}, {"from": "gpt", "value": "x"}]}]',
            r"bad\.json: entry 0 turn 0",
        ),
        ('[{"conversations": [{"value": "hi there"}]}]', r"bad\.json: no conversation has two turns"),
        ('[{"conversations": [{"value": "hi"}, {"value": "yo"}]}]', r"bad\.json: no conversation passes"),
    ],
)
def test_sharegpt_malformed(tmp_path, tok, content, match):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(DatasetError, match=match) as err:
        sample_sharegpt(path, tok, 10, 0)
    assert "\n" not in str(err.value)


def test_missing_files_name_the_path(tmp_path, tok):
    missing = tmp_path / "nowhere.json"
    for call in (
        lambda: sample_sharegpt(missing, tok, 1, 0),
        lambda: sample_custom(missing, tok, 1),
        lambda: load_samples("sharegpt", missing, tok, 1, 0),
    ):
        with pytest.raises(DatasetError, match=r"nowhere\.json"):
            call()
    corrupt = tmp_path / "x.json.gz"
    corrupt.write_bytes(b"\x1f\x8bnot really gzip")
    with pytest.raises(DatasetError, match=r"x\.json\.gz"):
        sample_sharegpt(corrupt, tok, 1, 0)


def test_load_samples_dispatch_and_option_errors(tok):
    got = load_samples("random", None, tok, 3, 0, input_len=32, output_len=8, range_ratio=None)
    assert [s.expected_output_len for s in got] == [8, 8, 8]
    with pytest.raises(ConfigError, match="--dataset-name"):
        load_samples("nonesuch", None, tok, 3, 0)
    with pytest.raises(ConfigError, match="input_len"):
        load_samples("sharegpt", None, tok, 3, 0, input_len=5)
    with pytest.raises(DatasetError, match="--dataset-path"):
        load_samples("custom", None, tok, 3, 0)
