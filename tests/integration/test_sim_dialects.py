"""Each --dialect's stream quirks, the native endpoints and the HTTP error bodies are what clients see on the wire."""

from __future__ import annotations

import http.client
import itertools
import json
import socket
import time

import pytest

MODEL = "dialect-model"
N = 6  # max_tokens for most streams here


@pytest.fixture(scope="module")
def vllm(start_sim_module):
    return start_sim_module("--ttft-ms", "20", "--itl-ms", "1", "--model", MODEL)


@pytest.fixture(scope="module")
def sglang(start_sim_module):
    return start_sim_module("--dialect", "sglang", "--ttft-ms", "200", "--itl-ms", "1", "--model", MODEL)


@pytest.fixture(scope="module")
def transformers(start_sim_module):
    return start_sim_module("--dialect", "transformers", "--ttft-ms", "200", "--itl-ms", "1", "--model", MODEL)


def chat_body(n=N, **extra):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": n, "stream": True,
            "stream_options": {"include_usage": True}}
    body.update(extra)
    return body


def text_body(n=N, **extra):
    body = {"model": MODEL, "prompt": "hello", "max_tokens": n, "stream": True,
            "stream_options": {"include_usage": True}}
    body.update(extra)
    return body


def assert_openai_error(resp, status):
    assert resp.status == status, resp.body
    err = resp.json()["error"]
    assert set(err) >= {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"]
    assert err["code"] == status
    return err


# -- vLLM ------------------------------------------------------------------------------------------------


def test_vllm_chat_stream_shape(vllm, raw_http):
    r = raw_http.post(vllm.port, "/v1/chat/completions", chat_body(ignore_eos=True))
    assert r.status == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["transfer-encoding"] == "chunked"
    assert r.complete
    ev = r.events
    assert ev[-1].data == b"[DONE]"
    payloads = [e.json() for e in ev[:-1]]
    # role-only first chunk
    assert payloads[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    content = payloads[1:-1]
    assert len(content) == N
    for p in content:
        delta = p["choices"][0]["delta"]
        assert "role" not in delta and delta["content"]
    assert content[-1]["choices"][0]["finish_reason"] == "length"
    usage = payloads[-1]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == N
    assert {p["id"] for p in payloads} == {payloads[0]["id"]}
    assert payloads[0]["object"] == "chat.completion.chunk"
    # vLLM sends the role chunk together with the first token, not before generation
    assert ev[0].t - r.t_send >= 0.015


def test_vllm_text_stream_shape(vllm, raw_http):
    r = raw_http.post(vllm.port, "/v1/completions", text_body())
    ev = r.events
    assert ev[-1].data == b"[DONE]"
    payloads = [e.json() for e in ev[:-1]]
    assert len(payloads) == N + 1
    assert all(p["choices"][0]["text"] for p in payloads[:-1])
    assert payloads[0]["object"] == "text_completion"
    assert payloads[-1]["choices"] == [] and payloads[-1]["usage"]["completion_tokens"] == N
    # the first event is already a token: it comes at TTFT
    assert ev[0].t - r.t_send >= 0.015


def test_max_dialect_has_vllm_wire_format(start_sim, raw_http):
    sim = start_sim("--dialect", "max", "--ttft-ms", "2", "--itl-ms", "1", "--model", MODEL)
    r = raw_http.post(sim.port, "/v1/chat/completions", chat_body())
    payloads = [e.json() for e in r.data_events()]
    assert r.done_marker
    assert payloads[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert len(payloads) == 1 + N + 1


# -- SGLang ----------------------------------------------------------------------------------------------


def test_sglang_empty_first_event_before_first_token(sglang, raw_http):
    r = raw_http.post(sglang.port, "/v1/completions", text_body())
    assert r.status == 200 and r.done_marker
    payloads = [e.json() for e in r.data_events()]
    assert payloads[0]["choices"][0]["text"] == ""
    assert len(payloads) == 1 + N + 1
    assert all(p["choices"][0]["text"] for p in payloads[1:-1])
    first, second = r.events[0].t - r.t_send, r.events[1].t - r.t_send
    # sent at once, not with the first token 200 ms later (a busy machine may delay it, not by 150 ms)
    assert second - first > 0.05, f"empty first event {first * 1000:.1f} ms, first token {second * 1000:.1f} ms"
    assert second >= 0.195, f"first token came after {second * 1000:.1f} ms, ttft is 200 ms"


def test_sglang_chat_empty_first_event(sglang, raw_http):
    r = raw_http.post(sglang.port, "/v1/chat/completions", chat_body())
    payloads = [e.json() for e in r.data_events()]
    assert payloads[0]["choices"][0]["delta"].get("content") == ""
    first_token = next(e.t for e, p in zip(r.data_events(), payloads, strict=True)
                       if p["choices"] and p["choices"][0]["delta"].get("content"))
    assert first_token - r.events[0].t > 0.05  # the empty event went out well before the first token
    assert sum(1 for p in payloads if p["choices"] and p["choices"][0]["delta"].get("content")) == N


# -- transformers serve ----------------------------------------------------------------------------------


def test_transformers_chat_quirks(transformers, raw_http):
    r = raw_http.post(transformers.port, "/v1/chat/completions", chat_body())
    assert r.status == 200 and r.complete
    assert not r.done_marker
    payloads = [e.json() for e in r.events]
    assert payloads[0]["choices"][0]["delta"].get("role") == "assistant"
    assert not payloads[0]["choices"][0]["delta"].get("content")
    # the role chunk goes out before generation, i.e. well before the 200 ms TTFT
    assert r.events[1].t - r.events[0].t > 0.05
    assert r.events[1].t - r.t_send >= 0.195
    content = payloads[1:]
    assert len(content) == N
    # usage rides on the finish chunk together with choices; no usage-only chunk
    assert content[-1]["choices"] and content[-1]["choices"][0]["finish_reason"] == "length"
    assert content[-1]["usage"]["completion_tokens"] == N
    assert all("usage" not in p for p in payloads[:-1])


def test_transformers_text_quirks(transformers, raw_http):
    r = raw_http.post(transformers.port, "/v1/completions", text_body())
    assert not r.done_marker
    payloads = [e.json() for e in r.events]
    assert len(payloads) == N
    assert payloads[-1]["choices"][0]["text"] and payloads[-1]["usage"]["completion_tokens"] == N


def test_transformers_rejects_ignore_eos(transformers, raw_http):
    r = raw_http.post(transformers.port, "/v1/chat/completions", chat_body(ignore_eos=True))
    assert r.status == 422
    assert "ignore_eos" in json.dumps(r.json())


def test_transformers_error_inside_200_stream(start_sim, raw_http):
    sim = start_sim("--dialect", "transformers", "--error-rate", "1.0", "--ttft-ms", "1", "--itl-ms", "1",
                    "--model", MODEL)
    r = raw_http.post(sim.port, "/v1/chat/completions", chat_body())
    assert r.status == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    assert not r.done_marker
    payloads = [e.json() for e in r.events]
    assert payloads and "error" in payloads[-1]
    assert not any(p.get("choices") and p["choices"][0].get("finish_reason") for p in payloads)
    # a non-streaming request gets a real HTTP error
    r = raw_http.post(sim.port, "/v1/completions", text_body(stream=False))
    assert r.status in (500, 503, 429)


# -- native endpoints ------------------------------------------------------------------------------------


def _sglang_native(port, raw_http, n):
    body = {"text": "hello", "sampling_params": {"max_new_tokens": n, "temperature": 0, "ignore_eos": True},
            "stream": True}
    r = raw_http.post(port, "/generate", body)
    assert r.status == 200
    return r, [e.json() for e in r.data_events()]


def test_sglang_native_generate_cumulative(vllm, raw_http):
    r, events = _sglang_native(vllm.port, raw_http, N)
    assert r.done_marker
    assert len(events) == N
    counts = [e["meta_info"]["completion_tokens"] for e in events]
    assert counts == list(range(1, N + 1))
    for prev, cur in itertools.pairwise(events):
        assert cur["text"].startswith(prev["text"]) and len(cur["text"]) > len(prev["text"])
    assert len(events[-1]["text"].split()) == N
    assert events[-1]["meta_info"]["finish_reason"]["type"] == "length"
    assert all(e["meta_info"]["finish_reason"] is None for e in events[:-1])

    # non-streaming gives the whole text at once
    body = {"text": "hello", "sampling_params": {"max_new_tokens": N, "ignore_eos": True}}
    full = raw_http.post(vllm.port, "/generate", body).json()
    assert full["text"] == events[-1]["text"]
    assert full["meta_info"]["completion_tokens"] == N


def test_sglang_native_generate_tokens_per_chunk(start_sim, raw_http):
    sim = start_sim("--ttft-ms", "1", "--itl-ms", "1", "--tokens-per-chunk", "2")
    _, events = _sglang_native(sim.port, raw_http, 9)
    counts = [e["meta_info"]["completion_tokens"] for e in events]
    assert counts == [1, 3, 5, 7, 9]
    assert [b - a for a, b in itertools.pairwise(counts)] == [2, 2, 2, 2]


def test_tgi_generate_stream(vllm, raw_http):
    body = {"inputs": "hello", "parameters": {"max_new_tokens": N, "do_sample": False, "details": True}}
    r = raw_http.post(vllm.port, "/generate_stream", body)
    assert r.status == 200 and r.complete
    lines = [line for line in r.body.split(b"\n") if line.strip()]
    assert len(lines) == N
    assert all(line.startswith(b"data:{") for line in lines), lines[0]  # no space after 'data:'
    events = [e.json() for e in r.events]
    tokens = [e["token"]["text"] for e in events]
    assert all(tokens)
    assert all(e["generated_text"] is None for e in events[:-1])
    assert events[-1]["generated_text"] == "".join(tokens)
    assert events[-1]["details"]["generated_tokens"] == N
    assert not r.done_marker


def test_trt_generate_stream(vllm, raw_http):
    body = {"text_input": "hello", "max_tokens": N, "temperature": 0, "stream": True}
    r = raw_http.post(vllm.port, "/v2/models/ensemble/generate_stream", body)
    assert r.status == 200 and r.complete
    events = [e.json() for e in r.events]
    assert len(events) == N
    assert all(e["text_output"] for e in events)
    assert [e["sequence_end"] for e in events] == [False] * (N - 1) + [True]
    assert len("".join(e["text_output"] for e in events).split()) == N


# -- errors and plumbing ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "raw", "param"),
    [
        ("/v1/completions", b"{not json", None),
        ("/v1/completions", b"[1, 2]", None),
        ("/v1/completions", json.dumps({"model": MODEL, "max_tokens": 3}).encode(), "prompt"),
        ("/v1/chat/completions", json.dumps({"model": MODEL, "max_tokens": 3}).encode(), "messages"),
        ("/v1/chat/completions", json.dumps({"model": MODEL, "messages": []}).encode(), "messages"),
        ("/v1/completions", json.dumps({"model": MODEL, "prompt": "p", "max_tokens": 0}).encode(), "max_tokens"),
        ("/v1/completions", json.dumps({"model": MODEL, "prompt": "p", "max_tokens": -5}).encode(), "max_tokens"),
        ("/v1/chat/completions",
         json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0}).encode(),
         "max_completion_tokens"),
        ("/v1/completions", json.dumps({"model": MODEL, "prompt": "p", "n": 2}).encode(), "n"),
        ("/v1/completions", json.dumps({"model": MODEL, "prompt": "p", "max_tokens": "ten"}).encode(), "max_tokens"),
        ("/generate", json.dumps({"sampling_params": {"max_new_tokens": 3}}).encode(), "text"),
        ("/generate_stream", json.dumps({"parameters": {}}).encode(), "inputs"),
    ],
    ids=["invalid-json", "not-object", "no-prompt", "no-messages", "empty-messages", "max-tokens-0",
         "max-tokens-negative", "max-completion-tokens-0", "n2", "max-tokens-string", "sglang-no-text", "tgi-no-inputs"],
)
def test_bad_requests_get_openai_400(vllm, raw_http, path, raw, param):
    r = raw_http.post(vllm.port, path, raw_body=raw)
    err = assert_openai_error(r, 400)
    assert err["param"] == param


def test_context_length_exceeded_is_400(start_sim, raw_http):
    sim = start_sim("--ttft-ms", "1", "--itl-ms", "1", "--max-model-len", "100", "--model", MODEL)
    r = raw_http.post(sim.port, "/v1/completions", text_body(n=50, prompt="x" * 400))
    err = assert_openai_error(r, 400)
    assert "context length" in err["message"]


def test_unknown_model_is_404_not_found(vllm, raw_http):
    r = raw_http.post(vllm.port, "/v1/chat/completions", chat_body(model="other-model"))
    err = assert_openai_error(r, 404)
    assert err["type"] == "NotFoundError"
    assert "other-model" in err["message"]


def test_unknown_path_health_models(vllm, raw_http):
    assert_openai_error(raw_http.get(vllm.port, "/v1/nothing-here"), 404)
    assert_openai_error(raw_http.post(vllm.port, "/nope", {}), 404)
    assert raw_http.get(vllm.port, "/health").status == 200
    models = raw_http.get(vllm.port, "/v1/models")
    assert models.status == 200
    assert [m["id"] for m in models.json()["data"]] == [MODEL]
    r = raw_http.get(vllm.port, "/v1/completions")
    assert 400 <= r.status < 500


def test_keep_alive_serves_many_requests_on_one_connection(vllm):
    conn = http.client.HTTPConnection("127.0.0.1", vllm.port, timeout=10)
    try:
        sock = None
        for i in range(6):
            stream = i % 2 == 0
            conn.request("POST", "/v1/completions", json.dumps(text_body(n=3 + i, stream=stream)),
                         {"Content-Type": "application/json"})
            resp = conn.getresponse()
            body = resp.read()
            assert resp.status == 200
            if stream:
                assert body.rstrip().endswith(b"data: [DONE]")
                assert body.count(b'"text":"') == 3 + i  # content chunks (the usage chunk has no text)
            else:
                assert json.loads(body)["usage"]["completion_tokens"] == 3 + i
            assert not resp.will_close
            if sock is None:
                sock = conn.sock
            assert conn.sock is sock, "the connection was re-opened"
        conn.request("GET", "/health")
        assert conn.getresponse().status == 200
    finally:
        conn.close()


def test_pipelined_requests_in_one_send(vllm, raw_http):
    first = raw_http.build("POST", "/v1/completions", text_body(n=4, prompt="first"))
    second = raw_http.build("POST", "/v1/completions", text_body(n=3, prompt="second", stream=False))
    third = raw_http.build("POST", "/v1/completions", raw_body=b"{broken")
    fourth = raw_http.build("GET", "/health")
    with socket.create_connection(("127.0.0.1", vllm.port), timeout=10) as sock:
        t0 = time.perf_counter()
        sock.sendall(first + second + third + fourth)
        reads = []
        responses = []
        while len(responses) < 4:
            data = sock.recv(65536)
            if not data:
                break
            reads.append((time.perf_counter(), data))
            raw = b"".join(d for _, d in reads)
            responses, pos = [], 0
            while pos < len(raw) and len(responses) < 4:
                resp, pos = raw_http.parse(reads, t0, pos)
                if not resp.complete:
                    break
                responses.append(resp)
    assert [r.status for r in responses] == [200, 200, 400, 200]
    assert all(r.complete for r in responses)
    streamed = [e.json() for e in responses[0].data_events()]
    assert sum(1 for p in streamed if p["choices"]) == 4
    assert responses[1].json()["usage"]["completion_tokens"] == 3
