"""Structured output (``--response-format json_object|json_schema:FILE``): OpenAI's ``response_format`` in every
chat or completions request, and the check of every answer against it (docs/metrics.md, "Structured output").

The option is decided once, before the first request (:func:`response_format_from`, a :class:`ConfigError`
for a bad value, file or schema, or a dialect without the field). Each answer is checked after its response has
ended, never on the per-token path: :func:`answer_check` compiles the schema's validator once per run (per
process) and :meth:`AnswerCheck.verdict` says whether the text parses as JSON (an object for ``json_object``)
and, for ``json_schema``, whether it validates. The schema is checked and the answers are validated by
``jsonschema`` (imported only when a run asks for a response format).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from llmload.common.errors import ConfigError

FLAG = "--response-format"
#: longest reason kept on a record (``structured_output_error``)
MAX_REASON_CHARS = 200
#: OpenAI's rule for a ``json_schema`` name
_NAME = re.compile(r"[^a-zA-Z0-9_-]")


def _openai_wire_backends() -> tuple[str, ...]:
    """The dialects that take ``response_format``: OpenAI's chat and completions wire (vLLM's completions take
    it too: ``CompletionRequest.response_format``), not the Responses or Messages APIs or the native routes."""
    from llmload.client.backends import BACKENDS, get_backend
    from llmload.client.backends.openai import OpenAICompletions

    return tuple(name for name in BACKENDS if isinstance(get_backend(name), OpenAICompletions))


def parse_response_format(value: Any, backend: str) -> dict[str, Any] | None:
    """``--response-format``'s value as the request field: ``{"type": "json_object"}`` or ``{"type":
    "json_schema", "json_schema": {"name", "schema", "strict": true}}``; None when not given. FILE holds a JSON
    Schema, or OpenAI's ``{"name", "schema", "strict"}`` wrapper around one. A dict passes through (a
    locustfile's), checked the same way."""
    if value in (None, ""):
        return None
    if isinstance(value, dict):
        body = dict(value)
    else:
        text = str(value).strip()
        if text == "json_object":
            body = {"type": "json_object"}
        elif text.startswith("json_schema:") and text[len("json_schema:"):].strip():
            body = _schema_format(Path(text[len("json_schema:"):].strip()).expanduser())
        else:
            raise ConfigError(f"{FLAG}: expected json_object or json_schema:FILE, got {text!r}")
    check_response_format(body, FLAG)
    accepting = _openai_wire_backends()
    if backend not in accepting:
        raise ConfigError(f"{FLAG}: --backend {backend} has no response_format field; it is sent on OpenAI's chat "
                          f"and completions wire ({', '.join(accepting)})")
    return body


def _schema_format(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise ConfigError(f"{FLAG}: cannot read {path}: {reason}") from None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        raise ConfigError(f"{FLAG}: {path} is not JSON ({exc.msg} at {where})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{FLAG}: {path} must hold a JSON Schema object, got {type(data).__name__}")
    if isinstance(data.get("schema"), dict) and isinstance(data.get("name"), str):  # OpenAI's wrapper
        wrapper = {"name": data["name"], "schema": data["schema"], "strict": bool(data.get("strict", True))}
        if isinstance(data.get("description"), str):
            wrapper["description"] = data["description"]
        return {"type": "json_schema", "json_schema": wrapper}
    name = _NAME.sub("_", path.stem)[:64] or "schema"
    return {"type": "json_schema", "json_schema": {"name": name, "schema": data, "strict": True}}


def check_response_format(body: dict[str, Any], where: str) -> None:
    """A ``response_format`` value llmload can check answers against: ``json_object``, or ``json_schema``
    with a schema ``jsonschema`` accepts (ConfigError, one line, otherwise)."""
    kind = body.get("type")
    if kind == "json_object":
        return
    if kind != "json_schema":
        raise ConfigError(f"{where}: type must be json_object or json_schema, got {kind!r}")
    spec = body.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    if not isinstance(schema, dict):
        raise ConfigError(f"{where}: json_schema needs a 'schema' object")
    from jsonschema.exceptions import SchemaError

    try:
        _validator_class(schema).check_schema(schema)
    except SchemaError as exc:
        at = "/".join(str(p) for p in exc.absolute_path) or "the top level"
        raise ConfigError(f"{where}: not a valid JSON Schema at {at}: {_one_line(exc.message)}") from None


def checked_format(body: dict[str, Any], where: str) -> dict[str, Any] | None:
    """The ``response_format`` of a request body when it is one whose answers are checked (``json_object`` or
    ``json_schema``; checked as :func:`check_response_format` does), else None (none, or ``text``)."""
    value = body.get("response_format")
    if not isinstance(value, dict) or value.get("type") not in ("json_object", "json_schema"):
        return None
    check_response_format(value, f"{where} response_format")
    return value


def _validator_class(schema: dict[str, Any]) -> Any:
    from jsonschema.validators import Draft202012Validator, validator_for

    return validator_for(schema, default=Draft202012Validator)


def response_format_from(options: Any) -> dict[str, Any] | None:
    """The run's ``response_format`` from its parsed options (bench's or Locust's: one table), for the dialect
    it speaks (``options.backend``, after ``--multi-turn`` chose chat)."""
    return parse_response_format(getattr(options, "response_format", None), getattr(options, "backend", "") or "")


@dataclass(frozen=True)
class AnswerCheck:
    """One run's check of its answers (see :func:`answer_check`): the compiled validator, or None for
    ``json_object``."""

    kind: str
    validator: Any = None

    def verdict(self, text: str) -> tuple[bool, str]:
        """``(valid, reason)``: the reason (one short line) is empty when valid."""
        try:
            value = json.loads(text, parse_constant=_not_json)
        except ValueError as exc:
            reason = f"{exc.msg} at character {exc.pos}" if isinstance(exc, json.JSONDecodeError) else str(exc)
            return False, _one_line(f"not JSON: {reason}")
        if self.validator is None:
            if not isinstance(value, dict):
                return False, f"not a JSON object: {type(value).__name__}"
            return True, ""
        from jsonschema.exceptions import best_match

        error = best_match(self.validator.iter_errors(value))
        if error is None:
            return True, ""
        return False, _one_line(f"schema: {error.message} at {error.json_path}")


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 3] + "..."


def answer_check(response_format: dict[str, Any]) -> AnswerCheck:
    """The check for a run's ``response_format`` (one :func:`checked_format` accepts), its validator compiled
    once per process and format."""
    return _compiled(json.dumps(response_format, sort_keys=True))


@lru_cache(maxsize=8)
def _compiled(key: str) -> AnswerCheck:
    body = json.loads(key)
    if body.get("type") != "json_schema":
        return AnswerCheck("json_object")
    schema = body["json_schema"]["schema"]
    return AnswerCheck("json_schema", _validator_class(schema)(schema))
