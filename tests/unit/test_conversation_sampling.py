"""Whole ShareGPT conversations: the same selection as first-turn sampling, and the rules of docs/conversations.md."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from llmload.common.errors import ConfigError, DatasetError
from llmload.datasets import (
    default_sharegpt_path,
    load_samples,
    sample_conversations,
    sample_sharegpt,
    token_len,
)
from llmload.datasets.base import Turn
from llmload.datasets.conversations import shared_system_prompt
from llmload.tokenizer import load_counting_tokenizer


@pytest.fixture(scope="module")
def tok():
    return load_counting_tokenizer("builtin")


def words(n: int) -> str:
    return " ".join(["the"] * n)


def text(tag: str, n: int = 8) -> str:
    """A message of about ``n + 2`` tokens that names itself (long enough for every length filter)."""
    return f"{tag} says {words(n)}"


def entry(cid: str, *messages: tuple[str, str]) -> dict:
    return {"id": cid, "conversations": [{"from": role, "value": value} for role, value in messages]}


def write(tmp_path: Path, *entries: dict, name: str = "sg.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(list(entries)))
    return path


def count(tok, s: str) -> int:
    return len(tok.encode(s, add_special_tokens=False))


def one(tmp_path: Path, tok, *messages: tuple[str, str], **kw):
    """The single sample a file holding one conversation gives."""
    got = sample_conversations(write(tmp_path, entry("c", *messages)), tok, 10, 0, **kw)
    assert len(got) == 1
    return got[0]


def exchanges(sample) -> list[tuple[str, str]]:
    return [(t.user, t.reply) for t in sample.turns]


# --- selection ---------------------------------------------------------------------------------


@pytest.fixture
def mixed(tmp_path):
    """120 conversations of 2-9 messages; about a third fail one of vLLM's first-turn filters."""
    rng = random.Random(3)
    data = []
    for i in range(120):
        first = rng.choice([text(f"q{i}"), "hi", text(f"long{i}", 1100)])
        n = rng.randint(2, 9)
        messages = [("human", first)] + [
            ("gpt" if k % 2 else "human", text(f"m{i}.{k}", rng.randint(3, 40))) for k in range(1, n)
        ]
        data.append(entry(f"c{i}", *messages))
    data.insert(7, entry("single", ("human", text("alone"))))
    return write(tmp_path, *data)


@pytest.mark.parametrize("seed", [0, 1, 7, 42])
@pytest.mark.parametrize("fixed", [None, 16])
def test_same_conversations_as_first_turn_sampling(mixed, tok, seed, fixed):
    first = sample_sharegpt(mixed, tok, 25, seed, fixed_output_len=fixed)
    whole = sample_conversations(mixed, tok, 25, seed, fixed_output_len=fixed)
    assert [s.request_id for s in whole] == [s.request_id for s in first]
    for f, w in zip(first, whole, strict=True):
        assert (w.prompt, w.prompt_len, w.conversation) == (f.prompt, f.prompt_len, f.conversation)
        assert w.turns and w.turns[0].user == f.prompt
        if fixed is not None:
            assert w.expected_output_len == fixed
        else:
            assert w.expected_output_len == w.turns[0].reply_len == count(tok, f.conversation[1]["value"])


def test_same_conversations_on_the_shipped_sample(tok):
    path = default_sharegpt_path()
    first = sample_sharegpt(path, tok, 150, 5)
    whole = sample_conversations(path, tok, 150, 5)
    assert [s.request_id for s in whole] == [s.request_id for s in first]
    assert max(len(s.turns) for s in whole) > 1
    assert all(t.reply_len > 0 for s in whole for t in s.turns)


def test_a_conversation_without_user_turn_is_skipped_and_the_next_taken(tmp_path, tok):
    data = [entry(f"ok{i}", ("human", text(f"q{i}")), ("gpt", text(f"a{i}"))) for i in range(30)]
    for i in range(0, 30, 3):  # first-turn sampling takes these (both turns are long enough)
        data.insert(i, entry(f"bot{i}", ("gpt", text(f"x{i}")), ("bard", text(f"y{i}"))))
    data.append(entry("sys", ("system", text("s")), ("tool", text("t"))))
    path = write(tmp_path, *data)
    for seed in (0, 1, 2):
        first_ids = [s.request_id for s in sample_sharegpt(path, tok, 1000, seed)]
        expected = [cid for cid in first_ids if cid.startswith("ok")][:12]
        got = sample_conversations(path, tok, 12, seed)
        assert [s.request_id for s in got] == expected
        assert any(not cid.startswith("ok") for cid in first_ids[: first_ids.index(expected[-1])])


def test_no_user_turn_anywhere_is_one_line_error(tmp_path, tok):
    path = write(tmp_path, entry("a", ("gpt", text("x")), ("gpt", text("y"))))
    with pytest.raises(DatasetError, match="has a user turn") as err:
        sample_conversations(path, tok, 5, 0)
    assert "\n" not in str(err.value)
    with pytest.raises(DatasetError, match="length filters"):
        sample_conversations(write(tmp_path, entry("b", ("human", "hi"), ("gpt", "yo")), name="b.json"), tok, 5)


def test_deterministic_by_seed(mixed, tok):
    a = sample_conversations(mixed, tok, 20, 11, system_prompt_len=12)
    assert sample_conversations(mixed, tok, 20, 11, system_prompt_len=12) == a
    b = sample_conversations(mixed, tok, 20, 12, system_prompt_len=12)
    assert [s.request_id for s in a] != [s.request_id for s in b]
    assert a[0].system != b[0].system


def test_does_not_touch_global_random(mixed, tok):
    random.seed(5)
    before = random.random()
    random.seed(5)
    sample_conversations(mixed, tok, 5, 0, system_prompt_len=8)
    assert random.random() == before


# --- normalisation -------------------------------------------------------------------------------


def test_turns_and_lengths(tmp_path, tok):
    a, b, c, d = text("A"), text("B", 30), text("C", 5), text("D", 12)
    s = one(tmp_path, tok, ("human", a), ("gpt", b), ("human", c), ("gpt", d))
    assert s.turns == [Turn(a, count(tok, a), b, count(tok, b)), Turn(c, count(tok, c), d, count(tok, d))]
    assert s.prompt == a and s.prompt_len == token_len(tok, a) == count(tok, a) + 1  # vLLM's count: with <s>
    assert s.expected_output_len == count(tok, b)
    assert (s.system, s.system_len) == ("", 0)
    assert s.request_id == "c" and len(s.conversation) == 4


def test_role_names(tmp_path, tok):
    a, b, c, d = text("A"), text("B"), text("C"), text("D")
    for user, assistant in [("human", "gpt"), ("user", "assistant"), ("Human", "ChatGPT"), ("USER", "bard"),
                            (" human ", "model")]:
        s = one(tmp_path, tok, (user, a), (assistant, b), (user, c), (assistant, d))
        assert exchanges(s) == [(a, b), (c, d)], (user, assistant)


def test_unknown_roles_are_dropped(tmp_path, tok):
    a, b, c, d = text("A"), text("B"), text("C"), text("D")
    s = one(tmp_path, tok, ("human", a), ("tool", text("X")), ("gpt", b), ("function", text("Y")),
            ("human", c), ("observation", text("Z")), ("gpt", d))
    assert exchanges(s) == [(a, b), (c, d)]
    raw = entry("c", ("human", a), ("gpt", b), ("human", c), ("gpt", d))
    del raw["conversations"][2]["from"]  # no role: dropped, so the two replies merge
    s = sample_conversations(write(tmp_path, raw), tok, 1)[0]
    assert exchanges(s) == [(a, b + "\n\n" + d)]


def test_leading_assistant_turns_are_dropped(tmp_path, tok):
    x, y, a, b = text("X"), text("Y"), text("A"), text("B")
    s = one(tmp_path, tok, ("gpt", x), ("gpt", y), ("human", a), ("gpt", b))
    assert exchanges(s) == [(a, b)]
    assert s.prompt == a and s.prompt_len == token_len(tok, a)
    assert s.expected_output_len == count(tok, b)


def test_consecutive_same_role_turns_are_merged(tmp_path, tok):
    a, b, c, d, e, f = (text(t) for t in "ABCDEF")
    s = one(tmp_path, tok, ("human", a), ("human", b), ("gpt", c), ("gpt", d), ("human", e), ("gpt", f))
    assert exchanges(s) == [(a + "\n\n" + b, c + "\n\n" + d), (e, f)]
    assert s.prompt_len == token_len(tok, a + "\n\n" + b)
    assert s.turns[0].reply_len == count(tok, c + "\n\n" + d)


def test_empty_turns_are_dropped_before_merging(tmp_path, tok):
    a, b, c = text("A"), text("B"), text("C")
    s = one(tmp_path, tok, ("human", a), ("gpt", text("E")), ("gpt", " \n\t"), ("human", ""), ("human", b),
            ("gpt", c))
    assert exchanges(s) == [(a, text("E")), (b, c)]
    s = one(tmp_path, tok, ("human", a), ("gpt", b), ("human", " \n "), ("gpt", c))
    assert exchanges(s) == [(a, b + "\n\n" + c)]


def test_system_turns(tmp_path, tok):
    s1, s2, a, b, c, d = text("S1"), text("S2"), text("A"), text("B"), text("C"), text("D")
    s = one(tmp_path, tok, ("system", s1), ("system", s2), ("human", a), ("gpt", b), ("system", text("late")),
            ("human", c), ("gpt", d))
    assert s.system == s1 + "\n\n" + s2 and s.system_len == count(tok, s.system)
    assert exchanges(s) == [(a, b), (c, d)]  # the late system turn is dropped
    s = one(tmp_path, tok, ("gpt", text("X")), ("system", s1), ("human", a), ("gpt", b))
    assert s.system == s1 and exchanges(s) == [(a, b)]


def test_one_turn_conversation_stays_one_turn(tmp_path, tok):
    a, b = text("A"), text("B", 20)
    s = one(tmp_path, tok, ("human", a), ("gpt", b))
    assert s.turns == [Turn(a, count(tok, a), b, count(tok, b))]
    assert s.expected_output_len == count(tok, b)


def test_trailing_unanswered_user_turn(tmp_path, tok):
    a, b, c = text("A"), text("B"), text("C")
    s = one(tmp_path, tok, ("human", a), ("gpt", b), ("human", c))
    assert exchanges(s) == [(a, b)]  # dropped: there is an earlier exchange
    s = one(tmp_path, tok, ("system", text("S")), ("human", c))
    assert s.turns == [Turn(c, count(tok, c), "", 0)]  # the only user turn: kept, no reply
    assert s.expected_output_len == token_len(tok, c)  # what the selection measured for turn 1
    s = one(tmp_path, tok, ("system", text("S")), ("human", c), fixed_output_len=16)
    assert s.expected_output_len == 16


def test_max_turns_keeps_the_first_n(tmp_path, tok):
    messages = [(role, text(f"{role}{i}")) for i in range(5) for role in ("human", "gpt")]
    assert len(one(tmp_path, tok, *messages).turns) == 5
    s = one(tmp_path, tok, *messages, max_turns=2)
    assert exchanges(s) == [(text("human0"), text("gpt0")), (text("human1"), text("gpt1"))]
    assert len(one(tmp_path, tok, *messages, max_turns=9).turns) == 5
    with pytest.raises(DatasetError, match="--max-turns"):
        one(tmp_path, tok, *messages, max_turns=0)


def test_message_without_string_value_names_entry_and_turn(tmp_path, tok):
    raw = entry("c", ("human", text("A")), ("gpt", text("B")), ("human", text("C")))
    raw["conversations"][2]["value"] = 5
    with pytest.raises(DatasetError, match=r"entry 0 turn 2"):
        sample_conversations(write(tmp_path, raw), tok, 1)


# --- the shared system prompt --------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 16, 100, 400])
def test_system_prompt_len_is_shared_and_about_n_tokens(mixed, tok, n):
    got = sample_conversations(mixed, tok, 15, 3, system_prompt_len=n)
    assert len({s.system for s in got}) == 1
    assert abs(count(tok, got[0].system) - n) <= 2
    assert all(s.system_len == count(tok, s.system) for s in got)
    assert sample_conversations(mixed, tok, 15, 3)[0].system == ""


def test_system_prompt_has_no_special_tokens(tok):
    special = set(tok.all_special_ids)
    for seed in range(5):  # 2000 draws from 8000 ids, 4 of them special: about one hit each without the rule
        ids = tok.encode(shared_system_prompt(tok, 2000, seed), add_special_tokens=False)
        assert abs(len(ids) - 2000) <= 2 and not special & set(ids)


def test_system_prompt_is_prepended_to_the_dataset_system_turn(tmp_path, tok):
    s1, a, b = text("S1"), text("A"), text("B")
    shared = one(tmp_path, tok, ("human", a), ("gpt", b), system_prompt_len=32).system
    s = one(tmp_path, tok, ("system", s1), ("human", a), ("gpt", b), system_prompt_len=32)
    assert s.system == shared + "\n\n" + s1 and s.system_len == count(tok, s.system)


def test_system_prompt_depends_on_the_seed_only(tmp_path, tok):
    path = write(tmp_path, entry("c", ("human", text("A")), ("gpt", text("B"))))
    same = {sample_conversations(path, tok, 1, 4, system_prompt_len=24)[0].system for _ in range(2)}
    other = sample_conversations(path, tok, 1, 5, system_prompt_len=24)[0].system
    assert len(same) == 1 and other not in same
    with pytest.raises(DatasetError, match="--system-prompt-len"):
        sample_conversations(path, tok, 1, 0, system_prompt_len=-1)


# --- load_samples ----------------------------------------------------------------------------------


def test_load_samples_routes_multi_turn(mixed, tok):
    whole = load_samples("sharegpt", mixed, tok, 5, 2, multi_turn=True, max_turns=1, system_prompt_len=8)
    assert all(len(s.turns) == 1 and s.system for s in whole)
    first = load_samples("sharegpt", mixed, tok, 5, 2, multi_turn=False, max_turns=None, system_prompt_len=0)
    assert all(s.turns is None for s in first)
    assert [s.request_id for s in first] == [s.request_id for s in whole]
    for option in ({"max_turns": 2}, {"system_prompt_len": 8}):
        with pytest.raises(ConfigError, match="--multi-turn") as err:
            load_samples("sharegpt", mixed, tok, 5, 2, **option)
        assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="multi_turn"):
        load_samples("random", None, tok, 5, 2, multi_turn=True)
