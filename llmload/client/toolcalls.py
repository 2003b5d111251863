"""The tool calls of an answer, read after its response has ended (never on the per-token path): OpenAI's chat
wire, streamed (``delta.tool_calls`` pieces by ``index``: the first with ``id``, ``type`` and ``function.name``,
the rest adding to ``function.arguments``) or whole (``message.tool_calls``).

Only a request that carried ``tools`` is read again for them; its streamed events already counted as tokens
(a tool-call delta is content: TTFT is the first content, reasoning or tool-call token).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from llmload.client.sse import parse_line


def streamed_tool_calls(lines: Sequence[tuple[float, bytes]]) -> list[dict[str, Any]]:
    """The calls a stream's ``delta.tool_calls`` pieces make, in ``index`` order:
    ``{"id", "type", "function": {"name", "arguments"}}`` each."""
    calls: dict[int, dict[str, Any]] = {}
    for _t, line in lines:
        payload = parse_line(line)
        if payload is None or b"tool_calls" not in payload:
            continue
        try:
            data = orjson.loads(payload)
        except orjson.JSONDecodeError:
            continue
        for choice in (data.get("choices") or []) if isinstance(data, dict) else []:
            delta = choice.get("delta") if isinstance(choice, dict) else None
            pieces = delta.get("tool_calls") if isinstance(delta, dict) else None
            for piece in pieces if isinstance(pieces, list) else []:
                if isinstance(piece, dict):
                    _add(calls, piece)
    return [calls[k] for k in sorted(calls)]


def _add(calls: dict[int, dict[str, Any]], piece: dict[str, Any]) -> None:
    index = piece.get("index", len(calls))
    index = index if isinstance(index, int) else len(calls)
    call = calls.setdefault(index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}})
    if isinstance(piece.get("id"), str) and piece["id"]:
        call["id"] = piece["id"]
    function = piece.get("function")
    if isinstance(function, dict):
        if isinstance(function.get("name"), str) and not call["function"]["name"]:
            call["function"]["name"] = function["name"]
        if isinstance(function.get("arguments"), str):
            call["function"]["arguments"] += function["arguments"]


def response_tool_calls(body: bytes) -> list[dict[str, Any]]:
    """``choices[0].message.tool_calls`` of a non-streamed answer (empty when it has none)."""
    try:
        data = orjson.loads(body)
        calls = data["choices"][0]["message"].get("tool_calls") or []
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError):
        return []
    out = []
    for call in calls if isinstance(calls, list) else []:
        if isinstance(call, dict):
            function = call.get("function")
            function = function if isinstance(function, dict) else {}
            out.append({"id": str(call.get("id") or ""), "type": "function",
                        "function": {"name": str(function.get("name") or ""),
                                     "arguments": str(function.get("arguments") or "")}})
    return out
