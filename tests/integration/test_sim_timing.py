"""Measured on the wire: fixed timing is exact; the batching engine queues, saturates and can stall decode."""

from __future__ import annotations

import itertools
import statistics

import pytest
from support import CLOCK_SLACK_S

#: the simulator keeps its timing within ms: alone, on a quiet machine (tests/phases.py)
pytestmark = pytest.mark.serial

MODEL = "timing-model"


def _completions(raw_http, n: int, prompt_chars: int, max_tokens: int, tag: str = "") -> list[bytes]:
    reqs = []
    for i in range(n):
        prompt = (f"{tag} request {i} " + "lorem ipsum " * (prompt_chars // 12 + 1))[:prompt_chars]
        body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "stream": True, "ignore_eos": True}
        reqs.append(raw_http.build("POST", "/v1/completions", body))
    return reqs


def _content_times(r) -> list[float]:
    assert r.status == 200 and r.complete, (r.status, r.body[:200])
    return [e.t for e in r.data_events()]


def _ttft(r) -> float:
    return _content_times(r)[0] - r.t_send


def _gaps(r) -> list[float]:
    t = _content_times(r)
    return [b - a for a, b in itertools.pairwise(t)]


TTFT_S, ITL_S = 0.050, 0.020
#: a quarter of the ITL (5 ms): far above the simulator's median lateness (sub-ms on an idle machine, see
#: benchmarks/sim_throughput.py and docs/performance.md), far below the smallest real error (one ITL)
MEDIAN_TOL_S = ITL_S / 4


@pytest.mark.slow
def test_fixed_timing_matches_flags(start_sim, raw_http):
    sim = start_sim("--ttft-ms", f"{TTFT_S * 1000:g}", "--itl-ms", f"{ITL_S * 1000:g}", "--model", MODEL)
    max_tokens = 8
    # one request at a time: the machine (and the simulator) stay idle apart from the request measured
    responses = raw_http.many(sim.port, _completions(raw_http, 12, 40, max_tokens), concurrency=1)
    ttfts = [_ttft(r) for r in responses]
    itls = [g for r in responses for g in _gaps(r)]
    assert all(len(_content_times(r)) == max_tokens for r in responses)
    med_ttft, med_itl = statistics.median(ttfts), statistics.median(itls)
    print(f"fixed timing: median TTFT {med_ttft * 1e3:.3f} ms (error {(med_ttft - TTFT_S) * 1e3:+.3f}), "
          f"median ITL {med_itl * 1e3:.3f} ms (error {(med_itl - ITL_S) * 1e3:+.3f})")
    assert abs(med_ttft - TTFT_S) <= MEDIAN_TOL_S
    assert abs(med_itl - ITL_S) <= MEDIAN_TOL_S
    # the server counts from when it read the request, which is after the client sent it: never early
    assert min(ttfts) >= TTFT_S - CLOCK_SLACK_S
    # the whole stream keeps the schedule (no drift of an ITL over the stream): last chunk at ttft + (n-1)·itl
    e2e = statistics.median(_content_times(r)[-1] - r.t_send for r in responses)
    assert abs(e2e - (TTFT_S + (max_tokens - 1) * ITL_S)) <= 2 * MEDIAN_TOL_S


@pytest.fixture(scope="module")
def tiny(start_sim_module):
    return start_sim_module("--profile", "tiny", "--model", MODEL)


def test_ttft_grows_with_the_queue(tiny, raw_http):
    prompt_chars = 16_000  # ~4000 prompt tokens: one prefill per step, and KV room for only ~9 at once
    lone = [_ttft(r) for r in raw_http.many(tiny.port, _completions(raw_http, 3, prompt_chars, 16, "lone"),
                                             concurrency=1)]
    burst = raw_http.many(tiny.port, _completions(raw_http, 64, prompt_chars, 16, "burst"))
    ttfts = sorted(_ttft(r) for r in burst)
    alone = statistics.median(lone)
    last = statistics.median(ttfts[-8:])
    first = statistics.median(ttfts[:8])
    print(f"TTFT alone {alone * 1e3:.1f} ms; burst of 64: first 8 {first * 1e3:.1f} ms, last 8 {last * 1e3:.1f} ms")
    assert last > 10 * alone
    assert last > 5 * first
    # and it grows steadily with queue position, not in one jump
    quartiles = [statistics.median(ttfts[i * 16:(i + 1) * 16]) for i in range(4)]
    assert quartiles == sorted(quartiles) and quartiles[2] > 1.5 * quartiles[1]


def _tokens_per_s(port, raw_http, concurrency: int, max_tokens: int) -> float:
    responses = raw_http.many(port, _completions(raw_http, concurrency, 100, max_tokens, f"c{concurrency}"))
    start = min(r.t_send for r in responses)
    end = max(_content_times(r)[-1] for r in responses)
    tokens = sum(len(_content_times(r)) for r in responses)
    assert tokens == concurrency * max_tokens
    return tokens / (end - start)


def test_throughput_rises_with_batch_size_and_saturates(tiny, raw_http):
    tps = {c: _tokens_per_s(tiny.port, raw_http, c, 100) for c in (1, 8, 32, 64)}
    print("tokens/s by concurrency: " + ", ".join(f"{c}: {v:.0f}" for c, v in tps.items()))
    assert tps[8] > 2 * tps[1]
    assert tps[32] > 1.5 * tps[8]
    # the tiny profile runs at most 32 sequences: beyond that, more concurrency only queues
    assert tps[64] < 1.25 * tps[32]
    assert tps[64] - tps[32] < 0.25 * (tps[8] - tps[1])


def _first_gaps(sim, raw_http):
    responses = raw_http.many(sim.port, _completions(raw_http, 40, 4000, 24, "stall"))
    gaps = [_gaps(r) for r in responses]
    first = statistics.median(g[0] for g in gaps)
    second = statistics.median(g[1] for g in gaps)
    later = statistics.median(x for g in gaps for x in g[1:])
    return first, second, later


def test_first_decode_stall(start_sim, tiny, raw_http):
    stall = start_sim("--profile", "tiny", "--first-decode-stall", "--model", MODEL)
    s_first, s_second, s_later = _first_gaps(stall, raw_http)
    n_first, n_second, n_later = _first_gaps(tiny, raw_http)
    print(f"median gaps (ms) with stall: 1st {s_first * 1e3:.1f}, 2nd {s_second * 1e3:.1f}, later {s_later * 1e3:.1f}; "
          f"without: 1st {n_first * 1e3:.1f}, 2nd {n_second * 1e3:.1f}, later {n_later * 1e3:.1f}")
    # with the stall, token 2 waits until the batch's prefills are done
    assert s_first > 3 * s_later
    assert s_first > 3 * s_second
    # without it, the first decode step is an ordinary step (long only while others prefill, like the next one)
    assert n_first < 1.5 * n_second
    assert s_first > 2 * n_first
