"""--trace-file is the ground truth for measurement tests: one line per request with the send time of every chunk."""

from __future__ import annotations

import itertools
import json
import os
import statistics
import time
from collections import Counter
from pathlib import Path

import pytest
from support import CLOCK_SLACK_S

MODEL = "trace-model"


def read_trace(path: Path, expected: int, timeout: float = 30.0) -> list[dict]:
    """The trace lines, once there are ``expected`` of them (the server writes a line as a request ends)."""
    deadline = time.monotonic() + timeout
    while True:
        lines = path.read_text().splitlines() if path.exists() else []
        if len(lines) >= expected or time.monotonic() > deadline:
            return [json.loads(line) for line in lines]
        time.sleep(0.02)


def _requests(raw_http, n: int, max_tokens, prefix: str) -> list[bytes]:
    reqs = []
    for i in range(n):
        chat = i % 2 == 1
        body: dict = {"model": MODEL, "max_tokens": max_tokens(i), "stream": True, "ignore_eos": True,
                      "stream_options": {"include_usage": True}}
        if chat:
            body["messages"] = [{"role": "user", "content": f"question {i}"}]
        else:
            body["prompt"] = f"prompt {i}"
        path = "/v1/chat/completions" if chat else "/v1/completions"
        reqs.append(raw_http.build("POST", path, body, headers={"X-Request-Id": f"{prefix}-{i}"}))
    return reqs


def _content_events(r) -> list:
    """Events that carry generated text (not the role-only chunk, the usage chunk or [DONE])."""
    out = []
    for e in r.data_events():
        p = e.json()
        if not p["choices"]:
            continue
        c = p["choices"][0]
        if c.get("text") or (c.get("delta") or {}).get("content"):
            out.append((e, p))
    return out


def check_against_trace(responses, trace: list[dict], prefix: str, tokens_per_chunk: int = 1) -> list[float]:
    """Compare what the client saw with the trace; returns the arrival lags (client arrival - server send)."""
    by_client = {t["client_id"]: t for t in trace}
    assert len(by_client) == len(trace), "client ids must be unique per trace line"
    lags = []
    wall_offset = time.time() - time.monotonic()
    for i, r in enumerate(responses):
        entry = by_client[f"{prefix}-{i}"]
        content = _content_events(r)
        usage = r.data_events()[-1].json()["usage"]
        assert entry["status"] == "ok"
        assert {p["id"] for _, p in content} == {entry["id"]}
        assert len(entry["chunks"]) == len(content)
        assert all(b > a for a, b in itertools.pairwise(entry["chunks"]))
        assert sum(entry["tokens"]) == usage["completion_tokens"] == entry["completion_tokens"]
        assert len(entry["tokens"]) == len(content)
        assert all(n <= tokens_per_chunk for n in entry["tokens"])
        assert entry["stream"] is True
        # one clock: the server read the request after the client sent it, and sent chunks after that
        assert r.t_send < entry["received"] <= entry["headers_sent"] <= entry["chunks"][0]
        assert abs(entry["wall_offset"] - wall_offset) < 0.5
        assert entry["pid"] > 0
        for (event, _), sent in zip(content, entry["chunks"], strict=True):
            lags.append(event.t - sent)
    return lags


def _summary(lags: list[float]) -> str:
    s = sorted(lags)
    return (f"median {statistics.median(s) * 1e3:.3f} ms, p99 {s[int(0.99 * (len(s) - 1))] * 1e3:.3f} ms, "
            f"min {s[0] * 1e3:.3f} ms, max {s[-1] * 1e3:.3f} ms")


@pytest.mark.parametrize(
    ("timing", "tokens_per_chunk"),
    [(("--ttft-ms", "5", "--itl-ms", "2"), 1), (("--profile", "tiny"), 1), (("--profile", "tiny"), 3)],
    ids=["fixed", "batching", "batching-3-per-chunk"],
)
def test_trace_matches_what_the_client_received(start_sim, raw_http, tmp_path, timing, tokens_per_chunk):
    trace_file = tmp_path / "trace.jsonl"
    sim = start_sim(*timing, "--tokens-per-chunk", str(tokens_per_chunk), "--model", MODEL,
                    "--trace-file", str(trace_file))
    n = 24
    responses = raw_http.many(sim.port, _requests(raw_http, n, lambda i: 10 + i, "req"), concurrency=8)
    trace = read_trace(trace_file, n)
    assert len(trace) == n
    lags = check_against_trace(responses, trace, "req", tokens_per_chunk)
    print(f"client arrival - server send ({' '.join(timing)}, {tokens_per_chunk}/chunk): {_summary(lags)}")
    assert min(lags) >= -CLOCK_SLACK_S, "a chunk arrived before the trace says it was sent"
    # the trace's send times are the real ones: the typical arrival comes right after (a wrong time, such as
    # the scheduled one or the request's start, is off by whole ITLs); 20 ms leaves room for a busy machine
    assert statistics.median(lags) <= 0.020


def test_trace_records_faults_and_non_streaming(start_sim, raw_http, tmp_path):
    trace_file = tmp_path / "trace.jsonl"
    sim = start_sim("--ttft-ms", "1", "--itl-ms", "1", "--model", MODEL, "--trace-file", str(trace_file),
                    "--error-rate", "0.3", "--disconnect-rate", "0.3", "--seed", "11")
    n = 40
    body = {"model": MODEL, "prompt": "p", "max_tokens": 6, "stream": True}
    reqs = [raw_http.build("POST", "/v1/completions", body, headers={"X-Request-Id": f"f-{i}"}) for i in range(n)]
    plain = raw_http.build("POST", "/v1/completions", dict(body, stream=False), headers={"X-Request-Id": "plain"})
    responses = raw_http.many(sim.port, [*reqs, plain], concurrency=1)
    trace = {t["client_id"]: t for t in read_trace(trace_file, n + 1)}
    assert len(trace) == n + 1
    for i, r in enumerate(responses[:n]):
        status = trace[f"f-{i}"]["status"]
        if r.status != 200:
            assert status == f"error_{r.status}"
        elif not r.complete:
            assert status == "disconnect"
        else:
            assert status == "ok"
            assert len(trace[f"f-{i}"]["chunks"]) == 6
    assert Counter(t["status"] for t in trace.values()).keys() >= {"ok", "disconnect"}
    plain_resp, plain_entry = responses[n], trace["plain"]
    assert plain_entry["stream"] is False
    if plain_entry["status"] == "ok":
        assert plain_resp.status == 200
        assert sum(plain_entry["tokens"]) == plain_resp.json()["usage"]["completion_tokens"] == 6
    else:
        assert plain_entry["status"] == f"error_{plain_resp.status}"


def test_trace_notes_clients_that_leave(start_sim, raw_http, tmp_path):
    trace_file = tmp_path / "trace.jsonl"
    sim = start_sim("--ttft-ms", "1", "--itl-ms", "300", "--model", MODEL, "--trace-file", str(trace_file))
    body = {"model": MODEL, "prompt": "p", "max_tokens": 100, "stream": True}
    r = raw_http.post(sim.port, "/v1/completions", body, headers={"X-Request-Id": "leaver"}, read_timeout=0.1)
    assert r.timed_out and r.status == 200
    (entry,) = read_trace(trace_file, 1)
    assert entry["client_id"] == "leaver"
    assert entry["status"] == "client_closed"
    assert 0 < len(entry["chunks"]) < 100


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_workers_share_one_port(start_sim, raw_http, tmp_path):
    trace_file = tmp_path / "trace.jsonl"
    sim = start_sim("--workers", "2", "--ttft-ms", "1", "--itl-ms", "1", "--model", MODEL,
                    "--trace-file", str(trace_file))
    assert "2 worker(s)" in sim.banner
    n = 40
    responses = raw_http.many(sim.port, _requests(raw_http, n, lambda i: 5, "w"), concurrency=4)
    trace = read_trace(trace_file, n)
    assert len(trace) == n
    check_against_trace(responses, trace, "w")
    pids = {t["pid"] for t in trace}
    assert len(pids) == 2, pids
    assert sim.proc.pid not in pids
    for pid in pids:  # the workers are the simulator's children
        with open(f"/proc/{pid}/stat") as f:
            assert int(f.read().split(")")[-1].split()[1]) == sim.proc.pid
    assert len({t["id"] for t in trace}) == n, "request ids must be unique across workers"
    # stopping the simulator stops its workers
    start_sim.stop(sim)
    deadline = time.monotonic() + 5
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in pids)
    assert sim.proc.returncode == 0
    assert not os.path.exists(f"/proc/{sim.proc.pid}/stat") or not _alive(sim.proc.pid)
