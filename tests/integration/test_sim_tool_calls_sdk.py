"""The official ``openai`` SDK reads ``llmload sim``'s tool calls (issue 36): its streaming helper reassembles a
streamed call (the name, arguments valid for the tool's schema, ``finish_reason: tool_calls``, usage counting one
token a piece), a non-streamed call comes back in ``message.tool_calls``, ``tool_choice: none`` answers with
text, the trace names the tool called, and a bad ``--tool-call-rate`` is one line and exit 2."""

from __future__ import annotations

import json
import time
from pathlib import Path

import openai
import pytest
from jsonschema import Draft202012Validator

MODEL = "sim-tools"
WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 40},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "hours": {"type": "array", "items": {"type": "integer"}, "maxItems": 3},
    },
    "required": ["city", "days", "unit", "hours"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "the forecast", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "search", "description": "search the web", "parameters": {
        "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}},
]
MESSAGES = [{"role": "user", "content": "What is the weather in Lisbon?"}]


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tools") / "trace.jsonl"


@pytest.fixture(scope="module")
def client(start_sim_module, trace: Path):
    sim = start_sim_module("--ttft-ms", "5", "--itl-ms", "1", "--model", MODEL, "--seed", "3",
                           "--tool-call-rate", "1", "--trace-file", str(trace))
    c = openai.OpenAI(base_url=f"{sim.url}/v1", api_key="x", max_retries=0, timeout=30)
    yield c
    c.close()


def check_call(call, name: str) -> dict:
    assert call.type == "function" and call.id.startswith("chatcmpl-tool-")
    assert call.function.name == name
    arguments = json.loads(call.function.arguments)
    Draft202012Validator(WEATHER if name == "get_weather" else TOOLS[1]["function"]["parameters"]).validate(arguments)
    return arguments


def trace_lines(trace: Path, count: int) -> list[dict]:
    deadline = time.monotonic() + 5
    while True:  # the line is written when the request ends, a moment after the client has its answer
        lines = [json.loads(line) for line in trace.read_text().splitlines()] if trace.exists() else []
        if len(lines) >= count or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


@pytest.mark.slow
def test_the_sdk_streaming_helper_reassembles_a_streamed_tool_call(client, trace: Path) -> None:
    tokens = 40
    with client.chat.completions.stream(
        model=MODEL, messages=MESSAGES, tools=TOOLS, max_tokens=tokens, stream_options={"include_usage": True},
        tool_choice={"type": "function", "function": {"name": "get_weather"}}, extra_body={"ignore_eos": True},
    ) as stream:
        events = list(stream)
        final = stream.get_final_completion()
    kinds = [event.type for event in events]
    assert "tool_calls.function.arguments.delta" in kinds and "tool_calls.function.arguments.done" in kinds
    assert "content.delta" not in kinds
    (choice,) = final.choices
    assert choice.finish_reason == "tool_calls"
    assert not choice.message.content
    (call,) = choice.message.tool_calls
    check_call(call, "get_weather")
    assert final.usage is not None and final.usage.completion_tokens == tokens
    pieces = [e.arguments_delta for e in events if e.type == "tool_calls.function.arguments.delta"]
    assert len([p for p in pieces if p]) == tokens and "".join(pieces) == call.function.arguments  # a piece a token
    line = trace_lines(trace, 1)[-1]
    assert line["tool_call"] == "get_weather" and line["completion_tokens"] == tokens


@pytest.mark.slow
def test_a_non_streamed_required_call_and_none_answers_with_text(client) -> None:
    answer = client.chat.completions.create(model=MODEL, messages=MESSAGES, tools=TOOLS, tool_choice="required",
                                            max_tokens=25, extra_body={"ignore_eos": True})
    (choice,) = answer.choices
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    check_call(call, call.function.name)
    assert call.function.name in ("get_weather", "search") and answer.usage.completion_tokens == 25
    # --tool-call-rate 1: auto (the default) calls too; none never does
    auto = client.chat.completions.create(model=MODEL, messages=MESSAGES, tools=TOOLS, max_tokens=10)
    assert auto.choices[0].finish_reason == "tool_calls" and len(auto.choices[0].message.tool_calls) == 1
    text = client.chat.completions.create(model=MODEL, messages=MESSAGES, tools=TOOLS, tool_choice="none",
                                          max_tokens=10, extra_body={"ignore_eos": True})
    assert text.choices[0].message.tool_calls is None and len(text.choices[0].message.content.split()) == 10


@pytest.mark.slow
def test_a_bad_tool_choice_is_a_400_the_sdk_raises(client) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL, messages=MESSAGES, tools=TOOLS, max_tokens=5,
                                       tool_choice={"type": "function", "function": {"name": "fly"}})
    assert "does not match any" in str(caught.value)


def test_the_simulator_refuses_a_bad_tool_call_rate(cli) -> None:
    run = cli("sim", "--port", "0", "--tool-call-rate", "1.5")
    assert run.returncode == 2 and "listening" not in run.stdout
    errors = [line for line in run.stderr.splitlines() if ": error:" in line]
    assert len(errors) == 1 and "--tool-call-rate" in errors[0], run.stderr
