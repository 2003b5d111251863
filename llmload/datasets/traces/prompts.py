"""Prompts of an exact token count for trace replay, cut from a seeded token pool.

The pool is random vocabulary words (default) or the turns of a ShareGPT file; see
:mod:`llmload.datasets.traces` for how starts are drawn and how a prompt is made to measure exactly.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np

from llmload.common.errors import DatasetError
from llmload.datasets.base import Tokenizer, token_len

MIN_POOL_TOKENS = 16384
"""The smallest token pool; it is also at least twice the longest prompt, so starts vary widely."""

_FIT_ATTEMPTS = 12


class PromptBuilder:
    """Prompts of an exact token count, cut from a seeded token pool (see :mod:`llmload.datasets.traces`).

    The pool is one long text, tokenized once with character offsets; a prompt of ``k`` content tokens
    is the text of pool tokens ``[s, s + k)``, a plain string slice. One batched tokenizer call then
    measures every prompt; the few that do not measure exactly are trimmed or extended.
    """

    def __init__(self, tokenizer: Tokenizer, seed: int = 0, *, prompt_path: str | Path | None = None) -> None:
        self.tokenizer = tokenizer
        self.seed = seed
        self.rng = np.random.RandomState(seed)
        self.specials = int(tokenizer.num_special_tokens_to_add())
        self.prompt_path = Path(prompt_path) if prompt_path is not None else None
        self.text = ""
        self.ids: list[int] = []
        self.ends: np.ndarray | None = None
        """Character end of each pool token in ``text`` (None for tokenizers without offsets)."""
        self.starts = np.zeros(0, dtype=np.int64)
        """Token indices where a prompt may start (every token, or the start of each dataset turn)."""
        self._order = self.starts
        self._cursor = 0

    # -- the pool

    def prepare(self, longest: int, count: int = 1) -> None:
        """Build the pool: at least twice ``longest`` tokens and 4 start places per prompt."""
        need = max(MIN_POOL_TOKENS, 2 * longest + 64, 4 * count)
        if len(self.ids) >= need:
            return
        if self.prompt_path is None:
            pieces = self._random_words(need)
        else:
            pieces = self._dataset_texts(need, 4 * count)
        while True:
            self._tokenize_pool("".join(pieces))
            if len(self.ids) >= need:
                break
            pieces = pieces + pieces
        if self.prompt_path is None:
            self.starts = np.arange(len(self.ids), dtype=np.int64)
        else:
            self.starts = self._piece_token_starts(pieces)
        self._order = self.rng.permutation(self.starts)
        self._cursor = 0

    def _random_words(self, count: int) -> list[str]:
        """``count`` seeded vocabulary words, each with a leading space (text that re-tokenizes stably)."""
        vocab = int(self.tokenizer.vocab_size)
        ids = self.rng.choice(vocab, size=min(vocab, 4096), replace=False).tolist()
        words = sorted(
            {w for w in (self.tokenizer.decode([i]).strip() for i in ids) if w.isascii() and w.isalpha()}
        )
        if len(words) < 16:  # an odd vocabulary: fall back to plain letters
            words = [chr(c) * k for c in range(ord("a"), ord("z") + 1) for k in (1, 2)]
        return [" " + words[i] for i in self.rng.choice(len(words), size=count)]

    def _dataset_texts(self, need: int, min_pieces: int) -> list[str]:
        """Turns of the ShareGPT file, shuffled by seed: enough characters for ``need`` tokens and at
        least ``min_pieces`` turns (cycling the file when it is smaller)."""
        from llmload.datasets.sharegpt import load_conversations

        assert self.prompt_path is not None
        texts = [
            t["value"].strip() + "\n\n"
            for entry in load_conversations(self.prompt_path)
            for t in entry["conversations"]
            if isinstance(t, dict) and isinstance(t.get("value"), str) and t["value"].strip()
        ]
        if not texts:
            raise DatasetError(f"{self.prompt_path}: no conversation text to build trace prompts from")
        random.Random(self.seed).shuffle(texts)
        out: list[str] = []
        chars = 0
        while chars < 8 * need or len(out) < min_pieces:  # a token is rarely over 8 characters
            for text in texts:
                out.append(text)
                chars += len(text)
                if chars >= 8 * need and len(out) >= min_pieces:
                    break
        return out

    def _tokenize_pool(self, text: str) -> None:
        self.text = text
        try:
            enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
            self.ids = list(enc.input_ids)
            self.ends = np.asarray([end for _, end in enc.offset_mapping], dtype=np.int64)
        except (NotImplementedError, TypeError, ValueError, AttributeError):  # slow tokenizers: no offsets
            self.ids = self.tokenizer.encode(text, add_special_tokens=False)
            self.ends = None

    def _piece_token_starts(self, pieces: list[str]) -> np.ndarray:
        char_starts = np.cumsum([0] + [len(p) for p in pieces[:-1]])
        if self.ends is None:
            return np.zeros(1, dtype=np.int64)
        # the first token that ends after the piece's first character
        return np.unique(np.searchsorted(self.ends, char_starts, side="right"))

    def cut(self, start: int, count: int) -> str:
        """The text of pool tokens ``[start, start + count)``, wrapping around the pool's end."""
        size = len(self.ids)
        if start + count > size:
            head = size - start
            return self.cut(start, head) + self.cut(0, count - head)
        if self.ends is None:
            return self.tokenizer.decode(self.ids[start : start + count])
        begin = int(self.ends[start - 1]) if start > 0 else 0
        return self.text[begin : int(self.ends[start + count - 1])]

    # -- prompts

    def draft(self, n: int) -> tuple[str, int]:
        """A first candidate for ``n`` tokens (usually exact) and the pool position after it.

        Starts are drawn without replacement (a seeded permutation), so no two prompts begin at the
        same place and share a prefix, until the pool's start places run out.
        """
        content = max(1, n - self.specials)
        last_start = len(self.ids) - content
        start = None
        while self._cursor < len(self._order):
            candidate = int(self._order[self._cursor])
            self._cursor += 1
            if candidate <= last_start:
                start = candidate
                break
        if start is None:  # places used up: repeat at random
            valid = self.starts[self.starts <= last_start]
            start = int(valid[self.rng.randint(len(valid))]) if len(valid) else 0
        return self.cut(start, content), (start + content) % len(self.ids)

    def fit(self, text: str, n: int, next_pos: int, measured: int | None = None) -> tuple[str, int]:
        """Trim or extend ``text`` until it measures ``n`` tokens; returns the text and its measured length."""
        target = max(n, self.specials + 1)
        length = token_len(self.tokenizer, text) if measured is None else measured
        for _ in range(_FIT_ATTEMPTS):
            if length == target:
                break
            if length > target:
                ids = self.tokenizer.encode(text, add_special_tokens=False)
                keep = max(1, len(ids) - (length - target))
                text = self.tokenizer.decode(ids[:keep])
            else:
                more = target - length
                text += self.cut(next_pos, more)
                next_pos = (next_pos + more) % len(self.ids)
            length = token_len(self.tokenizer, text)
        if length != target:
            text, length = self._fit_by_words(text, target)
        return text, length

    def _fit_by_words(self, text: str, target: int) -> tuple[str, int]:
        """Last resort for unruly tokenizers: cut at a word boundary, then add short words one at a time."""
        words = text.split()
        while words and token_len(self.tokenizer, " ".join(words)) > target:
            words.pop()
        text = " ".join(words)
        length = token_len(self.tokenizer, text)
        filler = ("a", "I", "x", "the", "of")
        guard = 0
        while length < target and guard < 4 * target + 64:
            for word in filler:
                candidate = f"{text} {word}" if text else word
                candidate_len = token_len(self.tokenizer, candidate)
                if candidate_len <= target:
                    text, length = candidate, candidate_len
                    break
            else:
                break
            guard += 1
        return text, length

    def measure(self, texts: list[str]) -> list[int]:
        """``token_len`` of each text in one batched call (parallel in fast tokenizers).

        The Rust backend's ``encode_batch_fast`` (no offsets) is used once a probe shows it counts
        exactly like ``tokenizer(text).input_ids``; otherwise the tokenizer itself is called.
        """
        fast = getattr(getattr(self.tokenizer, "backend_tokenizer", None), "encode_batch_fast", None)
        if fast is not None:
            probe = [*texts[:3], "x", ""]
            try:
                if [len(e.ids) for e in fast(probe)] == [token_len(self.tokenizer, t) for t in probe]:
                    return [len(e.ids) for e in fast(texts)]
            except Exception:  # an unexpected backend: measure the ordinary way
                pass
        return [len(ids) for ids in self.tokenizer(texts).input_ids]

    def build(self, lengths: list[int]) -> list[tuple[str, int]]:
        """One prompt per requested length, in order: (text, measured token length)."""
        if not lengths:
            return []
        self.prepare(max(lengths), len(lengths))
        drafts = [self.draft(n) for n in lengths]
        measured = self.measure([t for t, _ in drafts])
        return [
            self.fit(text, n, pos, length)
            for n, (text, pos), length in zip(lengths, drafts, measured, strict=True)
        ]
