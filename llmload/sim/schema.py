"""A JSON Schema as the simulator answers it (:mod:`llmload.sim.structured`): a *shape*, compiled once per
schema. Every property listed (and every required one), strings (each ``format`` as a fixed literal), arrays with
their fewest items (compiled lazily, so a recursive schema ends where its arrays may be empty), the lowest number
allowed, the first of an ``enum``, the first usable branch of an ``anyOf``/``oneOf`` (``null`` last), ``allOf``
merged, local references (``$ref``). What it cannot answer (``pattern``, a remote ``$ref``) is :class:`Unsupported`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import orjson

#: ``$ref`` depth and array nesting past which a schema counts as unsupported (a recursive schema's instance
#: stops where its arrays may be empty)
_MAX_DEPTH = 16
#: a literal for each string ``format`` jsonschema knows how to check
_FORMATS = {"date-time": "2026-01-01T00:00:00Z", "date": "2026-01-01", "time": "00:00:00Z",
            "email": "sim@example.com",
            "uuid": "00000000-0000-4000-8000-000000000000", "uri": "https://example.com/", "ipv4": "127.0.0.1",
            "hostname": "example.com", "duration": "P1D"}


class Unsupported(Exception):
    """A ``response_format`` the simulator cannot answer: the message says why (the 400's text)."""


@dataclass(frozen=True)
class Const:
    text: str


@dataclass(frozen=True)
class Str:
    min_len: int = 0
    max_len: int | None = None


@dataclass
class Arr:
    compiler: Compiler
    items: Any
    depth: int
    min_items: int = 0
    max_items: int | None = None
    prefix: tuple[Any, ...] = ()
    _item: Any = None

    def item(self) -> Any:
        if self._item is None:
            self._item = self.compiler.shape(self.items, self.depth + 1)
        return self._item


@dataclass(frozen=True)
class Obj:
    props: tuple[tuple[str, Any], ...]


class Compiler:
    """Schema -> shape; ``root`` resolves the local references (``$ref``)."""

    def __init__(self, root: Any) -> None:
        self.root = root

    def shape(self, s: Any, depth: int = 0) -> Any:
        if depth > _MAX_DEPTH:
            raise Unsupported("the schema nests too deep (a recursive schema without an end)")
        if s is True or s == {}:
            return Str()
        if not isinstance(s, dict):
            raise Unsupported("a false schema matches nothing")
        if "$ref" in s:
            return self.shape(self._resolve(s["$ref"]), depth + 1)
        if "allOf" in s:
            return self.shape(_merged(s), depth + 1)
        if "const" in s:
            return Const(dumps(s["const"]))
        if s.get("enum"):
            return Const(dumps(s["enum"][0]))
        for key in ("anyOf", "oneOf"):
            if s.get(key):
                return self._branch(s, key, depth)
        return self._typed(s, _type_of(s), depth)

    def _branch(self, s: dict, key: str, depth: int) -> Any:
        rest = {k: v for k, v in s.items() if k != key}
        branches = sorted(s[key], key=lambda b: isinstance(b, dict) and b.get("type") == "null")
        last: Unsupported | None = None
        for branch in branches:
            try:
                return self.shape(_merged({"allOf": [rest, branch]}) if rest else branch, depth + 1)
            except Unsupported as exc:
                last = exc
        raise last or Unsupported(f"no usable {key} branch")

    def _typed(self, s: dict, kind: str, depth: int) -> Any:
        if kind == "object":
            return self._object(s, depth)
        if kind == "array":
            prefix = tuple(self.shape(p, depth + 1) for p in s.get("prefixItems", ()))
            items = s.get("items", True)
            return Arr(self, {} if items is True else items, depth, max(int(s.get("minItems", 0)), len(prefix)),
                        s.get("maxItems") if s.get("items") is not False else len(prefix), prefix)
        if kind == "string":
            if "pattern" in s:
                raise Unsupported("llmload sim cannot generate strings for a 'pattern'")
            if s.get("format") in _FORMATS:
                return Const(dumps(_FORMATS[s["format"]]))
            return Str(int(s.get("minLength", 0)), s.get("maxLength"))
        if kind in ("integer", "number"):
            return Const(dumps(_number(s, kind == "integer")))
        if kind == "boolean":
            return Const("true")
        if kind == "null":
            return Const("null")
        raise Unsupported(f"unknown type {kind!r}")

    def _object(self, s: dict, depth: int) -> Obj:
        props = dict(s.get("properties") or {})
        extra = s.get("additionalProperties", True)
        for name in s.get("required") or ():
            props.setdefault(name, extra if isinstance(extra, dict) else {})
        if not props and extra is not False and s.get("maxProperties", 1) > 0:
            props["answer"] = extra if isinstance(extra, dict) else {"type": "string"}
        return Obj(tuple((name, self.shape(value, depth + 1)) for name, value in props.items()))

    def _resolve(self, ref: Any) -> Any:
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise Unsupported(f"only local $refs are supported, got {ref!r}")
        node = self.root
        for part in (p for p in ref[1:].split("/") if p):
            part = part.replace("~1", "/").replace("~0", "~")
            try:
                node = node[int(part)] if isinstance(node, list) else node[part]
            except (KeyError, IndexError, ValueError, TypeError):
                raise Unsupported(f"$ref {ref!r} points nowhere") from None
        return node


def _type_of(s: dict) -> str:
    kind = s.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if isinstance(kind, str):
        return kind
    if "properties" in s or "required" in s or "additionalProperties" in s:
        return "object"
    if "items" in s or "prefixItems" in s:
        return "array"
    return "string"


def _merged(s: dict) -> dict:
    """``allOf`` folded into one schema: properties and required lists joined, other keys first come first."""
    out: dict = {k: v for k, v in s.items() if k != "allOf"}
    for part in s.get("allOf", ()):
        if not isinstance(part, dict):
            continue
        for key, value in part.items():
            if key == "properties":
                out["properties"] = {**out.get("properties", {}), **value}
            elif key == "required":
                known = out.get("required", [])
                out["required"] = [*known, *(v for v in value if v not in known)]
            else:
                out.setdefault(key, value)
    return out


def _number(s: dict, integer: bool) -> float:
    value: float = 0
    if "minimum" in s:
        value = s["minimum"]
    elif "exclusiveMinimum" in s:
        value = s["exclusiveMinimum"] + 1
    if "maximum" in s and value > s["maximum"]:
        value = s["maximum"]
    if "exclusiveMaximum" in s and value >= s["exclusiveMaximum"]:
        value = s["exclusiveMaximum"] - 1
    step = s.get("multipleOf")
    if step:
        value = math.ceil(value / step) * step
    return math.ceil(value) if integer else value


def dumps(value: Any) -> str:
    return orjson.dumps(value).decode()
