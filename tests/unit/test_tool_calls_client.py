"""Tool calls read back from answers (``llmload.client.toolcalls``) and the ``--tools`` options
(``llmload.core.tools``): streamed pieces reassemble by index, a whole answer's calls are read, the tool file and
the choice are checked before a run, a simulated result is the same for the same call."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from llmload.client.toolcalls import response_tool_calls, streamed_tool_calls
from llmload.common.errors import ConfigError
from llmload.core.tools import tool_latency, tool_options_from, tool_result

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def chunk(delta: dict, finish: str | None = None) -> tuple[float, bytes]:
    data = {"id": "x", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return 0.0, b"data: " + json.dumps(data).encode() + b"\n"


def test_streamed_pieces_reassemble_by_index() -> None:
    lines = [
        chunk({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                                                     "function": {"name": "get_weather", "arguments": ""}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"ci'}}]}),
        chunk({"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
                               "function": {"name": "lookup", "arguments": "{}"}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'ty": "Oslo"}'}}]}),
        chunk({"content": "plain text, no tools"}),
        chunk({}, "tool_calls"),
        (0.0, b"data: [DONE]\n"),
    ]
    calls = streamed_tool_calls(lines)
    assert [c["id"] for c in calls] == ["call_a", "call_b"]
    assert calls[0]["function"] == {"name": "get_weather", "arguments": '{"city": "Oslo"}'}
    assert json.loads(calls[1]["function"]["arguments"]) == {}
    assert streamed_tool_calls([chunk({"content": "hi"}), (0.0, b": ping\n"), (0.0, b"data: {bad\n")]) == []


def test_a_whole_answer_s_tool_calls() -> None:
    body = json.dumps({"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Rome"}'}}]},
        "finish_reason": "tool_calls"}]}).encode()
    assert response_tool_calls(body) == [{"id": "call_1", "type": "function",
                                          "function": {"name": "get_weather", "arguments": '{"city":"Rome"}'}}]
    assert response_tool_calls(b'{"choices": [{"message": {"content": "hi"}}]}') == []
    assert response_tool_calls(b"not json") == []


def _opts(tmp_path: Path, tools: object, choice: str | None = None, backend: str = "openai-chat"):
    path = tmp_path / "tools.json"
    path.write_text(tools if isinstance(tools, str) else json.dumps(tools))
    return SimpleNamespace(tools=str(path), tool_choice=choice, backend=backend)


def test_the_tools_file_and_the_choice(tmp_path: Path) -> None:
    body = tool_options_from(_opts(tmp_path, [WEATHER], "get_weather")).body()
    assert body == {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
    bare = tool_options_from(_opts(tmp_path, {"tools": [{"name": "noop"}]}, "required")).body()
    assert bare["tools"][0]["function"]["name"] == "noop" and bare["tool_choice"] == "required"
    assert tool_options_from(SimpleNamespace(tools=None, tool_choice=None, backend="vllm")).body() == {}
    bad = {"not json": "[{", "empty": [], "no name": [{"type": "function", "function": {}}],
           "bad parameters": [{"type": "function", "function": {"name": "x", "parameters": 3}}]}
    for tools in bad.values():
        with pytest.raises(ConfigError, match="--tools"):
            tool_options_from(_opts(tmp_path, tools))
    with pytest.raises(ConfigError, match="--tool-choice 'nope'"):
        tool_options_from(_opts(tmp_path, [WEATHER], "nope"))
    with pytest.raises(ConfigError, match="not a chat dialect"):
        tool_options_from(_opts(tmp_path, [WEATHER], backend="vllm"))
    with pytest.raises(ConfigError, match="--tool-choice needs --tools"):
        tool_options_from(SimpleNamespace(tools=None, tool_choice="auto", backend="openai-chat"))


def test_tool_results_and_latencies() -> None:
    call = {"id": "call_1", "function": {"name": "get_weather", "arguments": "{}"}}
    assert tool_result(call) == tool_result(dict(call)) != tool_result({**call, "id": "call_2"})
    assert json.loads(tool_result(call))["tool"] == "get_weather"
    assert tool_latency("0.5").args == (0.5,) and tool_latency("exp:0.2").distribution == "exp"
    for bad in ("soon", "tokens:5", "uniform:2:1"):
        with pytest.raises(ConfigError, match="--tool-latency"):
            tool_latency(bad)
