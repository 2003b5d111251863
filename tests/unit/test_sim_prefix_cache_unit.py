"""The simulator's prefix cache on its own: chained block keys, vLLM's last-token rule, LRU order and capacity,
and what the engine, the request parser and the chat wire make of it."""

from __future__ import annotations

import json

import orjson
import pytest

from llmload.sim.config import PROFILES, SimConfig
from llmload.sim.engine import BatchEngine, Seq
from llmload.sim.prefix_cache import PrefixCache, cacheable_blocks, id_block_hashes, text_block_hashes
from llmload.sim.requests import RequestParser, render_chat
from llmload.sim.text import estimate_tokens
from llmload.sim.wire import ChatWire

BLOCK = 16


def keys_of(text: str, block: int = BLOCK) -> list[int]:
    return text_block_hashes(text, block, estimate_tokens(text))


def ids(n: int, start: int = 0) -> list[int]:
    return list(range(start, start + n))


# -- chained keys --------------------------------------------------------------------------------------------


def test_text_keys_cover_full_blocks_of_four_character_tokens():
    assert len(keys_of("x" * 64 * 3)) == 3  # 192 chars = 48 tokens = 3 blocks
    assert len(keys_of("x" * (64 * 3 - 1))) == 3  # 191 chars = 48 tokens, the last one partial: its block too
    assert len(keys_of("x" * (64 * 3 - 4))) == 2  # 188 chars = 47 tokens
    assert keys_of("x" * 63) == keys_of("x" * 63)  # deterministic within a process


def test_a_key_covers_everything_before_it():
    """Same block content after a different prefix gets a different key: only true prefixes match."""
    a = keys_of("A" * 64 + "B" * 64)
    b = keys_of("C" * 64 + "B" * 64)
    assert a[0] != b[0] and a[1] != b[1]
    extended = keys_of("A" * 64 + "B" * 64 + "tail of a longer prompt" * 10)
    assert extended[:2] == a


def test_id_keys_are_chained_too():
    base = id_block_hashes(ids(40), BLOCK)
    assert len(base) == 2
    assert id_block_hashes(ids(100), BLOCK)[:2] == base
    changed = [99, *ids(39, 1)]
    assert id_block_hashes(changed, BLOCK)[1] != base[1]  # block 1 is identical, block 0 is not


# -- lookup, the last-token rule, LRU ----------------------------------------------------------------------


def test_last_token_rule():
    """vLLM recomputes at least the last prompt token, so a whole-prompt hit counts one block less."""
    assert cacheable_blocks(32, 16) == 1
    assert cacheable_blocks(33, 16) == 2
    assert cacheable_blocks(1, 16) == 0
    cache = PrefixCache(10_000, BLOCK)
    prompt = id_block_hashes(ids(32), BLOCK)
    cache.insert(prompt)
    assert len(cache) == 2
    assert cache.lookup(prompt, 32) == 16  # both blocks are there, only one counts
    longer = id_block_hashes(ids(33), BLOCK)
    assert cache.lookup(longer, 33) == 32


def test_lookup_stops_at_the_first_miss():
    cache = PrefixCache(10_000, BLOCK)
    keys = id_block_hashes(ids(160), BLOCK)
    cache.insert(keys[:3] + keys[5:])  # blocks 3 and 4 missing
    assert cache.lookup(keys, 160) == 3 * BLOCK
    assert cache.lookup(id_block_hashes([7, *ids(159, 1)], BLOCK), 160) == 0
    assert cache.lookup([], 160) == 0


def test_capacity_is_in_tokens_and_evicts_least_recently_used():
    cache = PrefixCache(4 * BLOCK + 5, BLOCK)  # room for 4 blocks
    a = id_block_hashes(ids(2 * BLOCK + 1, 0), BLOCK)
    b = id_block_hashes(ids(2 * BLOCK + 1, 1000), BLOCK)
    c = id_block_hashes(ids(2 * BLOCK + 1, 2000), BLOCK)
    cache.insert(a)
    cache.insert(b)
    assert cache.tokens == 4 * BLOCK
    assert cache.lookup(a, 2 * BLOCK + 1) == 2 * BLOCK  # a is now the most recent
    cache.insert(c)  # evicts b, the least recently used
    assert cache.tokens == 4 * BLOCK <= cache.capacity_blocks * BLOCK
    assert all(k in cache for k in a + c)
    assert not any(k in cache for k in b)


def test_a_prompt_loses_its_tail_before_its_head():
    """A block is useless once a block before it is gone, so eviction starts at the end of a prompt."""
    cache = PrefixCache(3 * BLOCK, BLOCK)
    a = id_block_hashes(ids(3 * BLOCK + 1), BLOCK)
    cache.insert(a)
    cache.insert(id_block_hashes(ids(BLOCK + 1, 500), BLOCK))  # one new block pushes one of a's out
    assert a[0] in cache and a[1] in cache and a[2] not in cache
    assert cache.lookup(a, 3 * BLOCK + 1) == 2 * BLOCK


def test_a_prompt_longer_than_the_cache_keeps_its_head():
    cache = PrefixCache(2 * BLOCK, BLOCK)
    keys = id_block_hashes(ids(10 * BLOCK), BLOCK)
    cache.insert(keys)
    assert len(cache) == 2 and keys[0] in cache and keys[1] in cache


def test_zero_capacity_holds_nothing():
    cache = PrefixCache(0, BLOCK)
    cache.insert(id_block_hashes(ids(100), BLOCK))
    assert len(cache) == 0


def test_block_size_must_be_positive():
    with pytest.raises(ValueError, match="block_size"):
        PrefixCache(100, 0)


# -- the engine charges prefill for uncached tokens only -----------------------------------------------------


def _ttft(engine: BatchEngine, seq: Seq) -> float:
    """Virtual seconds from adding ``seq`` to its first token."""
    engine.add(seq)
    now = 0.0
    while True:
        now += engine.plan_step(now)
        if any(s is seq for s, _ in engine.complete_step(now)):
            return now


def _drain(engine: BatchEngine) -> None:
    now = 0.0
    while not engine.idle:
        now += engine.plan_step(now) or 1e-4
        engine.complete_step(now)


def test_engine_prefills_only_uncached_tokens():
    profile = PROFILES["l40-qwen3-8b"]
    prompt = 1500
    keys = id_block_hashes(ids(prompt), BLOCK)
    engine = BatchEngine(profile, cache=PrefixCache(100_000, BLOCK))
    first = Seq("a", prompt, 4, keys)
    cold = _ttft(engine, first)
    _drain(engine)
    second = Seq("b", prompt, 4, keys)
    warm = _ttft(engine, second)
    assert (first.cached, second.cached) == (0, 1488)
    # one step each: 27 ms + 28 ms per 1k prefill tokens (+ tiny per-sequence and KV terms)
    assert cold == pytest.approx((27.0 + 28.0 * 1.5) / 1000, abs=0.001)
    assert warm == pytest.approx((27.0 + 28.0 * 0.012) / 1000, abs=0.001)

    no_cache = BatchEngine(profile)
    assert _ttft(no_cache, Seq("c", prompt, 4, keys)) == pytest.approx(cold, abs=1e-9)


# -- requests: rendering, keys, reasoning ------------------------------------------------------------------


def _parse(config: SimConfig, kind: str, body: dict):
    return RequestParser(config).parse(kind, orjson.dumps(body))


def test_chat_render_keeps_turns_prefixes():
    turn1 = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]
    turn2 = [*turn1, {"role": "assistant", "content": "hi"}, {"role": "user", "content": [{"type": "text", "text": "more"}]}]
    assert render_chat(turn1) == "system: be brief\nuser: hello\n"
    assert render_chat(turn2).startswith(render_chat(turn1))


def test_parser_hashes_only_with_the_cache_on():
    body = {"model": "llmload-sim", "prompt": "x" * 400, "max_tokens": 2}
    assert _parse(SimConfig(), "completions", body).block_hashes == []
    req = _parse(SimConfig(prefix_cache_tokens=1000), "completions", body)
    assert req.prompt_tokens == 100 and len(req.block_hashes) == 6 and req.prefix_cache
    ids_req = _parse(SimConfig(prefix_cache_tokens=1000), "completions", {**body, "prompt": ids(40)})
    assert ids_req.block_hashes == id_block_hashes(ids(40), BLOCK)


def test_a_longer_conversation_shares_the_earlier_keys():
    cfg = SimConfig(prefix_cache_tokens=100_000)
    history = [{"role": "system", "content": "s" * 3000}, {"role": "user", "content": "q1"}]
    later = [*history, {"role": "assistant", "content": "a1" * 50}, {"role": "user", "content": "q2"}]
    first = _parse(cfg, "chat", {"model": "llmload-sim", "messages": history})
    second = _parse(cfg, "chat", {"model": "llmload-sim", "messages": later})
    assert len(first.block_hashes) >= 11
    assert second.block_hashes[: len(first.block_hashes)] == first.block_hashes


def test_reasoning_counts_for_chat_only_and_never_exceeds_the_output():
    cfg = SimConfig(reasoning_tokens=5)
    chat = {"model": "llmload-sim", "messages": [{"role": "user", "content": "x"}], "max_tokens": 8}
    assert _parse(cfg, "chat", chat).reasoning_tokens == 5
    assert _parse(cfg, "chat", {**chat, "max_tokens": 3}).reasoning_tokens == 3
    assert _parse(cfg, "completions", {"model": "llmload-sim", "prompt": "x", "max_tokens": 8}).reasoning_tokens == 0


def test_chat_without_max_tokens_fits_the_context():
    cfg = SimConfig(max_model_len=1000, default_max_tokens=256)
    body = {"model": "llmload-sim", "messages": [{"role": "user", "content": "x" * 3600}]}
    req = _parse(cfg, "chat", body)
    assert req.prompt_tokens + req.max_tokens == 1000


def test_trace_prompts_keep_role_and_content():
    cfg = SimConfig(trace_prompts=True)
    msgs = [{"role": "user", "content": "hi", "name": "ann"}]
    assert _parse(cfg, "chat", {"model": "llmload-sim", "messages": msgs}).trace_prompt == [
        {"role": "user", "content": "hi"}]
    assert _parse(cfg, "completions", {"model": "llmload-sim", "prompt": "p"}).trace_prompt == "p"
    assert _parse(SimConfig(), "completions", {"model": "llmload-sim", "prompt": "p"}).trace_prompt is None


def test_a_chunk_across_the_reasoning_boundary_carries_both_fields():
    cfg = SimConfig(reasoning_tokens=3)
    req = _parse(cfg, "chat", {"model": "llmload-sim", "messages": [{"role": "user", "content": "x"}],
                               "max_tokens": 6, "stream": True})
    wire = ChatWire(req, "vllm", "chatcmpl-1", 0)
    event = wire.token_event(b"ignored", 5, False, 4)  # tokens 1..4: two reasoning, two answer
    delta = json.loads(event[len(b"data: "):])["choices"][0]["delta"]
    assert delta["reasoning_content"] and delta["content"]
    assert delta["reasoning_content"].count(" ") == 2 and delta["content"].count(" ") == 2
