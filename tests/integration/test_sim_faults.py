"""Each fault flag hits its fraction of requests (binomial tolerance), looks like the real failure, and is seeded."""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter

import httpx
import pytest

MODEL = "fault-model"
MAX_TOKENS = 4
FAST = ("--ttft-ms", "0", "--itl-ms", "0.5", "--model", MODEL)


def _body(i: int, stream: bool = True) -> dict:
    return {"model": MODEL, "prompt": f"request {i}", "max_tokens": MAX_TOKENS, "stream": stream,
            "ignore_eos": True, "stream_options": {"include_usage": True}}


def _valid_json(data: bytes) -> bool:
    try:
        json.loads(data)
    except ValueError:
        return False
    return True


def classify(r, slow_headers_s: float | None = None) -> str:
    """What happened to one streaming request, as a client sees it. Headers are called slow only where the
    test made them slow (``slow_headers_s``): on a loaded machine any answer can take a second."""
    if r.timed_out:
        return "stall"
    if slow_headers_s is not None and r.t_head is not None and r.t_head - r.t_send >= slow_headers_s:
        return "slow_headers"
    if r.status != 200:
        return "error"
    if not r.complete:
        return "disconnect"
    bad = [e for e in r.data_events() if not _valid_json(e.data)]
    if bad:
        return "malformed"
    payloads = [e.json() for e in r.data_events()]
    content = [p for p in payloads if p["choices"]]
    if r.done_marker and len(content) == MAX_TOKENS and payloads[-1]["usage"]["completion_tokens"] == MAX_TOKENS:
        return "ok"
    return "other"


def within_binomial(count: int, n: int, p: float, sigmas: float = 4.0) -> bool:
    return abs(count - n * p) <= sigmas * math.sqrt(n * p * (1 - p))


def run_batch(sim, raw_http, n: int, read_timeout: float, concurrency: int = 64, stream: bool = True):
    reqs = [raw_http.build("POST", "/v1/completions", _body(i, stream)) for i in range(n)]
    return raw_http.many(sim.port, reqs, concurrency=concurrency, read_timeout=read_timeout)


def test_error_rate(start_sim, raw_http):
    n, rate = 400, 0.2
    sim = start_sim(*FAST, "--error-rate", str(rate), "--error-codes", "500,503,429")
    responses = run_batch(sim, raw_http, n, read_timeout=5)
    kinds = Counter(classify(r) for r in responses)
    assert set(kinds) <= {"ok", "error"}, kinds
    assert within_binomial(kinds["error"], n, rate), kinds
    errors = [r for r in responses if r.status != 200]
    assert {r.status for r in errors} == {500, 503, 429}
    for r in errors:
        err = r.json()["error"]
        assert err["code"] == r.status and err["message"]
        if r.status in (429, 503):
            assert int(r.headers["retry-after"]) >= 1
    # non-streaming requests get the same errors
    plain = run_batch(sim, raw_http, 100, read_timeout=5, stream=False)
    assert {r.status for r in plain} <= {200, 500, 503, 429}
    assert within_binomial(sum(r.status != 200 for r in plain), 100, rate)


def test_error_codes_flag_restricts_codes(start_sim, raw_http):
    sim = start_sim(*FAST, "--error-rate", "1.0", "--error-codes", "503")
    responses = run_batch(sim, raw_http, 20, read_timeout=5)
    assert {r.status for r in responses} == {503}
    assert all("retry-after" in r.headers for r in responses)


def test_disconnect_rate(start_sim, raw_http):
    n, rate = 400, 0.2
    sim = start_sim(*FAST, "--disconnect-rate", str(rate))
    responses = run_batch(sim, raw_http, n, read_timeout=5)
    kinds = Counter(classify(r) for r in responses)
    assert set(kinds) <= {"ok", "disconnect"}, kinds
    assert within_binomial(kinds["disconnect"], n, rate), kinds
    for r in responses:
        if classify(r) == "disconnect":
            assert r.status == 200 and (r.eof or r.reset)
            assert not r.done_marker
            assert 0 < len(r.data_events()) < MAX_TOKENS  # it dropped mid-stream, after the first token

    # a real client notices: httpx raises instead of returning a short stream as complete
    raised = 0
    with httpx.Client(base_url=sim.url, timeout=5) as client:
        for i in range(40):
            try:
                with client.stream("POST", "/v1/completions", json=_body(i)) as resp:
                    for _ in resp.iter_lines():
                        pass
            except (httpx.RemoteProtocolError, httpx.ReadError):
                raised += 1
    assert 1 <= raised < 40


def test_malformed_rate(start_sim, raw_http):
    n, rate = 400, 0.2
    sim = start_sim(*FAST, "--malformed-rate", str(rate))
    responses = run_batch(sim, raw_http, n, read_timeout=5)
    kinds = Counter(classify(r) for r in responses)
    assert set(kinds) <= {"ok", "malformed"}, kinds
    assert within_binomial(kinds["malformed"], n, rate), kinds
    for r in responses:
        if classify(r) == "malformed":
            assert r.complete and r.done_marker
            assert sum(not _valid_json(e.data) for e in r.data_events()) == 1


def test_stall_rate_times_out_a_client(start_sim, raw_http):
    n, rate = 300, 0.2
    sim = start_sim(*FAST, "--stall-rate", str(rate), "--stall-s", "2")
    responses = run_batch(sim, raw_http, n, read_timeout=0.5, concurrency=150)
    kinds = Counter(classify(r) for r in responses)
    assert set(kinds) <= {"ok", "stall"}, kinds
    assert within_binomial(kinds["stall"], n, rate), kinds
    for r in responses:
        if r.timed_out:
            # the stall is mid-stream: headers and the first token came, then silence
            assert r.status == 200 and 0 < len(r.data_events()) < MAX_TOKENS

    with httpx.Client(base_url=sim.url, timeout=httpx.Timeout(5, read=0.5)) as client:
        timeouts = 0
        for i in range(60):
            try:
                with client.stream("POST", "/v1/completions", json=_body(i)) as resp:
                    for _ in resp.iter_lines():
                        pass
            except httpx.ReadTimeout:
                timeouts += 1
                break
    assert timeouts == 1


@pytest.mark.parametrize("timing", [("--ttft-ms", "1", "--itl-ms", "2"), ("--profile", "tiny")],
                         ids=["fixed", "batching"])
def test_stalled_stream_resumes_with_every_chunk(start_sim, raw_http, timing):
    """A stall shorter than the client's timeout only delays the stream: no chunk may be lost."""
    max_tokens = 120
    sim = start_sim(*timing, "--stall-rate", "1.0", "--stall-s", "0.1", "--model", MODEL)
    body = dict(_body(0), max_tokens=max_tokens)
    r = raw_http.post(sim.port, "/v1/completions", body, read_timeout=5)
    assert r.complete and r.done_marker
    payloads = [e.json() for e in r.data_events()]
    content = [p for p in payloads if p["choices"]]
    gaps = [b.t - a.t for a, b in itertools.pairwise(r.events)]
    assert max(gaps) >= 0.09  # the stall happened
    assert payloads[-1]["usage"]["completion_tokens"] == max_tokens
    assert len(content) == max_tokens, f"{max_tokens - len(content)} chunks lost in the stall"
    text = "".join(p["choices"][0]["text"] for p in content)
    assert len(text.split()) == max_tokens


def test_slow_headers_rate(start_sim, raw_http):
    n, rate = 300, 0.2
    # held 2 s: far above what a loaded machine adds to an answer's headers
    sim = start_sim(*FAST, "--slow-headers-rate", str(rate), "--slow-headers-s", "2")
    responses = run_batch(sim, raw_http, n, read_timeout=6, concurrency=150)
    kinds = Counter(classify(r, slow_headers_s=2.0) for r in responses)
    assert set(kinds) <= {"ok", "slow_headers"}, kinds
    assert within_binomial(kinds["slow_headers"], n, rate), kinds
    for r in responses:
        if classify(r, slow_headers_s=2.0) == "slow_headers":
            assert 2.0 <= r.t_head - r.t_send < 5.0
            assert r.status == 200 and r.complete and r.done_marker


def _fault_pattern(sim, raw_http, n=80):
    """Fault of each of ``n`` sequential requests (index -> kind, with the status of errors)."""
    responses = run_batch(sim, raw_http, n, read_timeout=5, concurrency=1)
    return [f"{classify(r)}:{r.status}" for r in responses]


def test_same_seed_same_faulted_requests(start_sim, raw_http):
    flags = (*FAST, "--error-rate", "0.1", "--disconnect-rate", "0.1", "--malformed-rate", "0.1")
    a = _fault_pattern(start_sim(*flags, "--seed", "3"), raw_http)
    b = _fault_pattern(start_sim(*flags, "--seed", "3"), raw_http)
    c = _fault_pattern(start_sim(*flags, "--seed", "4"), raw_http)
    faulted = [i for i, k in enumerate(a) if not k.startswith("ok")]
    assert len(faulted) >= 5, a
    assert {k.split(":")[0] for k in a} == {"ok", "error", "disconnect", "malformed"}
    assert a == b
    assert a != c


def test_422_is_fastapi_s_extra_forbidden_for_a_field_of_the_request(start_sim, raw_http):
    sim = start_sim(*FAST, "--error-rate", "1.0", "--error-codes", "422")
    body = dict(_body(0), some_field=7)
    r = raw_http.post(sim.port, "/v1/completions", body, read_timeout=5)
    assert r.status == 422 and "retry-after" not in r.headers
    (detail,) = r.json()["detail"]
    assert detail == {"type": "extra_forbidden", "loc": ["body", "some_field"], "msg": "Extra inputs are not permitted",
                      "input": 7}


def test_not_streamed_rate_answers_one_json_body(start_sim, raw_http):
    n, rate = 200, 0.3
    sim = start_sim(*FAST, "--not-streamed-rate", str(rate))
    responses = run_batch(sim, raw_http, n, read_timeout=5)
    whole = [r for r in responses if r.headers.get("content-type", "").startswith("application/json")]
    assert within_binomial(len(whole), n, rate), len(whole)
    for r in whole:
        assert r.status == 200 and r.complete and "content-length" in r.headers
        data = r.json()
        assert data["choices"][0]["text"] and data["usage"]["completion_tokens"] == MAX_TOKENS
    assert all(classify(r) == "ok" for r in responses if r not in whole)


def test_trace_names_each_request_s_fault(start_sim, raw_http, tmp_path):
    trace = tmp_path / "trace.jsonl"
    sim = start_sim(*FAST, "--error-rate", "0.2", "--disconnect-rate", "0.2", "--malformed-rate", "0.2",
                    "--not-streamed-rate", "0.2", "--seed", "5", "--trace-file", str(trace))
    responses = run_batch(sim, raw_http, 100, read_timeout=5, concurrency=1)
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    assert len(lines) == 100
    by_client = Counter(line["fault"] for line in lines)
    assert set(by_client) == {None, "error", "disconnect", "malformed", "not_streamed"}
    seen = Counter()
    for r in responses:
        if r.status != 200:
            seen["error"] += 1
        elif r.headers.get("content-type", "").startswith("application/json"):
            seen["not_streamed"] += 1
        elif classify(r) in ("disconnect", "malformed"):
            seen[classify(r)] += 1
    assert seen == Counter({k: v for k, v in by_client.items() if k is not None})
