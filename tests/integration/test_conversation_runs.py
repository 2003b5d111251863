"""Conversations against the simulator's prefix cache and reasoning output, and through ``locust -f
locustfiles/multiturn.py`` (headless, and the web UI's LLM tab): checked against the simulator's trace."""

from __future__ import annotations

import json
from collections import defaultdict
from statistics import median

import pytest
import test_webui
from test_conversations import BASE, by_conversation, run_trace, words, write_conversations
from test_webui import script

from tests.support import is_run_request

#: fixed timing with a prefill cost: 20 ms + 0.1 ms per prompt token not in the prefix cache (the simulator
#: counts about 4 characters a token)
PREFILL = ("--ttft-ms", "20", "--itl-ms", "2", "--prefill-ms-per-token", "0.1", "--trace-prompts")


def document_conversations(count: int) -> list:
    """A long pasted document (about 900 tokens, under vLLM's 1024-token first-turn filter), then short follow-up questions: the shape a prefix cache is
    for. Each conversation's document is its own (no hits across conversations)."""
    out = []
    for c in range(count):
        turns = [("human", f"document {c}: " + words(220, c)), ("gpt", "summary " + words(20, c + 1))]
        for t in range(1, 4):
            turns += [("human", f"follow-up {c}.{t} " + words(10, c + t)), ("gpt", "answer " + words(20, c + t))]
        out.append(turns)
    return out


def ttft_by_turn(records: list[dict]) -> dict[int, float]:
    by_turn = defaultdict(list)
    for r in records:
        by_turn[r["turn"]].append(r["first_token"] - r["start"])
    return {turn: median(v) for turn, v in by_turn.items()}


@pytest.mark.slow
def test_prefix_cache_makes_later_turns_cheaper_and_cached_tokens_match_the_server(child_runner, start_sim,
                                                                                     tmp_path):
    dataset = write_conversations(tmp_path / "docs.json", document_conversations(6))
    results = {}
    for cache in ("on", "off"):
        trace = tmp_path / f"{cache}.jsonl"
        sim_cache = ("--prefix-cache-tokens", "200000") if cache == "on" else ()
        sim = start_sim(*PREFILL, *sim_cache, "--trace-file", trace)
        run = child_runner.bench("--base-url", sim.url, "--dataset-path", str(dataset), *BASE, "--num-prompts", "6",
                                 "--output-len", "8", "--request-rate", "10", timeout=180)
        assert run.returncode == 0, run.describe()
        records = run.records()
        assert len(records) == 24 and all(r["success"] for r in records)
        server = {t["client_id"]: t for t in run_trace(trace)}
        results[cache] = (records, server, run.result())
    records, server, result = results["on"]
    for r in records:
        assert r["cached_tokens"] == server[r["request_id"]]["cached_tokens"], r["request_id"]
    assert all(r["cached_tokens"] > 0 for r in records if r["turn"] >= 2)
    ttft = ttft_by_turn(records)
    later = median(r["first_token"] - r["start"] for r in records if r["turn"] >= 3)
    # turn 1 prefills ~450 simulator tokens (~45 ms); a cached turn >= 3 prefills ~50 (~5 ms): far above the noise
    assert later < ttft[1] - 0.015, ttft
    assert result["prefix_cache"]["cached_tokens"] == sum(r["cached_tokens"] for r in records)
    assert [row["turn"] for row in result["turns"]][:4] == [1, 2, 3, 4]

    records, server, result = results["off"]
    assert all(r["cached_tokens"] is None for r in records)
    assert all(server[r["request_id"]]["cached_tokens"] == 0 for r in records)
    ttft = ttft_by_turn(records)
    later = median(r["first_token"] - r["start"] for r in records if r["turn"] >= 3)
    assert later > ttft[1], ttft  # longer history, nothing cached: dearer than turn 1
    assert "prefix_cache" not in result


@pytest.mark.slow
def test_reasoning_stream_ttft_and_time_to_first_answer_token(child_runner, start_sim, tmp_path):
    dataset = write_conversations(tmp_path / "conv.json", document_conversations(3))
    trace = tmp_path / "trace.jsonl"
    sim = start_sim("--ttft-ms", "20", "--itl-ms", "10", "--reasoning-tokens", "6", "--trace-prompts",
                    "--trace-file", trace)
    run = child_runner.bench("--base-url", sim.url, "--dataset-path", str(dataset), *BASE, "--num-prompts", "3",
                             "--output-len", "12", "--history", "live", timeout=180)
    assert run.returncode == 0, run.describe()
    records = run.records()
    server = {t["client_id"]: t for t in run_trace(trace)}
    for r in records:
        line = server[r["request_id"]]
        assert r["reasoning_tokens"] == 6 == line["reasoning_tokens"]
        # the answer starts with the 7th token: the client's gap between its first token and its first answer
        # token is the server's gap between sending them, give or take scheduling noise. (The simulator keeps
        # an absolute schedule, 10 ms x 6 apart, so a first chunk sent late on a busy machine shortens the gap:
        # only that there is one is checked of the server.)
        client_gap = r["first_answer_token"] - r["first_token"]
        server_gap = line["chunks"][6] - line["chunks"][0]
        assert server_gap >= 0.01 and abs(client_gap - server_gap) < 0.025, (client_gap, server_gap)
        assert r["reasoning_text"] and r["reasoning_text"] not in r["generated_text"]
    # reasoning stays out of the history without --keep-reasoning
    for line in server.values():
        assert not any("<think>" in m["content"] for m in line["messages"])
    result = run.result()
    assert result["reasoning"]["requests"] == len(records)
    assert result["reasoning"]["total_reasoning_tokens"] == 6 * len(records)
    assert "Reasoning" in run.stdout and "TTFAT" in run.stdout


@pytest.mark.slow
def test_keep_reasoning_puts_it_back_into_the_history(child_runner, start_sim, tmp_path):
    dataset = write_conversations(tmp_path / "conv.json", document_conversations(2))
    trace = tmp_path / "trace.jsonl"
    sim = start_sim("--ttft-ms", "5", "--itl-ms", "1", "--reasoning-tokens", "4", "--trace-prompts",
                    "--trace-file", trace)
    run = child_runner.bench("--base-url", sim.url, "--dataset-path", str(dataset), *BASE, "--num-prompts", "2",
                             "--output-len", "8", "--history", "live", "--keep-reasoning", timeout=180)
    assert run.returncode == 0, run.describe()
    records = {r["request_id"]: r for r in run.records()}
    for rid, line in {t["client_id"]: t for t in run_trace(trace)}.items():
        session, turn = rid.rsplit(":", 1)
        for k in range(1, int(turn)):
            previous = records[f"{session}:{k}"]
            expected = f"<think>{previous['reasoning_text']}</think>{previous['generated_text']}"
            assert line["messages"][2 * k - 1]["content"] == expected


@pytest.mark.parametrize("processes", [(), ("--processes", "2")], ids=["one-process", "processes-2"])
@pytest.mark.slow
def test_locust_headless_replays_conversations(child_runner, start_sim, tmp_path, processes):
    dataset = write_conversations(tmp_path / "docs.json", document_conversations(4))
    trace = tmp_path / "trace.jsonl"
    sim = start_sim("--ttft-ms", "10", "--itl-ms", "2", "--trace-prompts", "--trace-file", trace)
    out = tmp_path / "records.jsonl"
    run = child_runner.locust("-f", "locustfiles/multiturn.py", "--headless", "--host", sim.url, "-u", "2", "-r",
                              "2", "-t", "120s", "--tokenizer", "builtin", "--dataset-path", str(dataset),
                              "--num-prompts", "4", "--max-tokens", "8", "--llm-records", str(out), *processes,
                              timeout=180)
    assert run.returncode == 0, run.describe()
    assert "Traceback" not in run.stderr, run.describe()
    records = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    assert sorted((r["conversation_id"], r["turn"]) for r in records) == [
        (f"c{c}", t) for c in range(4) for t in range(1, 5)]
    assert "Conversations" in run.stdout + run.stderr
    lines = by_conversation([t for t in run_trace(trace) if is_run_request(t["client_id"])])
    assert len(lines) == 4 and all(len(t) == 4 for t in lines.values())
    for turns in lines.values():
        assert [len(t["messages"]) for t in turns] == [1, 3, 5, 7]
    if processes:  # a conversation stays on one worker
        workers = defaultdict(set)
        for r in records:
            workers[r["conversation_id"]].add(r["worker"])
        assert all(len(w) == 1 for w in workers.values()) and len(set().union(*workers.values())) == 2


start_web = test_webui.start_web  # the fixture


@pytest.mark.slow
def test_the_llm_tab_shows_per_turn_rows(start_sim, start_web, tmp_path):
    dataset = write_conversations(tmp_path / "docs.json", document_conversations(6))
    sim = start_sim("--ttft-ms", "10", "--itl-ms", "2")
    web = start_web(script("locust"), "-f", "locustfiles/multiturn.py", "--host", sim.url, "--tokenizer", "builtin",
                    "--dataset-path", str(dataset), "--num-prompts", "6", "--max-tokens", "8")
    resp = web.http.post("/swarm", data={"user_count": "3", "spawn_rate": "3", "host": sim.url})
    assert resp.json()["success"], resp.text
    live = web.wait_for("rows for four turns", lambda d: len(d["run"].get("turns") or []) >= 4, timeout=60)
    rows = live["run"]["turns"]
    assert [row["turn"] for row in rows[:4]] == [1, 2, 3, 4]
    assert all(row["requests"] >= 1 and row["ttft_p50_ms"] >= 10.0 for row in rows[:4])
    web.http.post("/stop")
    web.wait_for("the test to stop", lambda d: d["state"] == "stopped")
