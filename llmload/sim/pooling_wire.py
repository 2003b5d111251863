"""The pooling routes' JSON answers (vLLM's shapes), with deterministic embeddings and rerank scores.

An embedding is a vector of ``dimensions`` float32 values drawn from a hash of the input's text and
L2-normalised, so the same input always gets the same vector and different inputs get different ones. A rerank
score is a number in [0, 1) drawn from a hash of the query and the document. ``encoding_format: "base64"`` sends
each vector as the base64 of its little-endian float32 bytes, as OpenAI does (the official ``openai`` SDK asks for
base64 unless told otherwise, and decodes it so).
"""

from __future__ import annotations

import base64
import hashlib
import math
import random
import sys
from array import array

import orjson

from llmload.sim.pooling import PoolSpec
from llmload.sim.wire import Wire


def _seed(*texts: str) -> int:
    """A stable 64-bit number from texts (Python's ``hash`` differs between processes)."""
    digest = hashlib.blake2b(digest_size=8)
    for text in texts:
        digest.update(text.encode("utf-8", "surrogatepass"))
        digest.update(b"\x00")
    return int.from_bytes(digest.digest(), "little")


def embedding(text: str, dimensions: int) -> array:
    """The input's unit vector (float32), the same for the same text."""
    rng = random.Random(_seed(text))
    values = [rng.gauss(0.0, 1.0) for _ in range(dimensions)]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return array("f", [v / norm for v in values])


def relevance(query: str, document: str) -> float:
    """The document's rerank score for the query, in [0, 1)."""
    return _seed(query, document) / 2.0**64


def _encoded(vector: array, encoding: str) -> object:
    if encoding != "base64":
        return vector.tolist()
    if sys.byteorder != "little":
        vector = array("f", vector)
        vector.byteswap()
    return base64.b64encode(vector.tobytes()).decode("ascii")


class PoolingWire(Wire):
    """One JSON body for ``/v1/embeddings``, ``/pooling`` or a rerank route (they never stream)."""

    def token_event(self, text: bytes, generated: int, last: bool, n: int = 1) -> bytes:
        """Never called: a pooling request has no tokens to stream."""
        raise NotImplementedError("pooling requests do not stream")

    def full_json(self, text: bytes) -> bytes:
        spec = self.req.pooled
        assert spec is not None
        if spec.kind == "rerank":
            return orjson.dumps(self._rerank(spec))
        pooling = spec.kind == "pooling"
        data = [{"index": i, "object": "pooling", "data": _encoded(embedding(t, spec.dimensions), spec.encoding)}
                if pooling else
                {"object": "embedding", "index": i, "embedding": _encoded(embedding(t, spec.dimensions), spec.encoding)}
                for i, t in enumerate(spec.texts)]
        tokens = self.req.prompt_tokens
        return orjson.dumps({
            "id": self.request_id, "object": "list", "created": self.created, "model": self.req.model, "data": data,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0,
                      "prompt_tokens_details": None},
        })

    def _rerank(self, spec: PoolSpec) -> dict:
        """vLLM's rerank answer: results by score, highest first, cut to ``top_n``."""
        scored = sorted(((relevance(spec.query, d), i, d) for i, d in enumerate(spec.texts)),
                        key=lambda r: (-r[0], r[1]))
        if spec.top_n:
            scored = scored[: spec.top_n]
        tokens = self.req.prompt_tokens
        return {
            "id": self.request_id, "model": self.req.model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            "results": [{"index": i, "document": {"text": d}, "relevance_score": score} for score, i, d in scored],
        }

