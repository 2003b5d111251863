"""The simulator's tool calls (issue 36, docs/simulator.md "Tool calls"): a chat request with ``tools`` is answered
as vLLM with a tool parser answers it. The arguments are JSON valid for the tool's parameters at exactly the
requested length; ``tool_choice`` required, none, named and auto (a share ``--tool-call-rate``, a binomial bound)
decide whether a call is made; the stream opens the call, streams the arguments one piece a token and ends with
``finish_reason: tool_calls`` (also after reasoning, with several tokens a chunk, in every dialect); bad tools are
400s with OpenAI's error body."""

from __future__ import annotations

import json

import orjson
import pytest
from jsonschema import Draft202012Validator

from llmload.sim.config import SimConfig
from llmload.sim.requests import RequestError, RequestParser, render_chat
from llmload.sim.typed_wire import make_wire
from llmload.sim.wire import ToolCallWire

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 30},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "hours": {"type": "array", "items": {"type": "integer", "minimum": 0}, "maxItems": 4},
        "notes": {"type": "array", "items": {"type": "string"}, "minItems": 1},
    },
    "required": ["city", "days", "unit", "hours", "notes"],
    "additionalProperties": False,
}
SEARCH = {"type": "object", "properties": {"query": {"type": "string"}, "exact": {"type": "boolean"}},
          "required": ["query"]}


def tool(name: str, params: dict | None = None) -> dict:
    function: dict = {"name": name, "description": f"the {name} tool"}
    if params is not None:
        function["parameters"] = params
    return {"type": "function", "function": function}


TOOLS = [tool("get_weather", WEATHER), tool("search", SEARCH), tool("now")]
SCHEMAS = {"get_weather": WEATHER, "search": SEARCH, "now": {}}


def body(max_tokens: int = 8, prompt: str = "hi", stream: bool = False, **extra: object) -> dict:
    return {"model": "llmload-sim", "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "ignore_eos": True, "stream": stream, "stream_options": {"include_usage": True} if stream else None,
            "tools": TOOLS, **extra}


def parse(data: dict, config: SimConfig | None = None, kind: str = "chat"):
    return RequestParser(config or SimConfig()).parse(kind, orjson.dumps(data))


def arguments(req) -> str:
    return orjson.loads(b'"' + req.text(req.reasoning_tokens, req.output_tokens - req.reasoning_tokens) + b'"')


def assert_valid(name: str, text: str) -> dict:
    value = json.loads(text)
    assert isinstance(value, dict), text
    Draft202012Validator(SCHEMAS[name]).validate(value)
    return value


# -- the arguments ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["get_weather", "search", "now"])
def test_the_arguments_are_valid_json_for_the_schema_at_every_length_from_1_to_200(name: str) -> None:
    choice = {"type": "function", "function": {"name": name}}
    for tokens in range(1, 201):
        req = parse(body(tokens, prompt=f"p{tokens}", tool_choice=choice))
        assert req.tool == name and req.output_tokens == tokens and req.structured == ""
        assert req.pieces is not None and len(req.pieces) == tokens and all(req.pieces), (tokens, req.pieces)
        assert_valid(name, arguments(req))


def test_without_ignore_eos_the_usual_length_draw_decides_the_arguments_length() -> None:
    config = SimConfig(eos_prob=0.2, seed=3)
    lengths = set()
    for i in range(30):
        data = {**body(50, prompt=f"q{i}", tool_choice="required"), "ignore_eos": False}
        req = parse(data, config)
        text = parse({**data, "tool_choice": "none"}, config)  # the same prompt answered with words
        assert req.tool and len(req.pieces) == req.output_tokens == text.output_tokens < 50
        assert_valid(req.tool, arguments(req))
        lengths.add(req.output_tokens)
    assert len(lengths) > 3, lengths


# -- tool_choice ------------------------------------------------------------------------------------------------


def test_required_always_calls_and_none_never_does() -> None:
    for i in range(50):
        assert parse(body(prompt=f"r{i}", tool_choice="required")).tool in SCHEMAS
        req = parse(body(prompt=f"r{i}", tool_choice="none"))
        assert req.tool == "" and req.pieces is None
    assert parse(body(tool_choice="none", tools=[tool("x", {"type": "string", "pattern": "a+"})])).tool == ""


def test_a_named_tool_is_always_the_one_called() -> None:
    for name in SCHEMAS:
        for i in range(20):
            assert parse(body(prompt=f"n{i}", tool_choice={"type": "function", "function": {"name": name}})).tool == name


def test_the_called_tool_is_drawn_from_the_tools_and_the_draw_is_deterministic() -> None:
    names = [parse(body(prompt=f"d{i}", tool_choice="required")).tool for i in range(300)]
    counts = {n: names.count(n) for n in SCHEMAS}
    assert all(c > 60 for c in counts.values()), counts
    again = [parse(body(prompt=f"d{i}", tool_choice="required")).tool for i in range(300)]
    assert again == names
    other_seed = [parse(body(prompt=f"d{i}", tool_choice="required"), SimConfig(seed=9)).tool for i in range(300)]
    assert other_seed != names


@pytest.mark.parametrize("rate", [0.0, 0.2, 0.5, 1.0])
def test_auto_calls_a_tool_for_about_the_tool_call_rate(rate: float) -> None:
    config = SimConfig(tool_call_rate=rate, seed=11)
    n = 2000
    calls = [parse(body(prompt=f"auto {i}"), config).tool != "" for i in range(n)]  # auto: the default
    share = sum(calls) / n
    assert abs(share - rate) <= 4 * (rate * (1 - rate) / n) ** 0.5, share
    again = [parse(body(prompt=f"auto {i}"), config).tool != "" for i in range(200)]
    assert again == calls[:200]  # the draw comes from the seed and the body: the same requests, the same calls
    explicit = [parse(body(prompt=f"auto {i}", tool_choice="auto"), config).tool != "" for i in range(n)]
    assert abs(sum(explicit) / n - rate) <= 4 * (rate * (1 - rate) / n) ** 0.5


def test_the_auto_draw_does_not_follow_the_broken_json_draw() -> None:
    config = SimConfig(tool_call_rate=0.5, invalid_json_rate=0.5, seed=5)
    fmt = {"type": "json_object"}
    pairs = []
    for i in range(400):
        req = parse(body(prompt=f"x{i}", response_format=fmt), config)
        pairs.append((req.tool != "", req.structured))
    calls = [c for c, _ in pairs]
    assert 120 < sum(calls) < 280
    # structured output wins where no call is made; a call carries no verdict
    assert all(s == "" for c, s in pairs if c) and all(s in ("valid", "broken") for c, s in pairs if not c)
    broken = [s == "broken" for c, s in pairs if not c]
    assert 0.3 < sum(broken) / len(broken) < 0.7


def test_completions_ignore_tools_and_no_tools_means_text() -> None:
    req = parse({"model": "llmload-sim", "prompt": "hi", "max_tokens": 5, "tools": TOOLS, "tool_choice": "required"},
                kind="completions")
    assert req.tool == "" and req.pieces is None
    assert parse({**body(), "tools": None}).tool == ""
    assert parse(body(tools=[], tool_choice="required")).tool == ""  # vLLM: required with no tools acts as none
    assert parse(body(tools=[])).tool == ""


def test_the_tools_and_earlier_calls_are_part_of_the_prompt() -> None:
    plain = parse({**body(), "tools": None})
    with_tools = parse(body(tool_choice="none"))
    assert with_tools.prompt_tokens > plain.prompt_tokens + 50
    call = {"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"query": "q"}'}}
    turn1 = [{"role": "user", "content": "find q"}]
    turn2 = [*turn1, {"role": "assistant", "content": None, "tool_calls": [call]},
             {"role": "tool", "tool_call_id": "c1", "content": "found"}]
    text = render_chat(turn2)
    assert text.startswith(render_chat(turn1)) and '"arguments":"{\\"query\\": \\"q\\"}"' in text and "found" in text
    assert render_chat(turn1) == "user: find q\n"


# -- bad requests -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("extra", "param", "words"), [
    ({"tools": {"type": "function"}}, "tools", "must be a list"),
    ({"tools": ["get_weather"]}, "tools", "tools[0] must be a function tool"),
    ({"tools": [{"type": "retrieval"}]}, "tools", "tools[0] must be a function tool"),
    ({"tools": [{"type": "function"}]}, "tools", "tools[0].function must be an object"),
    ({"tools": [{"type": "function", "function": {"description": "x"}}]}, "tools", "name must be a non-empty"),
    ({"tools": [tool("a"), tool("")]}, "tools", "tools[1].function.name"),
    ({"tools": [{"type": "function", "function": {"name": "a", "parameters": []}}]}, "tools", "JSON Schema object"),
    ({"tools": [tool("a", {"type": "strin"})]}, "tools", "invalid JSON schema"),
    ({"tools": [tool("a", {"type": "string", "pattern": "^a+$"})]}, "tools", "'pattern'"),
    ({"tool_choice": "always"}, "tool_choice", "Invalid value for `tool_choice`"),
    ({"tool_choice": {"type": "function", "function": {"name": "fly"}}}, "tool_choice", "does not match any"),
    ({"tool_choice": {"type": "function", "function": {}}}, "tool_choice", "Invalid `name`"),
    ({"tool_choice": {"type": "function"}}, "tool_choice", "Invalid value for `tool_choice`"),
    ({"tools": None, "tool_choice": "required"}, "tool_choice", "`tools` must be set"),
])
def test_bad_tools_are_a_400_with_openai_s_error_body(extra: dict, param: str, words: str) -> None:
    with pytest.raises(RequestError) as caught:
        parse(body(**extra))
    assert caught.value.status == 400
    error = orjson.loads(caught.value.body)["error"]
    assert error["type"] == "BadRequestError" and error["param"] == param and error["code"] == 400
    assert words in error["message"], error


def test_a_schema_the_sim_cannot_answer_is_refused_whichever_tool_a_request_draws() -> None:
    tools = [tool("ok", SEARCH), tool("bad", {"type": "string", "pattern": "a+"})]
    config = SimConfig(tool_call_rate=0.5)
    for i in range(20):
        with pytest.raises(RequestError):
            parse(body(prompt=f"b{i}", tools=tools), config)


# -- the wire ---------------------------------------------------------------------------------------------------


def events(req, dialect: str = "vllm", per_chunk: int = 1) -> list[dict]:
    """The SSE ``data:`` objects of the request's stream, as the server sends them (the first chunk one token)."""
    wire = make_wire(req, dialect, "chatcmpl-test-1", 0)
    assert isinstance(wire, ToolCallWire)
    raw = wire.head_events() + wire.first_events()
    generated = 0
    while generated < req.output_tokens:
        n = 1 if generated == 0 else min(per_chunk, req.output_tokens - generated)
        raw += wire.token_event(req.text(generated, n), generated + n, generated + n >= req.output_tokens, n)
        generated += n
    raw += wire.tail_events()
    out = []
    for block in raw.decode().split("\n\n"):
        if block.startswith("data: ") and block != "data: [DONE]":
            out.append(json.loads(block[6:]))
    return out


def reassemble(chunks: list[dict]) -> tuple[str, str, str, str, int | None, str]:
    """(id, name, arguments, finish_reason, usage completion tokens, reasoning) as a client puts them together."""
    call_id = name = args = finish = reasoning = ""
    usage = None
    for chunk in chunks:
        if chunk.get("usage"):
            usage = chunk["usage"]["completion_tokens"]
        for choice in chunk["choices"]:
            delta = choice["delta"]
            assert not delta.get("content"), delta
            reasoning += delta.get("reasoning_content") or ""
            for call in delta.get("tool_calls") or []:
                assert call["index"] == 0
                call_id += call.get("id", "")
                name += call.get("function", {}).get("name", "")
                args += call.get("function", {}).get("arguments", "")
            finish = choice["finish_reason"] or finish
    return call_id, name, args, finish, usage, reasoning


@pytest.mark.parametrize("dialect", ["vllm", "max", "sglang", "transformers"])
@pytest.mark.parametrize(("reasoning", "per_chunk"), [(0, 1), (0, 3), (4, 1), (4, 3), (2, 5)])
def test_the_stream_opens_the_call_then_streams_the_arguments_a_piece_a_token(dialect: str, reasoning: int,
                                                                              per_chunk: int) -> None:
    config = SimConfig(reasoning_tokens=reasoning, tokens_per_chunk=per_chunk, dialect=dialect)
    for tokens in (1, 2, 5, 9, 30):
        data = body(tokens, stream=True, tool_choice={"type": "function", "function": {"name": "get_weather"}})
        if dialect == "transformers":
            del data["ignore_eos"]  # transformers serve refuses the field (without --eos-prob: max_tokens anyway)
        req = parse(data, config)
        chunks = events(req, dialect, per_chunk)
        call_id, name, args, finish, usage, thought = reassemble(chunks)
        assert name == "get_weather" and call_id.startswith("chatcmpl-tool-") and len(call_id) == 14 + 32
        assert_valid(name, args)
        assert finish == "tool_calls"
        assert usage == tokens
        assert len(thought.split()) == min(reasoning, tokens - 1)
        arg_chunks = [c for c in chunks if c["choices"] and any(
            t.get("function", {}).get("arguments") for t in c["choices"][0]["delta"].get("tool_calls") or [])]
        if per_chunk == 1:
            assert len(arg_chunks) == tokens - min(reasoning, tokens - 1)  # one piece a token
        opening = [c for c in chunks if c["choices"] and "id" in (c["choices"][0]["delta"].get("tool_calls")
                                                                    or [{}])[0]]
        assert len(opening) == 1 and opening[0]["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"] == ""
        if dialect in ("vllm", "max") and not reasoning:
            assert opening[0]["choices"][0]["delta"]["role"] == "assistant" and chunks[0] is opening[0]


def test_the_unstreamed_answer_holds_the_call_and_null_content() -> None:
    req = parse(body(12, tool_choice="required"), SimConfig(reasoning_tokens=3))
    wire = make_wire(req, "vllm", "chatcmpl-test-2", 0)
    answer = json.loads(wire.full_json(req.text(0, req.output_tokens)))
    choice = answer["choices"][0]
    message = choice["message"]
    assert choice["finish_reason"] == "tool_calls" and message["content"] is None and message["role"] == "assistant"
    assert len(message["reasoning_content"].split()) == 3
    (call,) = message["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("chatcmpl-tool-") and call["function"]["name"] == req.tool
    assert_valid(req.tool, call["function"]["arguments"])
    assert answer["usage"]["completion_tokens"] == 12 and answer["object"] == "chat.completion"


def test_tool_call_ids_differ_between_requests() -> None:
    req = parse(body(tool_choice="required"))
    ids = {json.loads(make_wire(req, "vllm", f"chatcmpl-a-{i}", 0).full_json(req.text(0, 8)))["choices"][0]
           ["message"]["tool_calls"][0]["id"] for i in range(50)}
    assert len(ids) == 50


def test_a_request_without_a_call_keeps_its_usual_wire() -> None:
    req = parse(body(tool_choice="none"))
    assert not isinstance(make_wire(req, "vllm", "chatcmpl-x", 0), ToolCallWire)
