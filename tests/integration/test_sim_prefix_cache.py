"""`llmload sim --prefix-cache-tokens`: repeated and extended prompts hit cached blocks, report
``cached_tokens`` as vLLM does and get a shorter prefill; `--reasoning-tokens` streams reasoning first;
the trace records cached/prefilled tokens, the session and (with --trace-prompts) the prompt.

TTFTs come from the trace (first chunk sent - request received, both server clocks) and are compared with
wide margins: under the default profile a 3000-token prompt takes two ~70-85 ms prefill steps, a cached
one a single ~28 ms step.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import openai
import pytest
from support import trace_lines

MODEL = "llmload-sim"
BLOCK = 16
#: ~3000 prompt tokens at ~4 characters a token
LONG = "".join(f"sentence {i} of a long shared document. " for i in range(400))[:12_000]


def read_trace(path: Path, count: int, timeout: float = 20.0) -> list[dict]:
    """The first ``count`` trace lines (a line is written as its request ends, maybe after the client read it)."""
    deadline = time.monotonic() + timeout
    while True:
        lines = trace_lines(path)
        if len(lines) >= count or time.monotonic() > deadline:
            assert len(lines) >= count, f"{len(lines)} of {count} trace lines"
            return lines[:count]
        time.sleep(0.02)


def ttft(entry: dict) -> float:
    return entry["chunks"][0] - entry["received"]


def completion(raw_http, sim, prompt: str, **extra) -> dict:
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 4, "ignore_eos": True, **extra}
    r = raw_http.post(sim.port, "/v1/completions", body)
    assert r.status == 200, r.body
    return r.json()


def chat_stream(raw_http, sim, messages: list[dict], max_tokens: int = 6, headers: dict | None = None) -> list[dict]:
    body = {"model": MODEL, "messages": messages, "max_tokens": max_tokens, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    r = raw_http.post(sim.port, "/v1/chat/completions", body, headers=headers or {})
    assert r.status == 200 and r.complete, r.body
    return [e.json() for e in r.data_events()]


def conversation(raw_http, sim, turns: int = 3) -> list[dict]:
    """A conversation that re-sends its history each turn, each turn pasting ~800 more tokens; the usages."""
    messages = [{"role": "system", "content": LONG}]
    usages = []
    for turn in range(turns):
        messages.append({"role": "user", "content": f"question {turn}: " + "more context " * 250})
        events = chat_stream(raw_http, sim, messages, headers={"X-Session-ID": "conv-1"})
        reply = "".join((e["choices"][0]["delta"].get("content") or "") for e in events if e["choices"])
        usages.append(events[-1]["usage"])
        messages.append({"role": "assistant", "content": reply})
    return usages


@pytest.fixture
def cached_sim(start_sim, tmp_path):
    trace = tmp_path / "trace.jsonl"
    return start_sim("--prefix-cache-tokens", "200000", "--trace-file", trace), trace


def test_the_same_prompt_twice_hits_the_cache(cached_sim):
    sim, trace = cached_sim
    client = openai.OpenAI(base_url=f"{sim.url}/v1", api_key="x", max_retries=0, timeout=30)
    try:
        first, second = (client.completions.create(model=MODEL, prompt=LONG, max_tokens=4,
                                                   extra_body={"ignore_eos": True}) for _ in range(2))
    finally:
        client.close()
    prompt = first.usage.prompt_tokens
    assert prompt == second.usage.prompt_tokens == 3000
    assert first.usage.prompt_tokens_details.cached_tokens == 0  # always reported with the cache on
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert 0 < cached < prompt and cached % BLOCK == 0
    assert cached == (prompt - 1) // BLOCK * BLOCK  # every full block but the one holding the last token

    cold, warm = read_trace(trace, 2)
    assert (cold["cached_tokens"], cold["prefill_tokens"]) == (0, prompt)
    assert (warm["cached_tokens"], warm["prefill_tokens"]) == (cached, prompt - cached)
    assert ttft(warm) < 0.6 * ttft(cold), (ttft(cold), ttft(warm))


def test_a_longer_conversation_reuses_its_history(cached_sim, raw_http):
    sim, trace = cached_sim
    usages = conversation(raw_http, sim)
    entries = read_trace(trace, 3)
    assert usages[0]["prompt_tokens_details"]["cached_tokens"] == 0
    for before, after, entry in zip(usages, usages[1:], entries[1:], strict=False):
        cached = after["prompt_tokens_details"]["cached_tokens"]
        assert cached % BLOCK == 0 and cached == entry["cached_tokens"]
        # the previous turn's prompt is a prefix of this one: all its full blocks hit (maybe bar the last)
        assert before["prompt_tokens"] - 2 * BLOCK < cached < after["prompt_tokens"]
        assert entry["prefill_tokens"] == after["prompt_tokens"] - cached
    assert [e["session"] for e in entries] == ["conv-1"] * 3
    assert ttft(entries[2]) < 0.6 * ttft(entries[0]), [ttft(e) for e in entries]


def test_without_the_cache_nothing_is_cached_and_ttft_grows(start_sim, raw_http, tmp_path):
    trace = tmp_path / "trace.jsonl"
    sim = start_sim("--prefix-cache-tokens", "0", "--trace-file", trace)
    first, second = completion(raw_http, sim, LONG), completion(raw_http, sim, LONG)
    assert "prompt_tokens_details" not in first["usage"] and "prompt_tokens_details" not in second["usage"]
    usages = conversation(raw_http, sim)
    assert all("prompt_tokens_details" not in u for u in usages)
    entries = read_trace(trace, 5)
    assert all(e["cached_tokens"] == 0 and e["prefill_tokens"] == e["prompt_tokens"] for e in entries)
    cold, again, turn1, _, turn3 = entries
    assert ttft(again) > 0.75 * ttft(cold), (ttft(cold), ttft(again))
    assert turn3["prompt_tokens"] > turn1["prompt_tokens"] + 1000
    assert ttft(turn3) > 1.2 * ttft(turn1), (ttft(turn1), ttft(turn3))


def test_lru_eviction_with_a_tiny_cache(start_sim, raw_http):
    """Room for two 400-token prompts: a third one evicts the least recently used."""
    sim = start_sim("--prefix-cache-tokens", "800", "--prefix-cache-block", "16")
    a, b, c = ("".join(f"{name}{i} " for i in range(400))[:1600] for name in ("alpha", "beta", "gamma"))

    def cached(prompt: str) -> int:
        usage = completion(raw_http, sim, prompt)["usage"]
        assert usage["prompt_tokens"] == 400
        return usage["prompt_tokens_details"]["cached_tokens"]

    full = (400 - 1) // 16 * 16
    assert [cached(a), cached(a), cached(b), cached(c)] == [0, full, 0, 0]
    assert cached(c) == full  # the newest is still there
    assert cached(a) == 0  # the oldest was evicted


def test_sglang_reports_cached_tokens_in_meta_info(start_sim, raw_http):
    sim = start_sim("--prefix-cache-tokens", "10000", "--dialect", "sglang")
    body = {"text": LONG[:2000], "sampling_params": {"max_new_tokens": 3, "ignore_eos": True}}
    metas = [raw_http.post(sim.port, "/generate", body).json()["meta_info"] for _ in range(2)]
    assert metas[0]["cached_tokens"] == 0
    assert metas[1]["cached_tokens"] == (500 - 1) // BLOCK * BLOCK


def test_fixed_timing_charges_uncached_prefill(start_sim, tmp_path, raw_http):
    trace = tmp_path / "trace.jsonl"
    sim = start_sim("--ttft-ms", "5", "--itl-ms", "1", "--prefill-ms-per-token", "0.05",
                    "--prefix-cache-tokens", "100000", "--trace-file", trace)
    completion(raw_http, sim, LONG)
    completion(raw_http, sim, LONG)
    cold, warm = read_trace(trace, 2)
    assert ttft(cold) == pytest.approx(0.005 + 0.05e-3 * 3000, abs=0.03)  # 155 ms
    assert ttft(warm) == pytest.approx(0.005 + 0.05e-3 * warm["prefill_tokens"], abs=0.03)  # ~6 ms
    assert warm["cached_tokens"] == 2992


# -- reasoning and the trace's new keys ------------------------------------------------------------------


@pytest.fixture
def reasoning_sim(start_sim, tmp_path):
    trace = tmp_path / "trace.jsonl"
    sim = start_sim("--profile", "tiny", "--reasoning-tokens", "4", "--trace-file", trace, "--trace-prompts",
                    "--session-header", "X-Conversation")
    return sim, trace


def test_reasoning_streams_first_then_content(reasoning_sim, raw_http):
    sim, trace = reasoning_sim
    messages = [{"role": "user", "content": "think first"}]
    events = chat_stream(raw_http, sim, messages, max_tokens=10, headers={"X-Conversation": "c-7"})
    deltas = [e["choices"][0]["delta"] for e in events if e["choices"]]
    assert deltas[0] == {"role": "assistant", "content": ""}
    tokens = deltas[1:]
    assert all(set(d) == {"reasoning_content"} and d["reasoning_content"] for d in tokens[:4])
    assert all(set(d) == {"content"} and d["content"] for d in tokens[4:]) and len(tokens) == 10
    usage = events[-1]["usage"]
    assert usage["completion_tokens"] == 10
    assert usage["completion_tokens_details"] == {"reasoning_tokens": 4}
    assert "prompt_tokens_details" not in usage  # no prefix cache

    [entry] = read_trace(trace, 1)
    assert entry["reasoning_tokens"] == 4 and entry["completion_tokens"] == 10
    assert entry["session"] == "c-7"
    assert entry["messages"] == messages and "prompt" not in entry
    assert (entry["cached_tokens"], entry["prefill_tokens"]) == (0, entry["prompt_tokens"])


def test_short_outputs_are_all_reasoning_and_completions_never_reason(reasoning_sim, raw_http):
    sim, trace = reasoning_sim
    events = chat_stream(raw_http, sim, [{"role": "user", "content": "q"}], max_tokens=3)
    tokens = [e["choices"][0]["delta"] for e in events if e["choices"]][1:]
    assert len(tokens) == 3 and all("reasoning_content" in d and "content" not in d for d in tokens)
    assert events[-1]["usage"]["completion_tokens_details"] == {"reasoning_tokens": 3}

    body = {"model": MODEL, "messages": [{"role": "user", "content": "q"}], "max_tokens": 6, "ignore_eos": True}
    message = raw_http.post(sim.port, "/v1/chat/completions", body).json()["choices"][0]["message"]
    assert message["reasoning_content"].count(" ") == 4 and message["content"].count(" ") == 2

    text = completion(raw_http, sim, "plain text prompt")
    assert "completion_tokens_details" not in text["usage"]
    short, unstreamed, plain = read_trace(trace, 3)
    assert short["reasoning_tokens"] == 3 and short["session"] is None
    assert unstreamed["reasoning_tokens"] == 4
    assert plain["reasoning_tokens"] == 0 and plain["prompt"] == "plain text prompt" and "messages" not in plain


def test_trace_has_no_prompts_unless_asked(start_sim, raw_http, tmp_path):
    trace = tmp_path / "trace.jsonl"
    sim = start_sim("--profile", "tiny", "--trace-file", trace)
    completion(raw_http, sim, "p")
    chat_stream(raw_http, sim, [{"role": "user", "content": "q"}], headers={"X-Session-ID": "s-1"})
    plain, chat = read_trace(trace, 2)
    for entry in (plain, chat):
        assert "prompt" not in entry and "messages" not in entry
        assert entry["cached_tokens"] == 0 and entry["reasoning_tokens"] == 0
    assert plain["session"] is None and chat["session"] == "s-1"


def test_with_a_tokenizer_the_blocks_hold_its_ids(start_sim, raw_http):
    sim = start_sim("--prefix-cache-tokens", "100000", "--tokenizer", "builtin", timeout=60)
    first, second = (completion(raw_http, sim, LONG[:4000])["usage"] for _ in range(2))
    prompt = first["prompt_tokens"]
    assert prompt == second["prompt_tokens"] and prompt != 1000  # counted by the tokenizer, not by characters
    assert first["prompt_tokens_details"]["cached_tokens"] == 0
    assert second["prompt_tokens_details"]["cached_tokens"] == (prompt - 1) // BLOCK * BLOCK


@pytest.mark.parametrize(("args", "needle"), [
    (("--prefix-cache-tokens", "8"), "--prefix-cache-tokens"),
    (("--prefix-cache-block", "0"), "--prefix-cache-block"),
    (("--reasoning-tokens", "-1"), "--reasoning-tokens"),
    (("--session-header", " "), "--session-header"),
])
def test_bad_cache_flags_exit_2(llmload_cmd, args, needle):
    out = subprocess.run([*llmload_cmd, "sim", "--port", "0", *args], capture_output=True, text=True, timeout=60,
                         stdin=subprocess.DEVNULL)
    assert out.returncode == 2 and "listening" not in out.stdout, out.stderr
    assert needle in out.stderr and "Traceback" not in out.stderr
