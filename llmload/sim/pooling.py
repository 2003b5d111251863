"""The pooling routes' request bodies: ``/v1/embeddings``, ``/pooling`` and the rerank routes, as vLLM takes them.

A pooling request costs the engine its prefill only: it counts prompt tokens (the sum over its inputs) and no
output. This module checks a body and counts those tokens; :mod:`llmload.sim.pooling_wire` renders the answer.

Token counts: an embeddings or pooling input counts as a prompt does on the generation routes (the tokenizer's
ids, else ~4 characters a token; token-id inputs by their length); the chat form (``messages``) counts as a chat
prompt, images included. A rerank request is scored as a cross-encoder scores it, one (query, document) pair per
document, so it counts ``Σ (query tokens + document tokens + 1 separator)`` over its documents.
``truncate_prompt_tokens`` (``-1``: the context length; ``k``: at most ``k``) caps each input (each pair).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType

from llmload.sim.chat import render_messages
from llmload.sim.config import SimConfig
from llmload.sim.errors import bad_request
from llmload.sim.images import ImageCache

#: path -> pooling request kind
POOLING_ROUTES = MappingProxyType({
    "/v1/embeddings": "embeddings",
    "/pooling": "pooling",
    "/v1/rerank": "rerank",
    "/rerank": "rerank",
    "/v2/rerank": "rerank",
})
POOLING_KINDS = frozenset(POOLING_ROUTES.values())
#: ``encoding_format`` values the simulator answers
ENCODINGS = ("float", "base64")
#: the largest ``dimensions`` a request may ask for
MAX_DIMENSIONS = 65536

#: text -> its prompt tokens
CountTokens = Callable[[str], int]


@dataclass(frozen=True, slots=True)
class PoolSpec:
    """What a pooling request asks for, enough to render its answer."""

    kind: str
    #: embeddings and pooling: each input's text (token ids written as text); rerank: the documents
    texts: tuple[str, ...]
    #: prompt tokens of each input (rerank: of each query-document pair)
    tokens: tuple[int, ...]
    encoding: str = "float"
    dimensions: int = 64
    query: str = ""
    #: rerank: how many results to return (0: all)
    top_n: int = 0

    @property
    def prompt_tokens(self) -> int:
        return sum(self.tokens)


@dataclass(slots=True)
class Pooled:
    """A checked pooling body: its spec, and what the prefix cache hashes."""

    spec: PoolSpec
    #: the inputs' text, joined (the prefix cache's material)
    text: str
    #: the inputs as token ids, joined, when they came as ids
    ids: list[int] | None = None
    images: int = 0
    image_tokens: int = 0
    #: chat form with images: the text with image markers (:mod:`llmload.sim.chat`)
    hash_text: str | None = None


def parse_pooling(kind: str, body: dict, cfg: SimConfig, count: CountTokens, images: ImageCache) -> Pooled:
    """Check a pooling body (the model is checked by the caller) and count its tokens; 400s as vLLM."""
    if body.get("stream"):
        raise bad_request("llmload sim: the pooling routes do not stream; send \"stream\": false", "stream")
    limit = _truncation(body, cfg)
    if kind == "rerank":
        pooled = _rerank(body, count, limit)
    elif "messages" in body and "input" not in body:
        rendered = render_messages(body["messages"], images)
        tokens = _capped(count(rendered.text) + rendered.image_tokens, limit)
        spec = PoolSpec(kind, (rendered.text,), (tokens,), *_format(body, cfg))
        pooled = Pooled(spec, rendered.text, None, rendered.images, rendered.image_tokens, rendered.hash_text)
    else:
        pooled = _inputs(kind, body, cfg, count, limit)
    longest = max(pooled.spec.tokens)
    if longest > cfg.max_model_len:
        raise bad_request(
            f"This model's maximum context length is {cfg.max_model_len} tokens. However, you requested {longest} "
            "tokens in the input for embedding generation. Please reduce the length of the input.")
    return pooled


def _truncation(body: dict, cfg: SimConfig) -> int:
    """``truncate_prompt_tokens`` as a cap on each input's tokens (0: none)."""
    value = body.get("truncate_prompt_tokens")
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value == 0 or value < -1:
        raise bad_request(f"'truncate_prompt_tokens' must be -1 or a positive integer, got {value!r}",
                          "truncate_prompt_tokens")
    if value > cfg.max_model_len:
        raise bad_request(f"truncate_prompt_tokens value ({value}) is greater than max_model_len "
                          f"({cfg.max_model_len}). Please, select a smaller truncation size.")
    return cfg.max_model_len if value == -1 else value


def _capped(tokens: int, limit: int) -> int:
    return min(tokens, limit) if limit else tokens


def _format(body: dict, cfg: SimConfig) -> tuple[str, int]:
    """``(encoding_format, dimensions)`` of an embeddings or pooling body."""
    encoding = body.get("encoding_format") or "float"
    if encoding not in ENCODINGS:
        raise bad_request(f"llmload sim answers encoding_format 'float' or 'base64', not {encoding!r}",
                          "encoding_format")
    dimensions = body.get("dimensions")
    if dimensions is None:
        return encoding, cfg.embedding_dim
    if isinstance(dimensions, bool) or not isinstance(dimensions, int) or not 1 <= dimensions <= MAX_DIMENSIONS:
        raise bad_request(f"'dimensions' must be an integer from 1 to {MAX_DIMENSIONS}, got {dimensions!r}",
                          "dimensions")
    return encoding, dimensions


def _is_ids(value: object) -> bool:
    return isinstance(value, list) and bool(value) and all(
        isinstance(t, int) and not isinstance(t, bool) for t in value)


def _inputs(kind: str, body: dict, cfg: SimConfig, count: CountTokens, limit: int) -> Pooled:
    """``input``: a string, strings, token ids, or lists of token ids."""
    given = body.get("input")
    if given is None:
        raise bad_request("'input' is required", "input")
    if isinstance(given, str):
        given = [given]
    if not isinstance(given, list) or not given:
        raise bad_request("'input' must be a non-empty string or list", "input")
    if _is_ids(given):
        given = [given]
    if all(isinstance(x, str) for x in given):
        if not all(given):
            raise bad_request("'input' must not hold empty strings", "input")
        tokens = tuple(_capped(count(x), limit) for x in given)
        return Pooled(PoolSpec(kind, tuple(given), tokens, *_format(body, cfg)), "".join(given))
    if all(_is_ids(x) for x in given):
        texts = tuple(" ".join(map(str, x)) for x in given)
        tokens = tuple(_capped(len(x), limit) for x in given)
        ids = [t for x in given for t in x]
        return Pooled(PoolSpec(kind, texts, tokens, *_format(body, cfg)), "", ids)
    raise bad_request("'input' must be a string, a list of strings, token ids or lists of token ids", "input")


def _rerank(body: dict, count: CountTokens, limit: int) -> Pooled:
    """``query`` and ``documents`` (strings), ``top_n``: one query-document pair per document."""
    query = body.get("query")
    if not isinstance(query, str) or not query:
        raise bad_request("'query' must be a non-empty string", "query")
    documents = body.get("documents")
    if not isinstance(documents, list) or not documents:
        raise bad_request("'documents' must be a non-empty list of strings", "documents")
    if not all(isinstance(d, str) for d in documents):
        raise bad_request("llmload sim reranks text documents (strings) only", "documents")
    top_n = body.get("top_n") or 0
    if isinstance(top_n, bool) or not isinstance(top_n, int) or top_n < 0:
        raise bad_request(f"'top_n' must be a non-negative integer, got {top_n!r}", "top_n")
    query_tokens = count(query)
    tokens = tuple(_capped(query_tokens + count(d) + 1, limit) for d in documents)
    spec = PoolSpec("rerank", tuple(documents), tokens, query=query, top_n=top_n)
    return Pooled(spec, "\n".join((query, *documents)))
