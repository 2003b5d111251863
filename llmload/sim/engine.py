"""The continuous-batching timing model, free of I/O so it can also run in virtual time.

Each step admits waiting sequences while ``max_num_seqs`` and the KV capacity allow, gives one decode token
(or ``tokens_per_chunk``) to every running sequence that has its first token, and spends the rest of the
per-step token budget on prefill (chunked prefill, decode first as in vLLM V1). A sequence whose prefill
completes in a step emits its first token at the end of that step. The step's duration comes from the
profile's cost model, so TTFT grows with the queue and tokens/s rise with batch size until the step cost
catches up.

With a :class:`~llmload.sim.prefix_cache.PrefixCache`, a sequence looks its prompt blocks up when it is
admitted and starts with the cached tokens already prefilled, so its prefill (and its share of the step
cost) covers only the uncached tokens; its blocks enter the cache in the step its prefill completes.

With :class:`~llmload.sim.lora.AdapterSlots` (``--lora-modules``), the batch holds sequences of at most
``max_loras`` distinct adapters (vLLM's scheduler): a waiting sequence whose adapter would be one too many is
skipped, the ones behind it may still be admitted, and it goes back to the front of the queue. A sequence whose
adapter had to be loaded starts its prefill ``lora_load_ms`` after it was admitted.

A prefill-only sequence (a pooling request: embeddings, rerank) has no output: it is prefilled like any other,
sharing the step's token budget with the generating sequences, and leaves the batch (as a ``(seq, 0)`` pair) at
the end of the step its prefill completes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from llmload.sim.config import Profile

if TYPE_CHECKING:
    from llmload.sim.lora import AdapterSlots
    from llmload.sim.prefix_cache import PrefixCache


class Seq:
    """One request inside the engine."""

    __slots__ = ("adapter", "admitted", "blocks", "cached", "generated", "key", "output_tokens", "prefilled",
                 "prompt_tokens", "ready_at", "reserved", "stall_since")

    def __init__(self, key: object, prompt_tokens: int, output_tokens: int, blocks: Sequence[int] = (),
                 adapter: str = "", *, prefill_only: bool = False) -> None:
        """``prefill_only``: no output at all (``output_tokens`` is ignored); otherwise at least one token."""
        self.key = key
        self.prompt_tokens = max(1, prompt_tokens)
        self.output_tokens = 0 if prefill_only else max(1, output_tokens)
        #: the prompt's block keys for the prefix cache, and how many prompt tokens it had cached
        self.blocks = blocks
        self.cached = 0
        self.prefilled = 0
        self.generated = 0
        self.reserved = self.prompt_tokens + self.output_tokens
        #: when the first token was emitted, while the first decode step is held back (stall profiles)
        self.stall_since: float | None = None
        #: when the engine moved it from waiting to running (None until then): its queue time ends here
        self.admitted: float | None = None
        #: the LoRA adapter it names ('' for the base model), and when that adapter finished loading
        self.adapter = adapter
        self.ready_at = 0.0


class BatchEngine:
    """Plans and completes engine steps; the caller supplies the clock."""

    def __init__(self, profile: Profile, tokens_per_chunk: int = 1, cache: PrefixCache | None = None,
                 adapters: AdapterSlots | None = None) -> None:
        self.profile = profile
        self.tokens_per_chunk = max(1, tokens_per_chunk)
        self.cache = cache
        self.adapters = adapters
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []
        self.kv_reserved = 0
        self._decode: list[Seq] = []
        self._prefill_done: list[Seq] = []
        #: the planned step's work (the GPU power model's input): prompt tokens prefilled, sequences decoding
        self.step_prefill_tokens = 0
        self.step_decode_seqs = 0

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    def add(self, seq: Seq) -> None:
        self.waiting.append(seq)

    def cancel(self, seq: Seq) -> None:
        """Drop a sequence whose client went away."""
        if seq in self.running:
            self.running.remove(seq)
            self.kv_reserved -= seq.reserved
        elif seq in self.waiting:
            self.waiting.remove(seq)

    def _admit(self, now: float) -> None:
        """Move waiting sequences into the batch while seats and KV capacity allow; look up their prefixes.

        A sequence reserves its whole KV (prompt + output) here, so a running one never runs out and nothing is
        ever preempted: when the KV is spoken for, admission stops and the rest wait.
        """
        p = self.profile
        running = self.running
        waiting = self.waiting
        cache = self.cache
        adapters = self.adapters
        # adapter -> when it is loaded, over the running batch (a request joining it waits for the load too)
        ready: dict[str, float] = {}
        if adapters is not None:
            for s in running:
                if s.adapter and s.ready_at >= ready.get(s.adapter, 0.0):
                    ready[s.adapter] = s.ready_at
        skipped: list[Seq] = []
        if cache is not None:
            cache.begin_batch()
        while waiting and len(running) < p.max_num_seqs:
            seq = waiting[0]
            if running and self.kv_reserved + seq.reserved > p.kv_capacity:
                break
            waiting.popleft()
            if adapters is not None and seq.adapter:
                if seq.adapter not in ready:
                    if len(ready) >= adapters.max_loras:
                        skipped.append(seq)  # one adapter too many for this batch: it waits for a slot
                        continue
                    ready[seq.adapter] = now + adapters.admit(seq.adapter, ready)
                else:
                    adapters.admit(seq.adapter, ready)  # loaded (or loading): now the most recently used
                seq.ready_at = ready[seq.adapter]
            running.append(seq)
            seq.admitted = now
            self.kv_reserved += seq.reserved
            if cache is not None:  # a prompt shorter than a block is still a query (of no hits), as in vLLM
                seq.cached = cache.lookup(seq.blocks, seq.prompt_tokens)
                seq.prefilled = seq.cached
        waiting.extendleft(reversed(skipped))
        if cache is not None:
            cache.end_batch()

    def plan_step(self, now: float) -> float:
        """Choose this step's work and return its duration in seconds (0 when idle)."""
        p = self.profile
        if self.waiting:
            self._admit(now)
        running = self.running
        prefilling = False
        for s in running:
            if s.prefilled < s.prompt_tokens:
                prefilling = True
                break
        decode: list[Seq] = []
        kv_in_use = 0
        for s in running:
            kv_in_use += s.prefilled + s.generated
            if s.generated == 0:
                continue
            if s.stall_since is not None:
                if prefilling and (now - s.stall_since) * 1000.0 < p.stall_max_ms:
                    continue
                s.stall_since = None
            decode.append(s)

        budget = max(0, p.prefill_budget - len(decode))
        prefill_tokens = 0
        prefill_done: list[Seq] = []
        prefill_seqs = 0
        for s in running:
            if budget <= 0:
                break
            todo = s.prompt_tokens - s.prefilled
            if todo <= 0 or s.ready_at > now:  # prefilled, or its adapter still loading
                continue
            take = todo if todo < budget else budget
            s.prefilled += take
            budget -= take
            prefill_tokens += take
            prefill_seqs += 1
            if s.prefilled == s.prompt_tokens:
                prefill_done.append(s)

        self._decode = decode
        self._prefill_done = prefill_done
        self.step_prefill_tokens, self.step_decode_seqs = prefill_tokens, len(decode)
        if not decode and not prefill_seqs:
            return 0.0
        ms = (
            p.base_ms
            + p.prefill_ms_per_1k * prefill_tokens / 1000.0
            + p.seq_ms * (len(decode) + prefill_seqs)
            + p.kv_ms_per_1k * kv_in_use / 1000.0
        )
        return ms / 1000.0

    def complete_step(self, now: float) -> list[tuple[Seq, int]]:
        """Emit the planned tokens; finished sequences leave the batch. Returns (seq, tokens) pairs."""
        out: list[tuple[Seq, int]] = []
        tpc = self.tokens_per_chunk
        stall = self.profile.first_decode_stall
        finished = False
        cache = self.cache
        for s in self._prefill_done:
            if cache is not None and s.blocks:
                cache.insert(s.blocks)
            if not s.output_tokens:  # prefill-only: done now, with nothing generated
                out.append((s, 0))
                finished = True
                continue
            s.generated = 1
            out.append((s, 1))
            if s.generated >= s.output_tokens:
                finished = True
            elif stall:
                s.stall_since = now
        for s in self._decode:
            n = s.output_tokens - s.generated
            if n > tpc:
                n = tpc
            s.generated += n
            out.append((s, n))
            if s.generated >= s.output_tokens:
                finished = True
        if finished:
            keep = []
            for s in self.running:
                # a prefill-only sequence has nothing to generate but its prefill must be done
                if s.generated >= s.output_tokens and s.prefilled >= s.prompt_tokens:
                    self.kv_reserved -= s.reserved
                else:
                    keep.append(s)
            self.running = keep
        self._decode = []
        self._prefill_done = []
        return out


def simulate(
    profile: Profile, requests: Iterable[tuple[float, int, int]], tokens_per_chunk: int = 1
) -> list[list[float]]:
    """Run the engine in virtual time. ``requests`` are (arrival_s, prompt_tokens, output_tokens);
    returns each request's chunk emission times in the same order."""
    pending = sorted(
        ((arrival, i, Seq(i, prompt, output)) for i, (arrival, prompt, output) in enumerate(requests)),
        key=lambda item: item[0],
    )
    times: list[list[float]] = [[] for _ in pending]
    engine = BatchEngine(profile, tokens_per_chunk)
    now = 0.0
    nxt = 0
    while nxt < len(pending) or not engine.idle:
        while nxt < len(pending) and pending[nxt][0] <= now:
            engine.add(pending[nxt][2])
            nxt += 1
        if engine.idle:
            now = pending[nxt][0]
            continue
        duration = engine.plan_step(now)
        now += duration if duration > 0 else 1e-4
        for seq, _n in engine.complete_step(now):
            times[seq.key].append(now)  # type: ignore[index]
    return times
