"""`llmload sim` serves `/metrics` in vLLM's names (SGLang's with `--dialect sglang`), checked against its own
ground truth: the counters against `--trace-file` once the load ends, the gauges against `--engine-trace` at the
moment of each scrape (the server answered between the scrape's send and its last byte, both on the monotonic
clock the traces use). No timing assertions beyond "TTFT is never shorter than the fixed TTFT".
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import orjson
from prometheus_client.parser import text_string_to_metric_families
from support import trace_lines

MODEL = "metrics-model"
VLLM_TTFT_BUCKETS = ("0.001", "0.005", "0.01", "0.02", "0.04", "0.06", "0.08", "0.1", "0.25", "0.5", "0.75", "1.0",
                     "2.5", "5.0", "7.5", "10.0", "20.0", "40.0", "80.0", "160.0", "640.0", "2560.0", "+Inf")
VLLM_FAMILIES = {
    "vllm:num_requests_running": "gauge", "vllm:num_requests_waiting": "gauge", "vllm:kv_cache_usage_perc": "gauge",
    "vllm:prefix_cache_queries": "counter", "vllm:prefix_cache_hits": "counter",
    "vllm:num_preemptions": "counter", "vllm:prompt_tokens": "counter", "vllm:generation_tokens": "counter",
    "vllm:request_success": "counter", "vllm:time_to_first_token_seconds": "histogram",
    "vllm:inter_token_latency_seconds": "histogram", "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:request_queue_time_seconds": "histogram",
}
SGLANG_FAMILIES = {
    "sglang:num_running_reqs": "gauge", "sglang:num_used_tokens": "gauge", "sglang:token_usage": "gauge",
    "sglang:num_queue_reqs": "gauge", "sglang:cache_hit_rate": "gauge", "sglang:max_total_num_tokens": "gauge",
    "sglang:queue_time_seconds": "histogram", "sglang:prompt_tokens": "counter",
    "sglang:generation_tokens": "counter", "sglang:cached_tokens": "counter", "sglang:num_requests": "counter",
    "sglang:num_aborted_requests": "counter", "sglang:time_to_first_token_seconds": "histogram",
    "sglang:inter_token_latency_seconds": "histogram", "sglang:e2e_request_latency_seconds": "histogram",
}
#: gauge names of (running, waiting, KV usage) per dialect
STATE = {"vllm": ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"),
         "sglang": ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage")}


class Scrape:
    """One ``/metrics`` answer, parsed, with the client's send and last-byte times."""

    def __init__(self, raw_http, sim) -> None:
        r = raw_http.get(sim.port, "/metrics")
        assert r.status == 200 and r.complete, r.body[:500]
        assert r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
        self.t_send, self.t_end = r.t_send, r.t_end
        self.families = {f.name: f for f in text_string_to_metric_families(r.body.decode())}

    def value(self, sample: str, **labels: str) -> float:
        """The sum of the samples named ``sample`` whose labels include ``labels``."""
        family = self.families[sample.removesuffix("_total").removesuffix("_bucket").removesuffix("_count")
                               .removesuffix("_sum")]
        return sum(s.value for s in family.samples
                   if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()))

    def state(self, dialect: str = "vllm") -> tuple[float, float, float]:
        return tuple(self.value(name) for name in STATE[dialect])  # type: ignore[return-value]


def completion(raw_http, i: int, max_tokens: int, *, stream: bool = True, ignore_eos: bool = True,
               prompt: str | None = None, chat: bool = False) -> bytes:
    body: dict = {"model": MODEL, "max_tokens": max_tokens, "stream": stream, "ignore_eos": ignore_eos}
    if chat:
        body["messages"] = [{"role": "user", "content": prompt or f"question {i}"}]
    else:
        body["prompt"] = prompt or f"prompt number {i} " * (1 + i % 4)
    return raw_http.build("POST", "/v1/chat/completions" if chat else "/v1/completions", body)


def read_trace(path: Path, count: int, timeout: float = 30.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while len(lines := trace_lines(path)) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(lines) == count, f"{len(lines)} trace lines, expected {count}"
    return lines


def read_engine_trace(path: Path, workers: int = 1, timeout: float = 20.0) -> list[dict]:
    """The engine-trace lines once every worker that wrote any has gone idle (its idle line flushes them)."""
    deadline = time.monotonic() + timeout
    while True:
        lines = [orjson.loads(x) for x in path.read_bytes().splitlines()] if path.exists() else []
        last = {line["pid"]: line for line in lines}
        idle = all(x["running"] == 0 and x["waiting"] == 0 for x in last.values())
        if (idle and len(last) >= workers) or time.monotonic() > deadline:
            assert idle, f"the engine trace does not end idle: {list(last.values())}"
            return lines
        time.sleep(0.05)


def states_during(lines: list[dict], t_send: float, t_end: float) -> list[tuple]:
    """(running, waiting, kv_usage) states a scrape served in [t_send, t_end] can show: the one in force at
    t_send and every one published until t_end."""
    before = [x for x in lines if x["t"] <= t_send]
    start = before[-1] if before else {"running": 0, "waiting": 0, "kv_usage": 0.0}
    return [(x["running"], x["waiting"], x["kv_usage"]) for x in [start] + [x for x in lines if t_send < x["t"] <= t_end]]


def burst(raw_http, sim, requests: list[bytes], dialect: str = "vllm") -> tuple[list, list[Scrape]]:
    """Send ``requests`` all at once from a thread and scrape ``/metrics`` until every response is in."""
    out: list = []
    sender = threading.Thread(target=lambda: out.extend(raw_http.many(sim.port, requests, total_timeout=90)))
    sender.start()
    scrapes = []
    while sender.is_alive():
        scrapes.append(Scrape(raw_http, sim))
        time.sleep(0.01)
    sender.join()
    assert len(out) == len(requests) and all(r.status == 200 and r.complete for r in out)
    assert scrapes, "no scrape happened during the burst"
    return out, scrapes


def check_scrapes(scrapes: list[Scrape], engine_trace: list[dict], dialect: str = "vllm") -> None:
    for s in scrapes:
        allowed = states_during(engine_trace, s.t_send, s.t_end)
        assert s.state(dialect) in allowed, f"scraped {s.state(dialect)}, engine trace allows {allowed}"


# -- vLLM names: counters against the trace ---------------------------------------------------------------


def test_vllm_names_types_labels_and_buckets(start_sim, raw_http):
    sim = start_sim("--profile", "tiny", "--model", MODEL)
    s = Scrape(raw_http, sim)
    assert {name: f.type for name, f in s.families.items()} == VLLM_FAMILIES
    for family in s.families.values():
        assert family.documentation, family.name
        for sample in family.samples:
            assert sample.labels["model_name"] == MODEL and sample.labels["engine"] == "0", sample
            assert sample.value == 0
    reasons = {x.labels["finished_reason"] for x in s.families["vllm:request_success"].samples}
    assert reasons == {"stop", "length", "abort", "error", "repetition"}
    les = [x.labels["le"] for x in s.families["vllm:time_to_first_token_seconds"].samples
           if x.name.endswith("_bucket")]
    assert tuple(les) == VLLM_TTFT_BUCKETS


def _check_counters(s: Scrape, lines: list[dict]) -> None:
    """The scrape's counters and histogram counts against the trace of every request so far."""
    assert s.value("vllm:prompt_tokens_total") == sum(x["prompt_tokens"] for x in lines)
    assert s.value("vllm:generation_tokens_total") == sum(x["completion_tokens"] for x in lines)
    length = sum(1 for x in lines if x["completion_tokens"] == x["max_tokens"])
    assert s.value("vllm:request_success_total", finished_reason="length") == length
    assert s.value("vllm:request_success_total", finished_reason="stop") == len(lines) - length
    assert s.value("vllm:request_success_total") == len(lines)
    for name in ("time_to_first_token", "e2e_request_latency", "request_queue_time"):
        assert s.value(f"vllm:{name}_seconds_count") == len(lines), name
    ttft = sum(x["chunks"][0] - x["received"] for x in lines)
    assert abs(s.value("vllm:time_to_first_token_seconds_sum") - ttft) < 1e-6
    gaps = sum(len(x["chunks"]) - 1 for x in lines)
    assert s.value("vllm:inter_token_latency_seconds_count") == gaps
    spans = sum(x["chunks"][-1] - x["chunks"][0] for x in lines)
    assert abs(s.value("vllm:inter_token_latency_seconds_sum") - spans) < 1e-6
    assert s.value("vllm:inter_token_latency_seconds_bucket", le="+Inf") == gaps
    assert s.value("vllm:num_preemptions_total") == 0
    assert s.value("vllm:prefix_cache_queries_total") == s.value("vllm:prefix_cache_hits_total") == 0


def test_counters_grow_with_load_and_equal_the_trace(start_sim, raw_http, tmp_path):
    trace = tmp_path / "trace.jsonl"
    sim = start_sim("--profile", "tiny", "--model", MODEL, "--trace-file", trace, "--eos-prob", "0.05")
    reqs = [completion(raw_http, i, 10 + i, stream=i % 3 != 2, ignore_eos=i % 2 == 0, chat=i % 3 == 0)
            for i in range(30)]
    previous = 0.0
    for done in (15, 30):
        half = reqs[done - 15 : done]
        assert all(r.status == 200 and r.complete for r in raw_http.many(sim.port, half, concurrency=8))
        lines = read_trace(trace, done)
        s = Scrape(raw_http, sim)
        _check_counters(s, lines)
        assert s.value("vllm:generation_tokens_total") > previous
        previous = s.value("vllm:generation_tokens_total")
    assert s.state() == (0, 0, 0)


def test_prefix_cache_counters_are_the_caches_tokens(start_sim, raw_http, tmp_path):
    trace = tmp_path / "trace.jsonl"
    sim = start_sim("--profile", "tiny", "--model", MODEL, "--trace-file", trace, "--prefix-cache-tokens", "200000")
    shared = "a long shared document sentence. " * 200
    for i in range(4):
        r = raw_http.post(sim.port, "/v1/completions",
                          {"model": MODEL, "prompt": shared + f" question {i % 2}", "max_tokens": 3})
        assert r.status == 200, r.body
    lines = read_trace(trace, 4)
    s = Scrape(raw_http, sim)
    assert s.value("vllm:prefix_cache_queries_total") == sum(x["prompt_tokens"] for x in lines)
    hits = sum(x["cached_tokens"] for x in lines)
    assert hits > 0 and s.value("vllm:prefix_cache_hits_total") == hits


# -- gauges against the engine trace -------------------------------------------------------------------------


def test_a_burst_waits_for_seats_and_the_gauges_match_the_engine_trace(start_sim, raw_http, tmp_path):
    etrace = tmp_path / "engine.jsonl"
    sim = start_sim("--profile", "tiny", "--model", MODEL, "--engine-trace", etrace)  # 32 seats
    _, scrapes = burst(raw_http, sim, [completion(raw_http, i, 120 + 10 * (i % 6)) for i in range(40)])
    lines = read_engine_trace(etrace)
    assert set(lines[0]) == {"t", "pid", "worker", "running", "waiting", "kv_usage", "step_s"}
    assert all(x["running"] <= 32 and x["worker"] == 0 for x in lines)
    check_scrapes(scrapes, lines)
    assert any(s.state()[1] > 0 for s in scrapes), "no scrape saw a request waiting"
    assert max(s.state()[0] for s in scrapes) == 32


def test_the_kv_cache_fills_admission_stops_and_nothing_is_preempted(start_sim, raw_http, tmp_path):
    etrace = tmp_path / "engine.jsonl"
    sim = start_sim("--profile", "tiny", "--model", MODEL, "--engine-trace", etrace)  # 40000 KV tokens
    prompt = "kv " * 8000  # ~6000 tokens: with 100 output tokens 6 requests fit
    _, scrapes = burst(raw_http, sim, [completion(raw_http, i, 100, prompt=prompt + str(i)) for i in range(12)])
    lines = read_engine_trace(etrace)
    check_scrapes(scrapes, lines)
    # where a step began (admission just ran) with requests left waiting, the KV, not the 32 seats, held them
    blocked = [x for x in lines if x["step_s"] > 0 and x["waiting"] > 0]
    assert blocked and all(x["running"] < 32 and x["kv_usage"] > 0.8 for x in blocked)
    assert any(s.state()[1] > 0 and s.state()[2] > 0.8 for s in scrapes), "no scrape saw the KV full"
    assert Scrape(raw_http, sim).value("vllm:num_preemptions_total") == 0


def test_fixed_timing_counts_requests_in_flight_as_running(start_sim, raw_http, tmp_path):
    etrace, trace = tmp_path / "engine.jsonl", tmp_path / "trace.jsonl"
    sim = start_sim("--ttft-ms", "100", "--itl-ms", "20", "--model", MODEL, "--engine-trace", etrace,
                    "--trace-file", trace)
    _, scrapes = burst(raw_http, sim, [completion(raw_http, i, 10) for i in range(6)])
    check_scrapes(scrapes, read_engine_trace(etrace))
    assert any(s.state()[0] > 0 for s in scrapes) and all(s.state()[1] == 0 for s in scrapes)
    read_trace(trace, 6)
    s = Scrape(raw_http, sim)
    assert s.value("vllm:time_to_first_token_seconds_count") == 6
    assert s.value("vllm:time_to_first_token_seconds_sum") >= 6 * 0.099  # timers may fire up to 50 µs early
    assert s.value("vllm:request_queue_time_seconds_sum") == 0


# -- SGLang's names, and several workers --------------------------------------------------------------------


def test_sglang_dialect_serves_sglangs_names_and_counts(start_sim, raw_http, tmp_path):
    trace, etrace = tmp_path / "trace.jsonl", tmp_path / "engine.jsonl"
    sim = start_sim("--dialect", "sglang", "--profile", "tiny", "--model", MODEL, "--trace-file", trace,
                    "--engine-trace", etrace, "--prefix-cache-tokens", "100000")
    s = Scrape(raw_http, sim)
    assert {name: f.type for name, f in s.families.items()} == SGLANG_FAMILIES
    assert set(s.families["sglang:num_running_reqs"].samples[0].labels) == {
        "model_name", "engine_type", "tp_rank", "pp_rank"}
    assert set(s.families["sglang:time_to_first_token_seconds"].samples[0].labels) == {
        "model_name", "engine_type", "le"}
    native = [raw_http.build("POST", "/generate", {"text": "shared words " * 100 + str(i), "stream": i % 2 == 0,
                                                   "sampling_params": {"max_new_tokens": 12, "ignore_eos": True}})
              for i in range(10)]
    _, scrapes = burst(raw_http, sim, native + [completion(raw_http, i, 8) for i in range(10)])
    check_scrapes(scrapes, read_engine_trace(etrace), "sglang")
    lines = read_trace(trace, 20)
    s = Scrape(raw_http, sim)
    assert s.value("sglang:prompt_tokens_total") == sum(x["prompt_tokens"] for x in lines)
    assert s.value("sglang:generation_tokens_total") == sum(x["completion_tokens"] for x in lines)
    assert s.value("sglang:cached_tokens_total") == sum(x["cached_tokens"] for x in lines) > 0
    assert s.value("sglang:num_requests_total") == 20 and s.value("sglang:num_aborted_requests_total") == 0
    for name in ("time_to_first_token", "e2e_request_latency", "queue_time"):
        assert s.value(f"sglang:{name}_seconds_count") == 20, name
    assert s.value("sglang:inter_token_latency_seconds_count") == sum(x["completion_tokens"] - 1 for x in lines)
    assert 0 <= s.value("sglang:cache_hit_rate") <= 1
    assert s.value("sglang:max_total_num_tokens") == 40000


def test_every_worker_answers_for_all_engines(start_sim, raw_http, tmp_path):
    trace, etrace = tmp_path / "trace.jsonl", tmp_path / "engine.jsonl"
    sim = start_sim("--workers", "2", "--profile", "tiny", "--model", MODEL, "--trace-file", trace,
                    "--engine-trace", etrace)
    responses = raw_http.many(sim.port, [completion(raw_http, i, 6) for i in range(24)], concurrency=6)
    assert all(r.status == 200 and r.complete for r in responses)
    lines = read_trace(trace, 24)
    worker_of = {x["pid"]: x["worker"] for x in read_engine_trace(etrace, workers=len({x["pid"] for x in lines}))}
    expected = {str(w): 0 for w in (0, 1)}
    for x in lines:
        expected[str(worker_of[x["pid"]])] += x["prompt_tokens"]
    scrapes = [Scrape(raw_http, sim) for _ in range(6)]  # SO_REUSEPORT spreads them over both workers
    for s in scrapes:
        assert {x.labels["engine"] for x in s.families["vllm:num_requests_running"].samples} == {"0", "1"}
        assert {e: s.value("vllm:prompt_tokens_total", engine=e) for e in expected} == expected
        assert s.value("vllm:request_success_total") == 24


def test_stats_reset_starts_a_fresh_lateness_count(start_sim, raw_http):
    """``POST /sim/stats/reset`` answers with the stats so far and then counts lateness afresh (a benchmark
    leaves its warm-up out); what the server did (requests, chunks) is kept."""
    sim = start_sim("--ttft-ms", "5", "--itl-ms", "2", "--model", MODEL)
    body = {"model": MODEL, "prompt": "count me", "max_tokens": 6, "stream": True, "ignore_eos": True}
    for _ in range(3):
        assert raw_http.post(sim.port, "/v1/completions", body).status == 200
    before = orjson.loads(raw_http.get(sim.port, "/sim/stats").body)
    assert before["timer_events"] >= 3 * 6 and before["chunks_sent"] >= 3 * 6
    answered = orjson.loads(raw_http.post(sim.port, "/sim/stats/reset").body)
    assert answered["timer_events"] == before["timer_events"]
    after = orjson.loads(raw_http.get(sim.port, "/sim/stats").body)
    assert after["timer_events"] == 0 and after["lateness_us"]["max"] == 0.0
    assert (after["requests"], after["chunks_sent"]) == (before["requests"], before["chunks_sent"])
    assert raw_http.post(sim.port, "/v1/completions", body).status == 200
    assert orjson.loads(raw_http.get(sim.port, "/sim/stats").body)["timer_events"] >= 6
