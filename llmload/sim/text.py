"""Deterministic generated text: token ``j`` of a request is a word picked from a fixed list.

Words are pre-encoded as JSON string bodies so rendering a chunk is byte concatenation.
"""

from __future__ import annotations

import zlib

_WORDS = ["the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "with", "was", "on", "be", "by", "this", "are", "or", "at", "from", "have", "an", "not", "which", "but", "all", "they", "can", "more", "one", "had", "has", "their", "will", "we", "there", "been", "if", "would", "its", "so", "about", "what", "when", "into", "only", "other", "some", "time", "could", "these", "two", "may", "then", "do", "first", "any", "my", "now", "such", "like", "our", "over", "man", "me", "even", "most", "made", "after", "also", "did", "many", "before", "must", "through", "back", "years", "where", "much", "your", "way", "well", "down", "should", "because", "each", "just", "those", "people", "how", "too", "little", "state", "good", "very", "make", "world", "still", "own", "see", "men", "work", "long", "get", "here", "between", "both", "life", "being", "under", "never", "day", "same", "another", "know", "while", "last", "might", "us", "great", "old", "year", "off", "come", "since", "against", "go", "came", "right", "used", "take", "three", "model", "token", "server", "request", "batch", "latency", "stream", "engine", "memory", "cache", "prefix", "decode", "prefill", "kernel", "tensor", "layer", "attention", "query", "value", "key", "vector", "sample", "output", "input", "prompt", "answer", "question", "system", "user", "assistant", "result", "value", "number", "function", "method", "class", "data", "table", "file", "path", "line", "code", "test", "build", "run", "start", "stop", "open", "close", "read", "write", "send", "receive", "wait", "ready", "fast", "slow"]

#: a space-prefixed word per token, as UTF-8 bytes (JSON-safe: no quotes, backslashes or controls)
TOKENS: tuple[bytes, ...] = tuple((" " + w).encode() for w in _WORDS)
TOKEN_COUNT = len(TOKENS)


def text_offset(seed: int, prompt: str) -> int:
    """Where in the word list a request's text starts: fixed by the seed and the prompt."""
    return (zlib.crc32(prompt.encode("utf-8", "surrogatepass")) ^ (seed * 2654435761)) % TOKEN_COUNT


def text_of(offset: int, start: int, count: int) -> bytes:
    """``count`` tokens starting at token ``start``, concatenated."""
    return b"".join(TOKENS[(offset + i * 7) % TOKEN_COUNT] for i in range(start, start + count))


def estimate_tokens(text: str) -> int:
    """Prompt length without a tokenizer: about four characters per token, at least one."""
    return max(1, (len(text) + 3) // 4)
