"""`llmload sim` over real sockets: image parts on the chat, Responses and Messages routes add Qwen2-VL's image
tokens to the prompt (and bad image data gets vLLM's 400), and the pooling routes (/v1/embeddings with the
official openai SDK, /pooling, the rerank routes) answer vLLM's shapes, batched with streaming generation."""

from __future__ import annotations

import base64
import io
import threading
import time

import numpy as np
import openai
import pytest
from PIL import Image
from prometheus_client.parser import text_string_to_metric_families
from support import trace_lines

MODEL = "mm-model"


def jpeg_b64(width: int, height: int, seed: int) -> str:
    """A noise JPEG as vLLM's random-mm dataset makes them (RGB uint8, Pillow's default quality)."""
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="JPEG")
    return base64.b64encode(buf.getvalue()).decode()


IMAGES = [jpeg_b64(224, 224, 1), jpeg_b64(224, 224, 2)]
TEXT = "Describe both pictures and say how they differ."


@pytest.fixture(scope="module")
def sim(start_sim_module):
    return start_sim_module("--profile", "tiny", "--model", MODEL)


def post_ok(raw_http, sim, path: str, body: dict) -> dict:
    r = raw_http.post(sim.port, path, body)
    assert r.status == 200, r.body[:500]
    return r.json()


# -- images on the chat-style routes -------------------------------------------------------------------------


def chat_body(parts: list) -> dict:
    return {"model": MODEL, "max_tokens": 3, "messages": [{"role": "user", "content": parts}]}


def test_chat_images_add_64_tokens_each(raw_http, sim):
    text = {"type": "text", "text": TEXT}
    images = [{"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{b}"}} for b in IMAGES]
    plain = post_ok(raw_http, sim, "/v1/chat/completions", chat_body([text]))["usage"]["prompt_tokens"]
    with_images = post_ok(raw_http, sim, "/v1/chat/completions", chat_body([text, *images]))
    assert with_images["usage"]["prompt_tokens"] == plain + 128
    # the string form of image_url, and a streamed answer's usage chunk, count the same
    string_form = [{"type": "image_url", "image_url": f"data:image/jpeg;base64,{b}"} for b in IMAGES]
    r = raw_http.post(sim.port, "/v1/chat/completions", {**chat_body([text, *string_form]), "stream": True,
                                                         "stream_options": {"include_usage": True}})
    assert r.status == 200 and r.done_marker
    usage = [e.json()["usage"] for e in r.data_events() if e.json().get("usage")]
    assert usage and usage[-1]["prompt_tokens"] == plain + 128


def test_responses_images(raw_http, sim):
    def body(parts: list) -> dict:
        return {"model": MODEL, "max_output_tokens": 3, "input": [{"role": "user", "content": parts}]}

    text = {"type": "input_text", "text": TEXT}
    images = [{"type": "input_image", "image_url": f"data:image/jpeg;base64,{b}"} for b in IMAGES]
    plain = post_ok(raw_http, sim, "/v1/responses", body([text]))["usage"]["input_tokens"]
    assert post_ok(raw_http, sim, "/v1/responses", body([text, *images]))["usage"]["input_tokens"] == plain + 128


def test_messages_images(raw_http, sim):
    def body(parts: list) -> dict:
        return {"model": MODEL, "max_tokens": 3, "messages": [{"role": "user", "content": parts}]}

    text = {"type": "text", "text": TEXT}
    images = [{"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": b}} for b in IMAGES]
    plain = post_ok(raw_http, sim, "/v1/messages", body([text]))["usage"]["input_tokens"]
    assert post_ok(raw_http, sim, "/v1/messages", body([text, *images]))["usage"]["input_tokens"] == plain + 128


def test_bad_image_gets_vllms_400(raw_http, sim):
    not_an_image = base64.b64encode(b"these bytes are no picture").decode()
    part = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{not_an_image}"}}
    r = raw_http.post(sim.port, "/v1/chat/completions", chat_body([{"type": "text", "text": "hi"}, part]))
    assert r.status == 400
    assert r.json() == {"error": {"message": "Failed to load image: cannot identify image file <_io.BytesIO object>",
                                  "type": "BadRequestError", "param": None, "code": 400}}
    r = raw_http.post(sim.port, "/v1/chat/completions",
                      chat_body([{"type": "image_url", "image_url": {"url": "data:image/png,abc"}}]))
    assert r.status == 501 and r.json()["error"]["type"] == "NotImplementedError"


# -- the pooling routes -------------------------------------------------------------------------------------


def test_openai_sdk_embeddings(sim):
    client = openai.OpenAI(base_url=f"{sim.url}/v1", api_key="x", max_retries=0, timeout=30)
    try:
        result = client.embeddings.create(model=MODEL, input=["a", "b"])  # the SDK asks for base64
        floats = client.embeddings.create(model=MODEL, input=["a", "b"], encoding_format="float")
    finally:
        client.close()
    assert len(result.data) == 2 and [d.index for d in result.data] == [0, 1]
    assert all(len(d.embedding) == 64 for d in result.data)
    assert result.data[0].embedding != result.data[1].embedding
    assert result.usage.prompt_tokens > 0 and result.usage.total_tokens == result.usage.prompt_tokens
    assert [d.embedding for d in floats.data] == [d.embedding for d in result.data]


def test_pooling_route_shape(raw_http, sim):
    body = post_ok(raw_http, sim, "/pooling", {"model": MODEL, "input": ["first input", "second"]})
    assert body["id"].startswith("pool-") and body["object"] == "list" and body["model"] == MODEL
    assert [(d["index"], d["object"]) for d in body["data"]] == [(0, "pooling"), (1, "pooling")]
    assert all(len(d["data"]) == 64 for d in body["data"])
    usage = body["usage"]
    assert usage["prompt_tokens"] == usage["total_tokens"] > 0 and usage["completion_tokens"] == 0


@pytest.mark.parametrize("path", ["/v1/rerank", "/rerank", "/v2/rerank"])
def test_rerank_shape(raw_http, sim, path):
    docs = [f"document {i} about batching" for i in range(5)]
    full = post_ok(raw_http, sim, path, {"model": MODEL, "query": "what is batching", "documents": docs})
    top = post_ok(raw_http, sim, path, {"model": MODEL, "query": "what is batching", "documents": docs, "top_n": 2})
    assert full["id"].startswith("rerank-") and full["model"] == MODEL
    scores = [r["relevance_score"] for r in full["results"]]
    assert scores == sorted(scores, reverse=True) and sorted(r["index"] for r in full["results"]) == list(range(5))
    assert all(r["document"]["text"] == docs[r["index"]] for r in full["results"])
    assert top["results"] == full["results"][:2]
    assert top["usage"]["prompt_tokens"] == top["usage"]["total_tokens"] == full["usage"]["total_tokens"] > 0


def test_pooling_errors(raw_http, sim):
    r = raw_http.post(sim.port, "/v1/embeddings", {"model": MODEL, "input": []})
    assert r.status == 400 and r.json()["error"]["type"] == "BadRequestError"
    assert raw_http.post(sim.port, "/v1/embeddings", {"model": "nope", "input": "a"}).status == 404
    assert raw_http.post(sim.port, "/pooling", {"model": MODEL, "input": "a", "stream": True}).status == 400


# -- batched with generation, counted in /metrics and the trace ------------------------------------------------


def metric(families: dict, name: str, **labels: str) -> float:
    family = families[name.removesuffix("_total").removesuffix("_count")]
    return sum(s.value for s in family.samples if s.name == name and all(s.labels.get(k) == v
                                                                          for k, v in labels.items()))


def test_pooling_mixed_with_streaming_generation(start_sim, raw_http, tmp_path):
    trace = tmp_path / "trace.jsonl"
    sim = start_sim("--profile", "tiny", "--model", MODEL, "--trace-file", str(trace))
    gen = [raw_http.build("POST", "/v1/completions", {"model": MODEL, "prompt": f"prompt {i} " * 20,
                                                      "max_tokens": 40, "stream": True, "ignore_eos": True,
                                                      "stream_options": {"include_usage": True}})
           for i in range(6)]
    pool = [raw_http.build("POST", "/v1/embeddings", {"model": MODEL, "input": ["text " * 300, "short"]}),
            raw_http.build("POST", "/v1/rerank", {"model": MODEL, "query": "q " * 50, "documents": ["d " * 200] * 4})]
    out: list = []
    sender = threading.Thread(target=lambda: out.extend(raw_http.many(sim.port, gen + pool, total_timeout=60)))
    sender.start()
    sender.join(90)
    assert not sender.is_alive() and len(out) == 8
    assert all(r.status == 200 and r.complete for r in out), [r.status for r in out]
    gen_prompt = [[e.json() for e in r.data_events() if e.json().get("usage")][-1]["usage"] for r in out[:6]]
    assert all(u["completion_tokens"] == 40 for u in gen_prompt)
    pooled = [r.json()["usage"]["prompt_tokens"] for r in out[6:]]
    deadline = time.monotonic() + 20
    while len(lines := trace_lines(trace)) < 8 and time.monotonic() < deadline:
        time.sleep(0.02)  # a request's trace line follows its last byte
    assert len(lines) == 8
    pool_lines = [x for x in lines if x["path"] in ("/v1/embeddings", "/v1/rerank")]
    assert [(x["status"], x["completion_tokens"], x["max_tokens"]) for x in pool_lines] == [("ok", 0, 0)] * 2
    assert sorted(x["inputs"] for x in pool_lines) == [2, 4] and sorted(x["prompt_tokens"] for x in pool_lines) == sorted(pooled)
    # the engine batched them: each pooling request was in the batch while every generation was running
    gen_spans = [(x["admitted"], x["ended"]) for x in lines if x["path"] == "/v1/completions"]
    assert all(x["admitted"] < end and start < x["ended"] for x in pool_lines for start, end in gen_spans)
    families = {f.name: f for f in text_string_to_metric_families(raw_http.get(sim.port, "/metrics").body.decode())}
    assert metric(families, "vllm:prompt_tokens_total") == sum(u["prompt_tokens"] for u in gen_prompt) + sum(pooled)
    assert metric(families, "vllm:generation_tokens_total") == 6 * 40
    assert metric(families, "vllm:request_success_total", finished_reason="stop") == 2
    assert metric(families, "vllm:request_success_total", finished_reason="length") == 6
    assert metric(families, "vllm:e2e_request_latency_seconds_count") == 8
    assert "vllm:mm_cache_queries" not in families  # served once an image has been seen


def test_mm_cache_counters(start_sim, raw_http):
    sim = start_sim("--profile", "tiny", "--model", MODEL)
    image = {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{IMAGES[0]}"}}
    post_ok(raw_http, sim, "/v1/chat/completions", chat_body([image, image]))
    post_ok(raw_http, sim, "/v1/embeddings", {"model": MODEL, "messages": [{"role": "user", "content": [image]}]})
    families = {f.name: f for f in text_string_to_metric_families(raw_http.get(sim.port, "/metrics").body.decode())}
    assert metric(families, "vllm:mm_cache_queries_total", engine="0") == 3
    assert metric(families, "vllm:mm_cache_hits_total", engine="0") == 2


def test_pooling_in_fixed_timing_mode(start_sim, raw_http):
    sim = start_sim("--ttft-ms", "5", "--itl-ms", "1", "--model", MODEL)
    body = post_ok(raw_http, sim, "/v1/embeddings", {"model": MODEL, "input": ["one", "two", "six"]})
    assert len(body["data"]) == 3 and body["usage"]["prompt_tokens"] == 3
    families = {f.name: f for f in text_string_to_metric_families(raw_http.get(sim.port, "/metrics").body.decode())}
    assert metric(families, "vllm:generation_tokens_total") == 0
    assert metric(families, "vllm:prompt_tokens_total") == 3
    assert metric(families, "vllm:request_success_total", finished_reason="stop") == 1
