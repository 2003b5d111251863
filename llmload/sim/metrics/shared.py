"""The numbers behind ``/metrics``, in memory that every worker process shares.

``--workers N`` runs N engine replicas on one port and a scrape reaches whichever one SO_REUSEPORT picks, so each
worker writes its own block of doubles (gauges, counters, histogram buckets) in an anonymous shared mmap made
before the fork, and any worker's answer reads all N blocks. One writer per block needs no lock; an aligned
8-byte store is never seen half-written, and a scrape that sees one worker a step apart from another is what a
scrape of any live server sees.

The writes sit next to the engine: gauges once per engine step (or arrival/departure), tokens once per step,
histograms at a request's first token and at its end; nothing is written per sent chunk in engine mode.
"""

from __future__ import annotations

import mmap
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from itertools import pairwise
from types import MappingProxyType

from llmload.sim.metrics.gpu import GpuBoard
from llmload.sim.metrics.spec import FINISH_REASONS, HISTOGRAMS, Dialect

#: a worker block's scalars, in order; ``success_<reason>`` count ended requests by vLLM finish reason
SCALARS = ("running", "waiting", "kv_usage", "kv_tokens", "kv_capacity", "batch_hit_rate", "prefix_queries",
           "prefix_hits", "prompt_tokens", "generation_tokens", "cached_tokens", "preemptions", "requests",
           "aborted", *(f"success_{reason}" for reason in FINISH_REASONS), "mm_queries", "mm_hits")
SLOT = MappingProxyType({name: i for i, name in enumerate(SCALARS)})
_RUNNING, _WAITING, _KV_USAGE, _KV_TOKENS = SLOT["running"], SLOT["waiting"], SLOT["kv_usage"], SLOT["kv_tokens"]
_KV_CAPACITY, _HIT_RATE = SLOT["kv_capacity"], SLOT["batch_hit_rate"]
_QUERIES, _HITS = SLOT["prefix_queries"], SLOT["prefix_hits"]
_PROMPT, _GENERATED, _CACHED = SLOT["prompt_tokens"], SLOT["generation_tokens"], SLOT["cached_tokens"]
_REQUESTS, _ABORTED, _SUCCESS = SLOT["requests"], SLOT["aborted"], SLOT["success_stop"]
_MM_QUERIES, _MM_HITS = SLOT["mm_queries"], SLOT["mm_hits"]


class SharedStats:
    """N workers' blocks: the scalars of :data:`SCALARS`, then per histogram its buckets (the last is +Inf) and
    its sum. A bucket holds its own observations (not cumulative); the exposition sums them."""

    def __init__(self, dialect: Dialect, workers: int = 1) -> None:
        self.dialect = dialect
        self.workers = max(1, workers)
        offsets: dict[str, int] = {}
        size = len(SCALARS)
        for name in HISTOGRAMS:
            offsets[name] = size
            size += len(dialect.buckets[name]) + 2
        self.hist_offsets = MappingProxyType(offsets)
        self.block = size
        self._mem = mmap.mmap(-1, 8 * size * self.workers)  # anonymous and MAP_SHARED: forked workers share it
        self.view = memoryview(self._mem).cast("d")
        #: the replicas' work for /dcgm/metrics (its clock starts here: before the fork, the same for all workers)
        self.gpu = GpuBoard(self.workers)

    def scalar(self, index: int, name: str) -> float:
        return self.view[index * self.block + SLOT[name]]

    def histogram(self, index: int, name: str) -> tuple[list[float], float]:
        """Worker ``index``'s bucket counts (the last is +Inf) and sum of histogram ``name``."""
        start = index * self.block + self.hist_offsets[name]
        n = len(self.dialect.buckets[name]) + 1
        return list(self.view[start : start + n]), self.view[start + n]

    def close(self) -> None:
        self.view.release()
        self._mem.close()
        self.gpu.close()


class WorkerStats:
    """One worker's writes into its own block of a :class:`SharedStats`."""

    __slots__ = ("_at_finish", "_base", "_bounds", "_offsets", "_per_token", "_view")

    def __init__(self, shared: SharedStats, index: int, kv_capacity: int) -> None:
        self._view = shared.view
        self._base = index * shared.block
        dialect = shared.dialect
        self._offsets = tuple(self._base + shared.hist_offsets[name] for name in HISTOGRAMS)
        self._bounds = tuple(dialect.buckets[name] for name in HISTOGRAMS)
        self._per_token = dialect.itl_per_token
        self._at_finish = dialect.tokens_at_finish
        self._view[self._base + _KV_CAPACITY] = kv_capacity

    def set_engine(self, running: int, waiting: int, kv_tokens: int) -> None:
        """The scheduler's state now: running and waiting requests, KV tokens reserved."""
        v, b = self._view, self._base
        v[b + _RUNNING] = running
        v[b + _WAITING] = waiting
        v[b + _KV_TOKENS] = kv_tokens
        capacity = v[b + _KV_CAPACITY]
        v[b + _KV_USAGE] = min(1.0, kv_tokens / capacity) if capacity > 0 else 0.0

    def set_cache(self, queries: int, hits: int, batch_hit_rate: float) -> None:
        """The prefix cache's running totals (tokens) and its latest batch's hit rate."""
        v, b = self._view, self._base
        v[b + _QUERIES] = queries
        v[b + _HITS] = hits
        v[b + _HIT_RATE] = batch_hit_rate

    def set_mm_cache(self, queries: int, hits: int) -> None:
        """The multimodal cache's running totals (images looked up, images seen before)."""
        v, b = self._view, self._base
        v[b + _MM_QUERIES] = queries
        v[b + _MM_HITS] = hits

    def add_generated(self, tokens: int) -> None:
        """Tokens the engine produced in a step (vLLM counts them then; SGLang when the request ends)."""
        if not self._at_finish:
            self._view[self._base + _GENERATED] += tokens

    def first_token(self, ttft: float, prompt_tokens: int) -> None:
        """A request's prefill is done and its first token out."""
        self._observe(0, ttft)
        if not self._at_finish:
            self._view[self._base + _PROMPT] += prompt_tokens

    def finish(self, reason: str, e2e: float, queue: float | None, times: Sequence[float], tokens: Sequence[int],
               counts: tuple[int, int, int]) -> None:
        """A request the engine saw has ended: ``reason`` as vLLM names it, its chunk send times and tokens, and
        ``counts`` = (prompt, generated, cached) tokens. ``queue`` is None if it was never admitted."""
        v, b = self._view, self._base
        v[b + _SUCCESS + FINISH_REASONS.index(reason)] += 1
        v[b + _REQUESTS] += 1
        if reason == "abort":
            v[b + _ABORTED] += 1
        prompt, generated, cached = counts
        v[b + _CACHED] += cached
        if self._at_finish:
            v[b + _PROMPT] += prompt
            v[b + _GENERATED] += generated
        self._observe(2, e2e)
        if queue is not None:
            self._observe(3, queue)
        if len(times) > 1:
            self._observe_itl(times, tokens)

    def _observe(self, which: int, value: float) -> None:
        bounds = self._bounds[which]
        off = self._offsets[which]
        v = self._view
        v[off + bisect_left(bounds, value)] += 1
        v[off + len(bounds) + 1] += value

    def _observe_itl(self, times: Sequence[float], tokens: Sequence[int]) -> None:
        """The gaps between a request's chunks: one observation per chunk (vLLM, one per engine step), or per token,
        a chunk of n tokens as n observations of gap / n (SGLang). Chunks a stall held back and never sent (time
        0) are left out. Runs once per request; the buckets come from one sort, not a search per token."""
        if times and times[-1] <= 0.0:  # held chunks are the last ones
            times = times[: times.index(0.0)]
        if len(times) < 2:
            return
        bounds = self._bounds[1]
        off = self._offsets[1]
        v = self._view
        gaps = [b - a for a, b in pairwise(times)]
        if self._per_token and tokens.count(1) != len(tokens):
            for gap, n in zip(gaps, tokens[1:], strict=False):
                v[off + bisect_left(bounds, gap / n)] += n
        else:
            gaps.sort()
            below = 0
            for i, bound in enumerate(bounds):
                upto = bisect_right(gaps, bound)
                v[off + i] += upto - below
                below = upto
            v[off + len(bounds)] += len(gaps) - below
        v[off + len(bounds) + 1] += times[-1] - times[0]
