"""Prompts for a KV-cache trace (Mooncake): equal ``hash_ids`` become byte-identical blocks of tokens.

A Mooncake row names its prompt's prefix blocks of ``block_size`` (512) tokens by id; two requests whose first
``k`` ids agree share ``k`` blocks of prefix, which a server's prefix cache can reuse. Each id's block is the
text of ``block_size`` tokens cut from the seeded token pool at a place drawn from the seed and the id alone, so
the same id is the same text in every request, every run and every worker. A row of ``n`` tokens is the blocks of
its first ``n // block_size`` ids, then ``n mod block_size`` tokens of its own (unique: cut at a place no other
request starts); what special tokens the tokenizer adds come off that tail. Every block and tail starts at a word
(after a space), so the text of one never runs into the next. The whole prompt is measured once and, where it
is off by a token or two (a word cut at a block's end re-tokenizes differently), its end is fitted like any
trace prompt: the prefix blocks stay as they are. docs/arrivals.md, "Mooncake traces".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from importlib.resources import files
from pathlib import Path

import numpy as np

from llmload.datasets.traces.formats import TraceRow
from llmload.datasets.traces.prompts import PromptBuilder

#: Mooncake's block size: the tokens each hash id stands for
DEFAULT_BLOCK_SIZE = 512


def default_mooncake_path() -> Path:
    """The small synthetic Mooncake-format trace shipped inside the package (``llmload/data/``, written by
    ``datasets/make_mooncake_sample.py``): what ``--dataset-name mooncake`` replays without ``--dataset-path``."""
    return Path(str(files("llmload").joinpath("data"))) / "mooncake_sample.jsonl"


def word_starts(builder: PromptBuilder, width: int) -> np.ndarray:
    """Pool tokens that begin a word (the character before them is a space) with ``width`` tokens after them:
    where blocks may start, so that the text of one block never runs into the next."""
    last = len(builder.ids) - width
    if builder.ends is None:
        return np.arange(max(1, last), dtype=np.int64)
    before = builder.ends[:-1]
    starts = np.flatnonzero(np.frombuffer(builder.text.encode("utf-32-le"), dtype=np.uint32)[before] == ord(" ")) + 1
    starts = starts[starts < last]
    return starts if len(starts) else np.arange(max(1, last), dtype=np.int64)


def aligned_word_starts(builder: PromptBuilder, width: int) -> np.ndarray:
    """The :func:`word_starts` from which ``width`` tokens end where a word ends (the next token starts one, or the
    pool ends): a block cut there is whole words."""
    starts = word_starts(builder, width)
    ends = starts + width
    if builder.ends is None:
        return starts
    begins = np.zeros(len(builder.ids) + 1, dtype=bool)
    begins[word_starts(builder, 0)] = True
    begins[len(builder.ids)] = True
    return starts[begins[ends]]


class BlockPrompts:
    """Builds the prompts of Mooncake rows from one :class:`PromptBuilder`'s pool."""

    def __init__(self, builder: PromptBuilder, block_size: int = DEFAULT_BLOCK_SIZE) -> None:
        self.builder = builder
        self.block_size = block_size
        self._blocks: dict[int, str] = {}
        self._word_starts = np.zeros(0, dtype=np.int64)

    def build(self, rows: Sequence[TraceRow]) -> list[tuple[str, int]]:
        """One (text, measured token length) per row, in order."""
        if not rows:
            return []
        builder = self.builder
        builder.prepare(max(2 * self.block_size, max(r.input_tokens for r in rows)), len(rows))
        self._word_starts = word_starts(builder, self.block_size)
        drafts = [self._draft(row) for row in rows]
        measured = builder.measure([text for text, _ in drafts])
        return [builder.fit(text, max(1, row.input_tokens), pos, length)
                for row, (text, pos), length in zip(rows, drafts, measured, strict=True)]

    def _draft(self, row: TraceRow) -> tuple[str, int]:
        """The row's blocks and its own tail, and the pool position after the tail (for fitting)."""
        b = self.builder
        content = max(1, row.input_tokens - b.specials)
        ids = row.hash_ids or ()
        full = min(len(ids), content // self.block_size)
        parts = [self._block(h) for h in ids[:full]]
        tail = content - full * self.block_size
        pos = 0
        if tail:
            text, pos = b.draft(tail + b.specials)  # its own start place: unique to this request
            parts.append(text)
        return "".join(parts), pos

    def _block(self, hash_id: int) -> str:
        """The text of ``hash_id``'s block: the same for the same id and seed, wherever it appears."""
        text = self._blocks.get(hash_id)
        if text is None:
            rng = np.random.default_rng([self.builder.seed & 0xFFFFFFFF, hash_id & 0xFFFFFFFFFFFFFFFF])
            start = int(self._word_starts[rng.integers(len(self._word_starts))])
            text = self._blocks[hash_id] = self.builder.cut(start, self.block_size)
        return text


def prefix_reuse(rows: Sequence[TraceRow], block_size: int = DEFAULT_BLOCK_SIZE) -> list[int]:
    """Per row, the prompt tokens an unbounded prefix cache holds from the rows before it: ``block_size`` times
    the longest run of its leading full blocks that an earlier row began with (the trace's own reuse)."""
    return chained_reuse([(r.hash_ids or ())[: r.input_tokens // block_size] for r in rows], block_size)


def chained_reuse(chains: Iterable[Sequence[int]], block_size: int) -> list[int]:
    """For each chain of block ids in the order given, the tokens of its leading blocks that an earlier chain
    already began with: what a prefix cache that never evicts serves (a block hits only after a prefix of hits,
    as vLLM's and SGLang's caches chain their block hashes). A trie of the chains seen: linear in their blocks."""
    nodes: dict[tuple[int, int], int] = {}
    out = []
    for chain in chains:
        parent, reused, hit = 0, 0, True
        for block in chain:
            node = nodes.get((parent, block))
            if node is None:
                node = nodes[(parent, block)] = len(nodes) + 1
                hit = False
            elif hit:
                reused += block_size
            parent = node
        out.append(reused)
    return out
