"""An LRU prefix cache of prompt blocks, counted the way vLLM counts its automatic prefix caching.

A prompt is cut into full blocks of ``block_size`` tokens; block ``i``'s key is a chained hash that covers
every token up to the end of block ``i``, so a block only matches when the whole prefix before it matches.
A request looks up its blocks in order and stops at the first miss. Like vLLM, the whole prompt is never a
hit: at least the last token is computed again (it yields the logits of the first output token), so at
most ``(prompt_tokens - 1) // block_size`` blocks count as cached.

Token identity: with a tokenizer the blocks hold its ids; without one the text is cut into 4-character
pieces, the same ~4 characters per token that :func:`llmload.sim.text.estimate_tokens` counts. Keys use
Python's ``hash``, which is seeded per process: each simulator process (``--workers``) has its own cache,
as separate engine replicas do.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

#: characters per token when no tokenizer is given (see ``estimate_tokens``)
CHARS_PER_TOKEN = 4


def text_block_hashes(text: str, block_size: int, prompt_tokens: int) -> list[int]:
    """Chained keys of the full blocks of ``text``, cut into 4-character tokens."""
    width = block_size * CHARS_PER_TOKEN
    keys: list[int] = []
    key = 0
    for start in range(0, (prompt_tokens // block_size) * width, width):
        key = hash((key, text[start : start + width]))
        keys.append(key)
    return keys


def id_block_hashes(ids: Sequence[int], block_size: int) -> list[int]:
    """Chained keys of the full blocks of a token id sequence."""
    keys: list[int] = []
    key = 0
    for start in range(0, len(ids) - block_size + 1, block_size):
        key = hash((key, tuple(ids[start : start + block_size])))
        keys.append(key)
    return keys


def cacheable_blocks(prompt_tokens: int, block_size: int) -> int:
    """Most blocks a prompt can hit: its last token is always recomputed (vLLM's rule)."""
    return max(0, prompt_tokens - 1) // block_size


class PrefixCache:
    """Block keys in least-recently-used order, holding at most ``capacity_tokens`` tokens of blocks."""

    def __init__(self, capacity_tokens: int, block_size: int = 16) -> None:
        if block_size < 1:
            raise ValueError("block_size must be at least 1")
        self.block_size = block_size
        self.capacity_blocks = max(0, capacity_tokens) // block_size
        self._blocks: OrderedDict[int, None] = OrderedDict()
        self.hits = 0
        self.queries = 0
        #: hit tokens / queried tokens of the latest batch of lookups (SGLang's ``cache_hit_rate`` gauge)
        self.batch_hit_rate = 0.0
        self._batch_start = (0, 0)

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, key: int) -> bool:
        return key in self._blocks

    @property
    def tokens(self) -> int:
        """Tokens held in cached blocks."""
        return len(self._blocks) * self.block_size

    def lookup(self, keys: Sequence[int], prompt_tokens: int) -> int:
        """Cached prompt tokens for these block keys (a multiple of the block size); refreshes the hits."""
        blocks = self._blocks
        limit = min(len(keys), cacheable_blocks(prompt_tokens, self.block_size))
        hit = 0
        while hit < limit and keys[hit] in blocks:
            hit += 1
        self._touch(keys[:hit])
        self.queries += prompt_tokens
        self.hits += hit * self.block_size
        return hit * self.block_size

    def begin_batch(self) -> None:
        """Lookups from here to :meth:`end_batch` are one batch (the requests one engine step admits)."""
        self._batch_start = (self.queries, self.hits)

    def end_batch(self) -> None:
        """Set :attr:`batch_hit_rate` from this batch's lookups; a batch without any keeps the previous rate."""
        queries, hits = self._batch_start
        if self.queries > queries:
            self.batch_hit_rate = (self.hits - hits) / (self.queries - queries)

    def insert(self, keys: Sequence[int]) -> None:
        """Add a prefilled prompt's blocks, then evict least recently used blocks beyond the capacity."""
        self._touch(keys)
        blocks = self._blocks
        while len(blocks) > self.capacity_blocks:
            blocks.popitem(last=False)

    def _touch(self, keys: Sequence[int]) -> None:
        """Make ``keys`` most recent, the first block last: a prompt's tail is evicted before its head,
        which matters because a block is useless once any block before it is gone."""
        blocks = self._blocks
        for key in reversed(keys):
            if key in blocks:
                blocks.move_to_end(key)
            else:
                blocks[key] = None
