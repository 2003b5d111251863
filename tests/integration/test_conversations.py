"""Whole conversations replayed on the run core, checked on the server side (the simulator's trace with
``--trace-prompts``): each turn carries exactly the previous turns, recorded history is byte-identical run to run,
live history carries the server's replies, think time and the context cap hold, odd conversation shapes follow
docs/conversations.md, a failed turn ends its conversation, and ``--processes 2`` replays the same conversations."""

from __future__ import annotations

import json
from collections import defaultdict
from itertools import pairwise
from pathlib import Path

import pytest

from tests.support import is_run_request, trace_lines

#: fixed timing: 20 ms to the first token, 5 ms between tokens
SIM = ("--ttft-ms", "20", "--itl-ms", "5", "--trace-prompts")
BASE = ("--tokenizer", "builtin", "--multi-turn", "--disable-tqdm", "--save-result", "--no-initial-test")


def words(n: int, seed: int) -> str:
    vocab = ["alpha", "beta", "gamma", "delta", "kappa", "omega", "sigma", "tau", "rho", "phi"]
    return " ".join(vocab[(seed * 7 + i * 3) % len(vocab)] + str((seed + i) % 13) for i in range(n))


def write_conversations(path: Path, conversations: list[list[tuple[str, str]]]) -> Path:
    data = [{"id": f"c{i}", "conversations": [{"from": role, "value": text} for role, text in turns]}
            for i, turns in enumerate(conversations)]
    path.write_text(json.dumps(data))
    return path


def plain_conversations(count: int, user_turns: int, user_words: int = 30, reply_words: int = 20) -> list:
    out = []
    for c in range(count):
        turns = []
        for t in range(user_turns):
            turns += [("human", f"question {c}.{t}: " + words(user_words, c * 10 + t)),
                      ("gpt", f"answer {c}.{t}: " + words(reply_words, c * 10 + t + 5))]
        out.append(turns)
    return out


def run_trace(trace: Path) -> list[dict]:
    return [t for t in trace_lines(trace) if is_run_request(t["client_id"])]


def by_conversation(lines: list[dict], key: str = "session") -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for line in lines:
        out[line[key]].append(line)
    for turns in out.values():
        turns.sort(key=lambda t: t["received"])
    return out


def bench(child_runner, sim, dataset: Path, *extra: str, timeout: float = 180):
    run = child_runner.bench("--base-url", sim.url, "--dataset-path", str(dataset), *BASE, *extra, timeout=timeout)
    assert run.returncode == 0, run.describe()
    assert "Traceback" not in run.stderr, run.describe()
    return run


@pytest.mark.slow
def test_each_turn_carries_exactly_the_previous_turns_in_order(child_runner, start_sim, tmp_path):
    dataset = write_conversations(tmp_path / "conv.json", plain_conversations(6, 4))
    sim = start_sim(*SIM, "--trace-file", tmp_path / "trace.jsonl")
    run = bench(child_runner, sim, dataset, "--num-prompts", "6", "--request-rate", "20")
    records = run.records()
    assert len(records) == 24  # 6 conversations x 4 turns
    source = {e["id"]: e["conversations"] for e in json.loads(dataset.read_text())}
    for session, turns in by_conversation(run_trace(tmp_path / "trace.jsonl")).items():
        raw = source[session]
        assert [t["client_id"] for t in turns] == [f"{session}:{k}" for k in range(1, 5)]
        for k, line in enumerate(turns):
            expected = [{"role": "user" if m["from"] == "human" else "assistant", "content": m["value"]}
                        for m in raw[: 2 * k + 1]]
            assert line["messages"] == expected, f"turn {k + 1} of {session}"
    assert {r["conversation_end"] for r in records if r["turn"] == 4} == {"completed"}
    assert {r["conversation_turns"] for r in records} == {4}


@pytest.mark.slow
def test_recorded_history_is_byte_identical_across_runs_and_live_history_carries_the_replies(
        child_runner, start_sim, tmp_path):
    dataset = write_conversations(tmp_path / "conv.json", plain_conversations(4, 3))
    messages = {}
    for name in ("one", "two", "live"):
        trace = tmp_path / f"{name}.jsonl"
        sim = start_sim(*SIM, "--trace-file", trace, "--seed", "3")
        extra = ("--history", "live") if name == "live" else ()
        run = bench(child_runner, sim, dataset, "--num-prompts", "4", "--seed", "5", *extra)
        messages[name] = {t["client_id"]: t["messages"] for t in run_trace(trace)}
        if name == "live":
            replies = {r["request_id"]: r["generated_text"] for r in run.records()}
    assert messages["one"] == messages["two"]
    assert messages["live"] != messages["one"]
    for rid, sent in messages["live"].items():
        session, turn = rid.rsplit(":", 1)
        for k in range(1, int(turn)):
            assert sent[2 * k - 1] == {"role": "assistant", "content": replies[f"{session}:{k}"]}
            assert replies[f"{session}:{k}"]  # the simulator's reply, not an empty string


@pytest.mark.slow
def test_think_time_between_turns_is_respected(child_runner, start_sim, tmp_path):
    dataset = write_conversations(tmp_path / "conv.json", plain_conversations(3, 3))
    sim = start_sim(*SIM, "--trace-file", tmp_path / "trace.jsonl")
    bench(child_runner, sim, dataset, "--num-prompts", "3", "--turn-think-time", "fixed:0.4")
    gaps = []
    for turns in by_conversation(run_trace(tmp_path / "trace.jsonl")).values():
        assert len(turns) == 3
        gaps += [b["received"] - a["chunks"][-1] for a, b in pairwise(turns)]
    assert len(gaps) == 6
    # the pause starts when the client read the last chunk; the margin above covers a busy machine
    assert all(0.39 <= g < 2.0 for g in gaps), gaps


@pytest.mark.slow
def test_context_cap_ends_or_truncates_conversations(child_runner, start_sim, tmp_path):
    dataset = write_conversations(tmp_path / "conv.json", plain_conversations(4, 6, user_words=40))
    cap = 400
    for policy in ("end", "truncate"):
        trace = tmp_path / f"{policy}.jsonl"
        sim = start_sim(*SIM, "--trace-file", trace)
        run = bench(child_runner, sim, dataset, "--num-prompts", "4", "--max-context-tokens", str(cap),
                    "--context-policy", policy, "--output-len", "16")
        records = run.records()
        assert all(r["prompt_len"] + r["expected_output_len"] <= cap for r in records)
        ends = [r["conversation_end"] for r in records if r["conversation_end"]]
        assert len(ends) == 4
        lines = by_conversation(run_trace(trace))
        if policy == "end":
            assert set(ends) == {"context_cap"}
            assert all(len(t) < 6 for t in lines.values())
        else:
            assert set(ends) == {"completed"}
            assert all(len(t) == 6 for t in lines.values())
            last = [t[-1]["messages"] for t in lines.values()]
            # the oldest turns were dropped: the last turn no longer starts with the first question
            assert all(not m[0]["content"].startswith("question") or ".0:" not in m[0]["content"] for m in last)
            assert all(m[-1]["role"] == "user" and ".5:" in m[-1]["content"] for m in last)


@pytest.mark.slow
def test_odd_conversation_shapes_follow_the_documented_rules(child_runner, start_sim, tmp_path):
    q = words(12, 1)
    shapes = [
        [("gpt", "hello, how can I help " + q), ("human", "first " + q), ("gpt", "reply " + q)],  # leading assistant
        [("human", "part one " + q), ("human", "part two " + q), ("gpt", "merged reply " + q)],  # same role twice
        [("human", "ask " + q), ("gpt", "first " + q), ("human", "  "), ("human", "again " + q),
         ("gpt", "reply " + q)],  # an empty turn between two
        # the raw (turn 0, turn 1) pair fails vLLM's first-turn filter (output < 4 tokens): not selected
        [("human", "filtered " + q), ("gpt", " ")],
        [("system", "you are terse " + q), ("human", "with system " + q), ("gpt", "ok " + q)],  # system turn
        [("human", "only one exchange " + q), ("gpt", "single reply " + q)],  # one turn
    ]
    dataset = write_conversations(tmp_path / "odd.json", shapes)
    sim = start_sim(*SIM, "--trace-file", tmp_path / "trace.jsonl")
    run = bench(child_runner, sim, dataset, "--num-prompts", "6")
    lines = by_conversation(run_trace(tmp_path / "trace.jsonl"))
    assert len(lines) == 5, run.describe()
    for turns in lines.values():
        for line in turns:
            roles = [m["role"] for m in line["messages"]]
            body = [r for r in roles if r != "system"]
            assert body[0] == "user" and body[-1] == "user"
            assert all(a != b for a, b in pairwise(body)), roles  # strictly alternating
            assert all(m["content"].strip() for m in line["messages"])
    first = {t[0]["messages"][0]["content"].split()[0]: t for t in lines.values()}
    assert first["you"][0]["messages"][0]["role"] == "system"
    assert "part one" in first["part"][0]["messages"][0]["content"]
    assert "part two" in first["part"][0]["messages"][0]["content"]
    assert len(first["ask"]) == 2 and "again" in first["ask"][1]["messages"][-1]["content"]
    assert "filtered" not in first and "hello," not in first  # a leading assistant message is dropped
    assert all(r["success"] for r in run.records())


@pytest.mark.slow
def test_a_failed_turn_ends_its_conversation(child_runner, start_sim, tmp_path):
    dataset = write_conversations(tmp_path / "conv.json", plain_conversations(20, 4))
    sim = start_sim(*SIM, "--trace-file", tmp_path / "trace.jsonl", "--error-rate", "0.3", "--error-codes", "500")
    run = child_runner.bench("--base-url", sim.url, "--dataset-path", str(dataset), *BASE, "--num-prompts", "20",
                             timeout=180)
    assert run.returncode == 0, run.describe()
    records = run.records()
    failed = [r for r in records if not r["success"]]
    assert failed, run.describe()
    for r in failed:
        assert r["conversation_end"] == "failed"
        later = [x for x in records if x["conversation_id"] == r["conversation_id"] and x["turn"] > r["turn"]]
        assert later == []
    result = run.result()
    assert result["completed"] + result["failed"] == len(records)


@pytest.mark.slow
def test_bench_multi_turn_one_process_and_two_replay_the_same_conversations(child_runner, start_sim):
    sim = start_sim("--ttft-ms", "5", "--itl-ms", "1")
    turns = {}
    for processes in ((), ("--processes", "2")):
        run = child_runner.bench("--base-url", sim.url, "--tokenizer", "builtin", "--multi-turn", "--num-prompts",
                                 "10", "--disable-tqdm", "--save-result", "--output-len", "8", "--seed", "4",
                                 *processes, timeout=240)
        assert run.returncode == 0, run.describe()
        records = run.records()
        assert len({r["conversation_id"] for r in records}) == 10
        assert len(records) > 10  # more requests than conversations
        assert all(r["success"] for r in records)
        assert "Conversations" in run.stdout
        turns[processes] = sorted((r["conversation_id"], r["turn"]) for r in records)
        if processes:
            # a conversation stays on one worker
            workers = defaultdict(set)
            for r in records:
                workers[r["conversation_id"]].add(r["worker"])
            assert all(len(w) == 1 for w in workers.values())
            assert len(set().union(*workers.values())) == 2
    assert turns[()] == turns[("--processes", "2")]


@pytest.mark.slow
def test_session_header_names_the_conversation(child_runner, start_sim, tmp_path):
    dataset = write_conversations(tmp_path / "conv.json", plain_conversations(3, 2))
    for header, expected in (("X-Affinity", True), ("", False)):
        trace = tmp_path / f"trace-{header or 'none'}.jsonl"
        sim = start_sim(*SIM, "--trace-file", trace, "--session-header", "X-Affinity")
        bench(child_runner, sim, dataset, "--num-prompts", "3", "--session-header", header)
        lines = run_trace(trace)
        assert len(lines) == 6
        for line in lines:
            session = line["client_id"].rsplit(":", 1)[0]
            assert line["session"] == (session if expected else None), line
