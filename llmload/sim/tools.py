"""Tool calls (docs/simulator.md, "Tool calls"): a chat request's ``tools`` and ``tool_choice``, answered as vLLM
answers them with a tool parser, and what a completions or chat answer's tokens are made of.

``tool_choice`` ``required`` or a named function always makes a call, ``none`` never does, ``auto`` (the default
with tools) does for a share ``--tool-call-rate`` of requests, drawn from ``--seed`` and the request body; the
function is the named one, else one drawn from the tools the same way. The call's arguments are JSON valid for
the tool's ``parameters`` schema, made by :mod:`llmload.sim.structured` at the request's output length, one piece
per token; a schema it cannot answer is a 400 (as for ``response_format``). A request that makes no call is
answered as without tools: with structured output for its ``response_format``, else the sim's words.

The prompt the engine sees starts with the tools (a chat template puts them in the system prompt), and an
assistant message's earlier tool calls are part of its history (:func:`render_tools`, :func:`render_calls`).
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import orjson

from llmload.sim.config import SimConfig
from llmload.sim.structured import Plan, Unsupported, draw_broken, plan_for
from llmload.sim.text import TOKEN_COUNT, TOKENS

#: compiled ``tools`` values kept, by their JSON text (an agent sends the same tools in every request)
_TOOLSET_CACHE = 32
_CHOICES = ("none", "auto", "required")
_NAMED = 'a named tool is {"type": "function", "function": {"name": "my_function"}}'


class ToolsError(Exception):
    """A request the simulator refuses (its 400): the message, and the field it names."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class Tool:
    """One function a request offers: its name and the plan that makes its arguments."""

    name: str
    plan: Plan


@dataclass(frozen=True)
class Output:
    """What a request's output tokens are: one piece of JSON string body each (None: the sim's words)."""

    pieces: tuple[bytes, ...] | None = None
    #: with a response format and no tool call: "valid" or "broken" (``--invalid-json-rate``)
    structured: str = ""
    reasoning: int = 0
    #: the function the answer calls ('': no tool call)
    tool: str = ""


def output_of(cfg: SimConfig, kind: str, body: dict, raw: bytes, offset: int, output_tokens: int,
              reasoning: int) -> Output:
    """Completions and chat: the output's pieces for a tool call (chat only; the arguments) or a
    ``response_format`` (the JSON answer): reasoning words first, then the JSON, which keeps at least one token.
    :class:`ToolsError` for a format or tools the simulator cannot answer."""
    if kind not in ("completions", "chat"):
        return Output(reasoning=reasoning)
    try:
        plan = plan_for(body.get("response_format"))
    except Unsupported as exc:
        raise ToolsError(str(exc), "response_format") from None
    tool = choose_tool(body, raw, cfg.seed, cfg.tool_call_rate) if kind == "chat" else None
    if tool is not None:
        plan = tool.plan
    if plan is None:  # no response_format, or {"type": "text"}
        return Output(reasoning=reasoning)
    reasoning = min(reasoning, output_tokens - 1)
    broken = tool is None and draw_broken(cfg.invalid_json_rate, cfg.seed, raw)
    words = tuple(TOKENS[(offset + i * 7) % TOKEN_COUNT] for i in range(reasoning))
    pieces = words + plan.pieces(output_tokens - reasoning, offset, broken, first_word=reasoning)
    if tool is not None:
        return Output(pieces, "", reasoning, tool.name)
    return Output(pieces, "broken" if broken else "valid", reasoning)


def choose_tool(body: dict, raw: bytes, seed: int, rate: float) -> Tool | None:
    """The tool this chat request's answer calls, or None (it answers with text or structured output).

    vLLM's rules: ``tool_choice`` needs ``tools`` (unless it is ``none``), defaults to ``auto`` with them, and
    ``required`` with an empty list acts as ``none``; a named tool must be one of the tools. Unless the choice
    is ``none``, every tool's parameters must be a schema the simulator can answer (the same answer, 400 or not,
    whichever tool a request draws)."""
    given = body.get("tools")
    choice = body.get("tool_choice")
    if given is None:
        if choice is not None and choice != "none":
            raise ToolsError("When using `tool_choice`, `tools` must be set.", "tool_choice")
        return None
    toolset = toolset_of(given)
    if choice is None:
        choice = "auto"
    index = toolset.index(choice) if isinstance(choice, dict) else None
    if not isinstance(choice, dict) and choice not in _CHOICES:
        raise ToolsError(f"Invalid value for `tool_choice`: {choice!r}! Only named tools, \"none\", \"auto\" or "
                         f"\"required\" are supported.", "tool_choice")
    if choice == "none" or not toolset.names:
        return None
    plans = toolset.plans()
    rng = random.Random(b"tools %d %d" % (seed, zlib.crc32(raw)))
    if choice == "auto" and not rng.random() < rate:
        return None
    if index is None:
        index = rng.randrange(len(plans))
    return Tool(toolset.names[index], plans[index])


class Toolset:
    """A request's ``tools``, checked: the functions' names and parameter schemas; their plans compiled once."""

    def __init__(self, given: Any) -> None:
        if not isinstance(given, list):
            raise ToolsError(f"'tools' must be a list of tools, got {type(given).__name__}", "tools")
        functions = [_function(i, t) for i, t in enumerate(given)]
        self.names = tuple(name for name, _ in functions)
        self._params = tuple(params for _, params in functions)
        self._plans: tuple[Plan, ...] | None = None
        self._error: ToolsError | None = None

    def index(self, choice: dict) -> int:
        """The position of the tool a named ``tool_choice`` names (a 400 when it names none of them)."""
        function = choice.get("function")
        if choice.get("type", "function") != "function" or not isinstance(function, dict):
            raise ToolsError(f"Invalid value for `tool_choice`: {choice!r}; {_NAMED}", "tool_choice")
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise ToolsError(f"Invalid `name` in `tool_choice`: {name!r}; {_NAMED}", "tool_choice")
        if name not in self.names:
            raise ToolsError(f"The tool specified in `tool_choice` ({name!r}) does not match any of the specified "
                             f"`tools`", "tool_choice")
        return self.names.index(name)

    def plans(self) -> tuple[Plan, ...]:
        """Each tool's argument plan (compiled on first use; a 400 for a schema the simulator cannot answer)."""
        if self._error is not None:
            raise self._error
        if self._plans is None:
            try:
                self._plans = tuple(_plan(i, n, p) for i, (n, p) in enumerate(zip(self.names, self._params, strict=True)))
            except ToolsError as exc:
                self._error = exc
                raise
        return self._plans


def toolset_of(given: Any) -> Toolset:
    """A request's ``tools``, checked once per distinct value (an agent sends the same tools every time)."""
    return _toolset_of(orjson.dumps(given))


@lru_cache(maxsize=_TOOLSET_CACHE)
def _toolset_of(key: bytes) -> Toolset:
    return Toolset(orjson.loads(key))


def _function(i: int, given: Any) -> tuple[str, dict | None]:
    """``tools[i]``'s name and parameters schema; a 400 unless it is a function tool with a name."""
    where = f"tools[{i}]"
    if not isinstance(given, dict) or given.get("type") != "function":
        kind = given.get("type") if isinstance(given, dict) else type(given).__name__
        raise ToolsError(f"{where} must be a function tool ({{\"type\": \"function\", \"function\": {{...}}}}), "
                         f"got {kind!r}", "tools")
    function = given.get("function")
    if not isinstance(function, dict):
        raise ToolsError(f"{where}.function must be an object with a 'name'", "tools")
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise ToolsError(f"{where}.function.name must be a non-empty string, got {name!r}", "tools")
    params = function.get("parameters")
    if params is not None and not isinstance(params, dict):
        raise ToolsError(f"{where}.function.parameters ({name}) must be a JSON Schema object", "tools")
    return name, params


def _plan(i: int, name: str, params: dict | None) -> Plan:
    """The plan of a tool's arguments: JSON for its parameters schema (no schema, or {}: any JSON object)."""
    fmt = ({"type": "json_schema", "json_schema": {"name": name, "schema": params}} if params
           else {"type": "json_object"})
    try:
        plan = plan_for(fmt)
    except Unsupported as exc:
        raise ToolsError(f"tools[{i}].function.parameters ({name}): {exc}", "tools") from None
    assert plan is not None
    return plan


def render_tools(given: Any) -> str:
    """The tools as the prompt's first line (a chat template puts them in the system prompt); '' without."""
    if not given:
        return ""
    return "tools: " + orjson.dumps(given).decode() + "\n"


def render_calls(message: dict) -> str:
    """An assistant message's tool calls as its history holds them (each function's name and arguments)."""
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return ""
    functions = [c.get("function") for c in calls if isinstance(c, dict)]
    return "".join("<tool_call>" + orjson.dumps(f).decode() + "</tool_call>" for f in functions if f)
