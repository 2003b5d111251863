"""Tool calling (``--tools FILE``, ``--tool-choice``, ``--tool-latency``): OpenAI tool definitions in every chat
request, and the simulated tool results a multi-turn replay answers tool calls with (docs/conversations.md,
"Tool calls").

Decided once, before the first request: :func:`tools_from` reads and checks the file (a ConfigError, one line,
for a missing or malformed one, or a dialect without chat), :func:`tool_choice_from` the choice. The answers'
tool calls are read by :mod:`llmload.client.toolcalls` after each response; :func:`tool_result` is what a
replayed conversation sends back for one call, the same text for the same call id on every run.
"""

from __future__ import annotations

import json
import random
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmload.common.errors import ConfigError

#: the choices ``--tool-choice`` names as words; anything else is a tool's name
CHOICES = ("auto", "required", "none")
#: words a simulated tool result is made of
_RESULT_WORDS = ("ok", "found", "file", "line", "match", "value", "done", "path", "test", "passed", "error",
                 "none", "read", "wrote", "bytes", "status")


def load_tools(path: str | Path) -> list[dict[str, Any]]:
    """The tool definitions of ``path``: a JSON list of OpenAI tools (``{"type": "function", "function": {"name",
    "description", "parameters"}}``), or ``{"tools": [...]}``; a bare function (``{"name", "parameters"}``) is
    wrapped. ConfigError naming the file and the entry for anything else."""
    where = f"--tools {path}"
    try:
        data = json.loads(Path(path).expanduser().read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{where}: no such file") from None
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read it: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    if isinstance(data, dict) and isinstance(data.get("tools"), list):
        data = data["tools"]
    if not isinstance(data, list) or not data:
        raise ConfigError(f"{where}: expected a non-empty JSON list of OpenAI tool definitions")
    return [_tool(entry, f"{where}: tools[{i}]") for i, entry in enumerate(data)]


def _tool(entry: Any, at: str) -> dict[str, Any]:
    if isinstance(entry, dict) and "function" not in entry and "name" in entry:
        entry = {"type": "function", "function": entry}
    if not isinstance(entry, dict) or entry.get("type", "function") != "function":
        raise ConfigError(f"{at}: expected {{\"type\": \"function\", \"function\": {{\"name\", \"parameters\"}}}}")
    function = entry.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
        raise ConfigError(f"{at}: a function tool needs a \"name\"")
    parameters = function.get("parameters", {"type": "object", "properties": {}})
    if not isinstance(parameters, dict):
        raise ConfigError(f"{at} ({function['name']}): \"parameters\" must be a JSON Schema object")
    return {"type": "function", "function": {**function, "parameters": parameters}}


def tool_choice(value: str, tools: list[dict[str, Any]]) -> str | dict[str, Any]:
    """``--tool-choice``'s request field: ``auto``, ``required``, ``none``, or a tool's name (OpenAI's
    ``{"type": "function", "function": {"name": ...}}``), which must be one of ``tools``."""
    if value in CHOICES:
        return value
    names = [t["function"]["name"] for t in tools]
    if value not in names:
        raise ConfigError(f"--tool-choice {value!r}: expected auto, required, none or a tool's name "
                          f"({', '.join(names)})")
    return {"type": "function", "function": {"name": value}}


@dataclass(frozen=True)
class ToolOptions:
    """What every chat request carries (``tools``, ``tool_choice``); None fields are left out."""

    tools: list[dict[str, Any]] | None = None
    choice: str | dict[str, Any] | None = None

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.tools:
            out["tools"] = self.tools
            if self.choice is not None:
                out["tool_choice"] = self.choice
        return out


def tool_options_from(options: Any) -> ToolOptions:
    """``--tools`` and ``--tool-choice`` (a ConfigError, one line, before the first request)."""
    from llmload.client.backends import get_backend

    path = getattr(options, "tools", None)
    choice = getattr(options, "tool_choice", None)
    if not path:
        if choice:
            raise ConfigError("--tool-choice needs --tools FILE (the tool definitions to choose from)")
        return ToolOptions()
    backend = getattr(options, "backend", "")
    if backend and not get_backend(backend).chat:
        raise ConfigError(f"--tools sends OpenAI tool definitions in chat requests: --backend {backend} is not a chat "
                          "dialect (use --backend openai-chat)")
    tools = load_tools(path)
    return ToolOptions(tools, tool_choice(choice, tools) if choice else None)


def tool_result(call: dict[str, Any], words: int = 24) -> str:
    """A simulated result for one tool call: a small JSON object, the same for the same call id and name."""
    function = call.get("function") or {}
    seed = zlib.crc32(f"{call.get('id', '')}/{function.get('name', '')}".encode())
    rng = random.Random(seed)
    return json.dumps({"tool": function.get("name", ""), "status": "ok",
                       "output": " ".join(rng.choice(_RESULT_WORDS) for _ in range(words))})


def tool_latency(spec: str) -> Any:
    """``--tool-latency``'s distribution (SECONDS, ``exp:MEAN``, ``uniform:LOW:HIGH``): a
    :class:`~llmload.core.cancel.CancelAfter` of seconds; ConfigError for anything else."""
    from llmload.core.cancel import CancelAfter

    return CancelAfter.parse(spec or "", "--tool-latency", tokens_allowed=False)
