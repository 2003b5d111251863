"""Structured output: a request's ``response_format`` answered with JSON that is valid for it, at the request's
output length, one piece of the JSON text per generated token (docs/simulator.md, "Structured output").

``json_object`` gets an object (``{"answer": "..."}``); ``json_schema`` gets an instance of the schema's shape
(:mod:`llmload.sim.schema`), its strings made of the sim's words. The text is then cut into exactly
``output_tokens`` pieces: more tokens are more words in the strings (within their ``maxLength``), then more array
items (within ``maxItems``), then whitespace after the value; fewer tokens merge pieces (a one-token answer is the
whole JSON in one piece). The instance is checked with ``jsonschema`` once per schema: a schema it cannot satisfy
(``pattern``, say) is answered with a 400, as servers refuse schemas their grammar backends do not support.

``--invalid-json-rate P`` breaks a share P of these answers, drawn from the seed and the request body: the last
piece becomes a word, so the JSON is left unclosed (or has text after it), with the token count unchanged.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import orjson

from llmload.sim.schema import Arr, Compiler, Const, Obj, Str, Unsupported, dumps
from llmload.sim.text import TOKEN_COUNT, TOKENS

#: the words strings are made of (the generated text's words, without their leading space)
_WORD_LIST = tuple(t.decode()[1:] for t in TOKENS)
#: response_format types a request may name; ``text`` asks for nothing
FORMAT_TYPES = ("text", "json_object", "json_schema")
#: compiled ``response_format`` plans kept, by their canonical JSON
_PLAN_CACHE = 64


# -- instances: one per request, grown to its length ---------------------------------------------------------


@dataclass
class _StrNode:
    shape: Str
    words: list[str] = field(default_factory=list)
    length: int = 0
    full: bool = False


@dataclass
class _ArrNode:
    shape: Arr
    items: list[Any] = field(default_factory=list)


@dataclass
class _ObjNode:
    props: list[tuple[str, Any]]


class _Words:
    """The request's words, in order: word ``k`` as the generated text picks token ``k``."""

    def __init__(self, offset: int, first: int = 0) -> None:
        self.offset = offset
        self.k = first

    def next(self) -> str:
        word = _WORD_LIST[(self.offset + self.k * 7) % TOKEN_COUNT]
        self.k += 1
        return word


def _grow_str(node: _StrNode, words: _Words) -> bool:
    """Add one word; False (and the string is full) when the next word would pass ``maxLength``."""
    word = words.next()
    length = node.length + len(word) + (1 if node.words else 0)
    limit = node.shape.max_len
    if limit is not None and length > limit:
        node.full = True
        return False
    node.words.append(word)
    node.length = length
    return True


def _node(shape: Any, words: _Words) -> Any:
    """The smallest instance of a shape: a word in each string (as many as ``minLength`` needs), the fewest
    items."""
    if isinstance(shape, Const):
        return shape
    if isinstance(shape, Str):
        node = _StrNode(shape)
        while (node.length < shape.min_len or not node.words) and _grow_str(node, words):
            pass
        if node.length < shape.min_len:  # words cannot meet minLength within maxLength
            node.words, node.length, node.full = ["x" * shape.min_len], shape.min_len, True
        return node
    if isinstance(shape, Obj):
        return _ObjNode([(name, _node(value, words)) for name, value in shape.props])
    arr = _ArrNode(shape)
    arr.items = [_node(p, words) for p in shape.prefix]
    while len(arr.items) < shape.min_items:
        arr.items.append(_node(shape.item(), words))
    return arr


def _atoms(node: Any, out: list[str]) -> None:
    """The JSON text of ``node`` as its finest pieces: a word of a string, a key with its colon, a bracket."""
    if isinstance(node, Const):
        out.append(node.text)
    elif isinstance(node, _StrNode):
        if not node.words:
            out.append('""')
            return
        out.append(dumps(node.words[0])[:-1])
        out.extend(dumps(" " + w)[1:-1] for w in node.words[1:])
        out[-1] += '"'
    elif isinstance(node, _ObjNode):
        if not node.props:
            out.append("{}")
            return
        for i, (name, value) in enumerate(node.props):
            out.append(("{" if i == 0 else ", ") + dumps(name) + ": ")
            _atoms(value, out)
        out.append("}")
    else:
        if not node.items:
            out.append("[]")
            return
        out.append("[")
        for i, item in enumerate(node.items):
            if i:
                out.append(", ")
            _atoms(item, out)
        out.append("]")


def _walk(node: Any, strings: list[_StrNode], arrays: list[_ArrNode]) -> None:
    if isinstance(node, _StrNode):
        strings.append(node)
    elif isinstance(node, _ObjNode):
        for _, value in node.props:
            _walk(value, strings, arrays)
    elif isinstance(node, _ArrNode):
        arrays.append(node)
        for item in node.items:
            _walk(item, strings, arrays)


def _grow(root: Any, tokens: int, words: _Words) -> list[str]:
    """The instance's pieces, grown toward ``tokens``: a word into each string in turn (within its
    ``maxLength``), then, with every string full, one more item in the first array with room, and again."""
    atoms: list[str] = []
    _atoms(root, atoms)
    count = len(atoms)
    while count < tokens:
        strings: list[_StrNode] = []
        arrays: list[_ArrNode] = []
        _walk(root, strings, arrays)
        growing = [s for s in strings if s.words and not s.full]  # a first word would add no piece
        turn = 0
        while count < tokens and growing:
            node = growing[turn % len(growing)]
            if _grow_str(node, words):
                count += 1
                turn += 1
            else:
                growing.remove(node)
        if count >= tokens:
            break
        roomy = next((a for a in arrays if a.shape.max_items is None or len(a.items) < a.shape.max_items), None)
        if roomy is None:
            break
        roomy.items.append(_node(roomy.shape.item(), words))
        atoms = []
        _atoms(root, atoms)
        count = len(atoms)
    atoms = []
    _atoms(root, atoms)
    return atoms


def _fit(atoms: list[str], tokens: int) -> list[str]:
    """Exactly ``tokens`` pieces: whitespace after the value when short, the first pieces merged when long."""
    if len(atoms) < tokens:
        return atoms + [" "] * (tokens - len(atoms))
    cut = len(atoms) - tokens + 1
    return ["".join(atoms[:cut]), *atoms[cut:]]


@dataclass
class Plan:
    """One ``response_format``'s shape (compiled once per schema) and what makes its answers."""

    shape: Any

    def pieces(self, tokens: int, offset: int, broken: bool = False, first_word: int = 0) -> tuple[bytes, ...]:
        """The answer as ``tokens`` pieces of JSON string body (escaped, ready to put between quotes), its strings
        made of the request's words from word ``first_word`` on (after the reasoning's); ``broken``: its last
        piece replaced by a word."""
        words = _Words(offset, first_word)
        atoms = _fit(_grow(_node(self.shape, words), tokens, words), max(1, tokens))
        if broken:
            atoms[-1] = " " + words.next()
        return tuple(orjson.dumps(a)[1:-1] for a in atoms)

    def text(self, tokens: int, offset: int = 0) -> str:
        return "".join(orjson.loads(b'"' + p + b'"') for p in self.pieces(tokens, offset))


def plan_for(response_format: Any) -> Plan | None:
    """The plan for a request's ``response_format`` (None: no structured output asked for); Unsupported for a
    value the simulator cannot answer (the caller's 400)."""
    if response_format is None:
        return None
    if not isinstance(response_format, dict) or response_format.get("type") not in FORMAT_TYPES:
        kind = response_format.get("type") if isinstance(response_format, dict) else response_format
        raise Unsupported(f"response_format type must be one of {', '.join(FORMAT_TYPES)}, got {kind!r}")
    if response_format["type"] == "text":
        return None
    return _plan_of(orjson.dumps(response_format, option=orjson.OPT_SORT_KEYS))


@lru_cache(maxsize=_PLAN_CACHE)
def _plan_of(key: bytes) -> Plan:
    """The plan of one ``response_format`` (by its canonical JSON), compiled once: clients send the same one on
    every request."""
    return _compile(orjson.loads(key))


def _compile(response_format: dict) -> Plan:
    if response_format["type"] == "json_object":
        return Plan(Obj((("answer", Str()),)))
    spec = response_format.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    if not isinstance(schema, dict):
        raise Unsupported("response_format json_schema needs a 'schema' object")
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import Draft202012Validator, validator_for

    validator_class = validator_for(schema, default=Draft202012Validator)
    try:
        validator_class.check_schema(schema)
    except SchemaError as exc:
        raise Unsupported(f"invalid JSON schema: {exc.message}") from None
    plan = Plan(Compiler(schema).shape(schema))
    validator = validator_class(schema)
    for tokens in (1, 200):  # the smallest instance, and one grown (longer strings, more items)
        error = next(iter(validator.iter_errors(orjson.loads(plan.text(tokens)))), None)
        if error is not None:
            raise Unsupported(f"llmload sim cannot generate JSON for this schema: {error.message}")
    return plan


def draw_broken(rate: float, seed: int, raw: bytes) -> bool:
    """Whether ``--invalid-json-rate`` breaks this request's answer: a draw from the seed and the request body."""
    if rate <= 0:
        return False
    return random.Random(zlib.crc32(raw) * 1_000_003 + seed).random() < rate
