"""Tool calls end to end against the simulator: bench counts the tool calls of every answer, a streamed tool
call's first delta is its TTFT when the answer has no content, and a multi-turn replay answers tool calls with
``tool`` messages and goes on (every follow-up carries the assistant's call and the simulated result)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_conversations import (
    bench,
    by_conversation,
    plain_conversations,
    run_trace,
    write_conversations,
)

from llmload.core.tools import tool_result

pytestmark = pytest.mark.slow

TOOLS = [{"type": "function", "function": {"name": "read_file", "description": "read a file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}, "lines": {"type": "integer"}},
    "required": ["path"]}}}]


def _tools(tmp_path: Path) -> Path:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(TOOLS))
    return path


def test_bench_counts_tool_calls_and_ttft_is_the_first_tool_call_token(child_runner, tmp_path: Path) -> None:
    run = child_runner.bench("--backend", "openai-chat", "--tokenizer", "builtin", "--dataset-name", "random",
                             "--random-input-len", "32", "--random-output-len", "12", "--num-prompts", "20",
                             "--ignore-eos", "--tools", str(_tools(tmp_path)), "--tool-choice", "required",
                             "--sim-args", "--ttft-ms 20 --itl-ms 2", "--save-result", "--result-filename", "r.json",
                             "--disable-tqdm", timeout=120)
    assert run.returncode == 0, run.describe()
    result, records = run.result(), run.records()
    assert result["completed"] == 20 and result["tool_calls"] == 20 and result["tool_call_answers"] == 20
    assert "Tool calls (answers with one):" in run.stdout
    for r in records:
        assert r["tool_calls"] == 1 and r["generated_text"] == "", r["request_id"]
        call = r["tool_call_items"][0]
        assert call["function"]["name"] == "read_file" and "path" in json.loads(call["function"]["arguments"])
        assert r["output_tokens"] == 12 and len(r["chunk_times"]) >= 12  # every argument piece is a token
        assert r["first_token"] == r["chunk_times"][0]
        assert r["first_token"] - r["start"] >= 0.015  # the simulator's 20 ms to the first (tool-call) token


def test_a_conversation_answers_tool_calls_and_goes_on(child_runner, start_sim, tmp_path: Path) -> None:
    dataset = write_conversations(tmp_path / "conv.json", plain_conversations(3, 2))
    trace = tmp_path / "trace.jsonl"
    sim = start_sim("--ttft-ms", "2", "--itl-ms", "0.5", "--tool-call-rate", "1", "--trace-file", trace,
                    "--trace-prompts")
    run = bench(child_runner, sim, dataset, "--num-prompts", "3", "--backend", "openai-chat",
                "--tools", str(_tools(tmp_path)), "--max-tool-rounds", "2", "--tool-latency", "0.01",
                "--output-len", "8")
    records = run.records()
    # every answer calls a tool: each of the 2 turns is its request and 2 follow-ups
    assert len(records) == 3 * 2 * 3 and all(r["success"] for r in records)
    assert sorted({(r["turn"], r["tool_round"]) for r in records}) == [(t, k) for t in (1, 2) for k in (0, 1, 2)]
    by_id = {r["request_id"]: r for r in records}
    for session, lines in by_conversation(run_trace(trace)).items():
        assert [line["client_id"] for line in lines] == [f"{session}:{t}{suffix}" for t in (1, 2)
                                                         for suffix in ("", ".1", ".2")]
        for line in lines:
            if not line["client_id"].endswith((".1", ".2")):
                continue
            before = line["client_id"].rsplit(".", 1)[0] if line["client_id"].endswith(".1") else \
                line["client_id"][:-2] + ".1"
            roles = [m["role"] for m in line["messages"]]
            assert roles[-2:] == ["assistant", "tool"], roles
            assert line["messages"][-1]["content"] == tool_result(by_id[before]["tool_call_items"][0])
    ends = {r["conversation_end"] for r in records if r["turn"] == 2 and r["tool_round"] == 2}
    assert ends == {"completed"}
