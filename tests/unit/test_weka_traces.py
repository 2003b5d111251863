"""WEKA / Claude Code session traces read as sessions: chains, sub-agents, turns in document order, the trace's own
prefix reuse, and one line naming file, trace and field for every malformed trace (issue 36's first step).

The 40 real Claude Code sessions of ``../shared/traces/weka_cc`` (Apache-2.0, credit in its README) are read from
there; the small traces below are written by the tests.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmload.common.errors import DatasetError
from llmload.datasets.traces.weka import Call, prefix_reuse, read_sessions
from llmload.datasets.traces.weka_synth import synthetic_traces

WEKA_CC = Path(__file__).resolve().parents[3] / "shared" / "traces" / "weka_cc"


def call(t: float, ids: list[int], kind: str = "n", **extra: object) -> dict:
    return {"t": t, "type": kind, "model": "m", "in": 64 * len(ids), "out": 10, "hash_ids": ids, **extra}


def trace(trace_id: str = "tr", requests: list | None = None, **extra: object) -> dict:
    return {"id": trace_id, "block_size": 64, "hash_id_scope": "local", "tool_tokens": 1, "system_tokens": 1,
            "requests": requests if requests is not None else [call(0.0, [1, 2])], **extra}


def write(tmp_path: Path, *traces: dict) -> Path:
    folder = tmp_path / "traces"
    folder.mkdir()
    for t in traces:
        (folder / f"{t['id']}.json").write_text(json.dumps(t))
    return folder


@pytest.mark.skipif(not WEKA_CC.is_dir(), reason="../shared/traces/weka_cc is not here")
def test_the_40_real_sessions_read_as_their_readme_counts_them() -> None:
    sessions = read_sessions(WEKA_CC)
    assert len(sessions) == 40
    assert sum(len(s.main.calls) for s in sessions) == 555
    assert sum(c.stream for s in sessions for c in s.main.calls) == 141
    subagents = [chain for s in sessions for chain in s.subagents]
    assert len(subagents) == 6 and sum(len(c.calls) for c in subagents) == 56
    for s in sessions:  # turns number every call of a trace once, in document order
        assert sorted(c.turn for chain in s.chains for c in chain.calls) == list(range(s.calls))
        assert s.block_size == 64 and 0 < s.ideal_reuse_tokens() < sum(c.input_tokens for ch in s.chains
                                                                        for c in ch.calls)


def test_a_subagent_sits_in_document_order_and_knows_its_parent_call(tmp_path: Path) -> None:
    sub = {"t": 5.0, "type": "subagent", "agent_id": "agent_001", "subagent_type": "Explore", "status": "completed",
           "requests": [call(0.0, [1, 9]), call(2.0, [1, 9, 10])]}
    detached = {"t": 7.0, "type": "subagent", "agent_id": "agent_002", "status": "async_launched",
                "requests": [call(0.0, [20])]}
    (s,) = read_sessions(write(tmp_path, trace(requests=[call(0.0, [1, 2]), sub, call(9.0, [1, 2, 3], "s",
                                                                                        ttft=0.5), detached])))
    assert [(c.turn, c.t) for c in s.main.calls] == [(0, 0.0), (3, 9.0)]
    first, second = s.subagents
    assert (first.agent_id, first.spawn_t, first.after_turn, first.detached) == ("agent_001", 5.0, 0, False)
    assert [c.turn for c in first.calls] == [1, 2] and first.subagent_type == "Explore"
    assert (second.after_turn, second.detached, second.calls[0].turn) == (3, True, 4)
    assert s.main.calls[1].stream and s.main.calls[1].ttft == 0.5 and not s.main.calls[0].stream
    # turn order: [1,2] new; [1,9]: block 1 again; [1,9,10]: 1 and 9; [1,2,3]: 1 and 2; [20] new
    assert s.ideal_reuse_tokens() == 64 * (0 + 1 + 2 + 2 + 0)


def test_prefix_reuse_counts_only_a_prefix_of_hits() -> None:
    calls = [Call(0.0, i, False, "m", 0, 1, ids, 0.0) for i, ids in enumerate(
        [(1, 2, 3), (1, 2, 4), (2, 3), (1, 2, 3, 5), (7, 1, 2)])]
    # (2, 3) after (1, 2, 3): block 2 follows a different prefix, no hit; (7, 1, 2): 7 is new, so nothing after it
    assert prefix_reuse(calls, 64) == [0, 128, 0, 192, 0]


def test_a_jsonl_file_holds_one_trace_a_line(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(trace("a")) + "\n\n" + json.dumps(trace("b")) + "\n")
    assert [s.id for s in read_sessions(path)] == ["a", "b"]


@pytest.mark.parametrize(("requests", "message"), [
    ([{"t": 0.0, "type": "n", "out": 3, "hash_ids": []}], "requests[0]: no 'in' (its prompt tokens)"),
    ([call(0.0, [1], "x")], "requests[0]: type must be one of n, s or subagent, got 'x'"),
    ([call(0.0, [1], out=-1)], "requests[0]: 'out' must be a whole number of tokens >= 0, got -1"),
    ([call(0.0, ["a"])], "requests[0]: hash_ids must be a list of integers"),
    ([call(-1.0, [1])], "requests[0]: 't' must be seconds >= 0, got -1.0"),
    ([{"t": 1.0, "type": "subagent", "requests": []}], "requests[0]: a subagent needs an agent_id"),
    ([{"t": 1.0, "type": "subagent", "agent_id": "a1", "requests": [{"t": 0, "type": "n", "out": 1}]}],
     "requests[0] (a1): requests[0]: no 'in'"),
    ([], "trace tr has no requests"),
])
def test_a_malformed_trace_is_one_line_naming_file_trace_and_field(tmp_path: Path, requests: list,
                                                                  message: str) -> None:
    folder = write(tmp_path, trace(requests=requests))
    with pytest.raises(DatasetError) as info:
        read_sessions(folder)
    text = str(info.value)
    assert "\n" not in text and str(folder / "tr.json") in text and message in text, text
    if requests:
        assert "trace tr" in text


@pytest.mark.parametrize(("content", "message"), [
    ("{not json", "not JSON"), ('{"id": "x"}', 'not a WEKA trace (an object with a "requests" list)'),
    ("[1, 2]", "not a WEKA trace"),
])
def test_a_file_that_is_not_this_format_is_one_line(tmp_path: Path, content: str, message: str) -> None:
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "x.json").write_text(content)
    with pytest.raises(DatasetError) as info:
        read_sessions(folder)
    assert message in str(info.value) and str(folder / "x.json") in str(info.value)


def test_an_empty_folder_or_file_and_a_missing_path_are_one_line(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match=r"no \.json trace files"):
        read_sessions(tmp_path / "empty")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(DatasetError, match="no traces in this file"):
        read_sessions(tmp_path / "empty.jsonl")
    with pytest.raises(DatasetError, match="trace file not found"):
        read_sessions(tmp_path / "missing.jsonl")


def test_the_seeded_generator_writes_traces_of_the_format(tmp_path: Path) -> None:
    """The project's own sample: read back as sessions, the same for a seed, an agent's shape (a growing
    context that re-sends the previous call's prompt, sub-agents sharing the tool block, the parent waiting for a
    sub-agent it did not detach)."""
    traces = synthetic_traces(3, sessions=5, calls=6, subagents=2)
    assert traces == synthetic_traces(3, sessions=5, calls=6, subagents=2) != synthetic_traces(4, sessions=5)
    path = tmp_path / "synth.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in traces))
    sessions = read_sessions(path)
    assert [s.id for s in sessions] == [t["id"] for t in traces]
    for s in sessions:
        assert len(s.main.calls) == 6 and 1 <= len(s.subagents) <= 2
        for chain in s.chains:
            for before, after in zip(chain.calls, chain.calls[1:], strict=False):
                assert after.hash_ids[: len(before.hash_ids)] == before.hash_ids  # the context only grows
                assert after.t >= before.t
        tool_block = s.main.calls[0].hash_ids[0]
        assert all(sub.calls[0].hash_ids[0] == tool_block for sub in s.subagents)
        for sub in s.subagents:
            end = sub.spawn_t + sub.calls[-1].t
            later = [c for c in s.main.calls if c.turn > sub.calls[-1].turn]
            if later and not sub.detached:
                assert later[0].t > end, (s.id, sub.agent_id)
        total = sum(c.input_tokens for chain in s.chains for c in chain.calls)
        assert 0 < s.ideal_reuse_tokens() < total


def test_which_subagents_a_main_call_waits_for_and_its_pauses(tmp_path: Path) -> None:
    """A main call waits for a sub-agent only when it was recorded after the sub-agent's last answer ended (and
    the sub-agent is not detached); its pause is then the gap after that end, else its think_time."""
    sub = {"t": 1.5, "type": "subagent", "agent_id": "a1", "status": "completed",
           "requests": [call(0.0, [1, 7], api_time=1.0), call(2.0, [1, 7, 8], api_time=1.0, think_time=1.0)]}
    detached = {"t": 2.5, "type": "subagent", "agent_id": "a2", "status": "async_launched",
                "requests": [call(0.0, [1, 9], api_time=0.5)]}
    (s,) = read_sessions(write(tmp_path, trace(requests=[
        call(0.0, [1, 2], api_time=1.0), sub, call(2.0, [1, 2, 3], api_time=0.4, think_time=1.0), detached,
        call(6.0, [1, 2, 3, 4], api_time=1.0, think_time=3.6)])))
    _, beside, after = s.main.calls
    assert s.waits_for(beside) == []  # recorded at 2.0 while a1 ran (1.5 to 4.5)
    assert [c.agent_id for c in s.waits_for(after)] == ["a1"]  # a2 is detached
    assert s.pause_before(s.main, 0) == 0.0 and s.pause_before(s.main, 1) == 1.0
    assert s.pause_before(s.main, 2) == pytest.approx(6.0 - 4.5)  # after a1's end, not after the last answer
    a1, a2 = s.subagents
    assert s.spawn_pause(a1) == pytest.approx(0.5) and s.spawn_pause(a2) == pytest.approx(0.1)
    assert s.pause_before(a1, 0) == 0.0 and s.pause_before(a1, 1) == 1.0


def test_sessions_with_their_prompts_travel_whole_and_read_back_equal(tmp_path: Path) -> None:
    from llmload.datasets.traces.weka_replay import AgentSession, sample_weka
    from llmload.tokenizer import load_counting_tokenizer

    folder = tmp_path / "traces"
    folder.mkdir()
    for t in synthetic_traces(2, sessions=2, calls=4, subagents=1):
        (folder / f"{t['id']}.json").write_text(json.dumps(t))
    tok = load_counting_tokenizer("builtin")
    samples = sample_weka(folder, tok, None, seed=3)
    for sample in samples:
        agent = sample.session
        back = AgentSession.from_dict(json.loads(json.dumps(agent.to_dict())))
        assert back.session == agent.session
        for chain in agent.session.chains:
            for c in chain.calls:
                assert back.prompt(c) == agent.prompt(c)
                assert len(tok(agent.prompt(c)).input_ids) == agent.prompt_len(c) == c.input_tokens
    # equal hash ids are byte-identical blocks; a later call starts with its predecessor's blocks
    a = samples[0].session
    c0, c1 = a.session.main.calls[:2]
    shared = len(a.prompts[c0.turn].blocks)
    assert a.prompts[c1.turn].blocks[:shared] == a.prompts[c0.turn].blocks
    assert a.prompt(c1).startswith("".join(a.blocks[h] for h in a.prompts[c0.turn].blocks))
    # the same seed gives the same prompts; local ids of two traces are different blocks
    again = sample_weka(folder, tok, None, seed=3)
    assert again[0].session.prompt(c1) == a.prompt(c1)
    b = samples[1].session
    assert a.blocks[a.session.main.calls[0].hash_ids[0]] != b.blocks[b.session.main.calls[0].hash_ids[0]]


def test_with_a_tokenizer_that_merges_across_spaces_every_prompt_is_measured(tmp_path: Path) -> None:
    """A BPE without a whitespace pre-tokenizer (its merges span spaces) over a repetitive prompt pool: blocks
    side by side tokenize differently from alone, so every prompt is measured; prompt_len stays what it counts.
    The shipped byte-level tokenizer splits at every space, and its prompts are built without measuring them."""
    from tokenizers import Tokenizer, models, trainers
    from transformers import PreTrainedTokenizerFast

    from llmload.datasets.traces.weka_replay import sample_weka, splits_at_words
    from llmload.tokenizer import load_counting_tokenizer

    raw = Tokenizer(models.BPE(unk_token="[UNK]"))
    raw.train_from_iterator(["ab cd ef gh ij kl " * 20, "cd ab gh ef " * 30],
                            trainers.BpeTrainer(vocab_size=120, special_tokens=["[UNK]"]))
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="[UNK]")
    assert not splits_at_words(tok, [" ab cd", " ef"])
    assert splits_at_words(load_counting_tokenizer("builtin"), [" ab cd", " ef"])
    pool = tmp_path / "pool.json"
    pool.write_text(json.dumps([{"id": str(i), "conversations": [
        {"from": "human", "value": "ab cd ef gh ij kl " * (5 + i)}, {"from": "gpt", "value": "cd ab gh ef " * 3}]}
        for i in range(30)]))
    folder = tmp_path / "traces"
    folder.mkdir()
    for t in synthetic_traces(4, sessions=2, calls=3, subagents=1):
        (folder / f"{t['id']}.json").write_text(json.dumps(t))
    sums_differ = 0
    for sample in sample_weka(folder, tok, None, seed=1, prompt_path=pool):
        agent = sample.session
        for chain in agent.session.chains:
            for c in chain.calls:
                counted = len(tok(agent.prompt(c)).input_ids)
                assert counted == agent.prompt_len(c)
                parts = [len(tok(agent.blocks[h], add_special_tokens=False).input_ids)
                         for h in agent.prompts[c.turn].blocks]
                sums_differ += counted != sum(parts) + len(tok(agent.prompts[c.turn].tail).input_ids)
    assert sums_differ, "the pool no longer makes this tokenizer merge across blocks: the test tests nothing"
