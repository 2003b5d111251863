"""What every request carries beyond its prompt, as today's ``vllm bench serve`` sends it (docs/vllm-compat.md):
sampling parameters (``--temperature``, ``--top-p``, ``--top-k``, ``--min-p``, the penalties), ``--extra-body``
(merged over them, and over every field of the body: vLLM's order), ``--response-format`` (OpenAI's
``response_format``, under ``--extra-body``: :mod:`llmload.core.structured`), headers (``--header KEY=VALUE``,
which the request id header then overrides) and ``--request-id-prefix`` for ``X-Request-Id``.

vLLM no longer sends ``temperature`` unless asked (the server's default applies); ``--vllm-compat 0.7`` restores
0.7's ``temperature: 0`` (greedy) for comparison with old results.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llmload.common.errors import ConfigError
from llmload.core.structured import checked_format, response_format_from
from llmload.core.tools import tool_options_from

#: option dest -> body field, in vLLM's order
SAMPLING = {"top_p": "top_p", "top_k": "top_k", "min_p": "min_p", "temperature": "temperature",
            "frequency_penalty": "frequency_penalty", "presence_penalty": "presence_penalty",
            "repetition_penalty": "repetition_penalty"}
#: ``--vllm-compat`` values: what they restore (docs/vllm-compat.md)
COMPAT_VERSIONS = ("0.7",)


@dataclass(frozen=True, slots=True)
class RequestShaping:
    """Fields merged into every request body (last: they win), extra headers, the request-id prefix."""

    body: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    request_id_prefix: str = ""


def parse_headers(items: list[str] | None) -> dict[str, str]:
    """``--header KEY=VALUE ...`` (split at the first ``=``, both sides stripped)."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = str(item).partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--header: expected KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def parse_json_object(text: Any, flag: str) -> dict[str, Any]:
    """A flag's JSON object (``--extra-body '{"a": 1}'``); a dict passes through (a locustfile's)."""
    if text in (None, ""):
        return {}
    if isinstance(text, dict):
        return dict(text)
    import json

    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{flag}: not JSON ({exc.msg} at character {exc.pos})") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{flag}: expected a JSON object, e.g. '{{\"top_p\": 0.9}}', got {type(value).__name__}")
    return value


def shaping_from(options: Any) -> RequestShaping:
    """The run's :class:`RequestShaping` from its parsed options (bench's or Locust's: one table)."""
    body = {name: value for dest, name in SAMPLING.items() if (value := getattr(options, dest, None)) is not None}
    if getattr(options, "vllm_compat", None) == "0.7":
        body.setdefault("temperature", 0.0)  # 0.7's greedy default
    logprobs = getattr(options, "logprobs", None)
    if logprobs is not None:
        body["logprobs"] = logprobs
    response_format = response_format_from(options)  # --response-format: checked answers (core/structured.py)
    if response_format is not None:
        body["response_format"] = response_format
    body.update(tool_options_from(options).body())  # --tools, --tool-choice (core/tools.py)
    body.update(parse_json_object(getattr(options, "extra_body", None), "--extra-body"))
    checked_format(body, "--extra-body")  # a response_format given there is checked as well
    return RequestShaping(body, parse_headers(getattr(options, "header", None)),
                          getattr(options, "request_id_prefix", None) or "")
