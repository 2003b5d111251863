"""The simulator's pooling routes without a server: body checks and token counts, the JSON answers, and the engine's
prefill-only sequences (a pooling request costs its prefill, shares the step budget, and generates nothing)."""

from __future__ import annotations

import base64
import json
import math
from array import array

import pytest

from llmload.sim.config import PROFILES, SimConfig
from llmload.sim.engine import BatchEngine, Seq, simulate
from llmload.sim.errors import RequestError
from llmload.sim.requests import GenRequest, RequestParser
from llmload.sim.text import estimate_tokens
from llmload.sim.typed_wire import make_wire

MODEL = "pool-model"


def parse(kind: str, body: dict, **config: object) -> GenRequest:
    cfg = SimConfig(model=MODEL, **config)  # type: ignore[arg-type]
    return RequestParser(cfg).parse(kind, json.dumps({"model": MODEL, **body}).encode())


def answer(req: GenRequest) -> dict:
    return json.loads(make_wire(req, "vllm", "embd-test-1", 1700000000).full_json(b""))


def refused(kind: str, body: dict, **config: object) -> tuple[int, str]:
    with pytest.raises(RequestError) as info:
        parse(kind, body, **config)
    return info.value.status, json.loads(info.value.body)["error"]["message"]


# -- bodies and token counts -------------------------------------------------------------------------------


def test_embeddings_count_each_input():
    texts = ["a short one", "a somewhat longer input text to embed"]
    req = parse("embeddings", {"input": texts})
    assert req.pooled is not None and req.pooled.tokens == tuple(estimate_tokens(t) for t in texts)
    assert req.prompt_tokens == sum(req.pooled.tokens)
    assert (req.output_tokens, req.max_tokens, req.stream) == (0, 0, False)
    assert parse("embeddings", {"input": texts[1]}).prompt_tokens == estimate_tokens(texts[1])


def test_token_id_inputs_count_their_length():
    assert parse("embeddings", {"input": [1, 2, 3, 4, 5]}).prompt_tokens == 5
    req = parse("pooling", {"input": [[1, 2, 3], [4, 5]]})
    assert req.pooled is not None and req.pooled.tokens == (3, 2)


def test_a_tokenizer_counts_when_given():
    parser = RequestParser(SimConfig(model=MODEL), tokenize=lambda text: text.split())
    req = parser.parse("embeddings", json.dumps({"model": MODEL, "input": ["one two three", "four"]}).encode())
    assert req.prompt_tokens == 4


def test_truncate_prompt_tokens_caps_each_input():
    long = "word " * 400
    assert parse("embeddings", {"input": [long, "hi"], "truncate_prompt_tokens": 10}).prompt_tokens == 10 + 1
    capped = parse("embeddings", {"input": long, "truncate_prompt_tokens": -1}, max_model_len=100)
    assert capped.prompt_tokens == 100
    status, message = refused("embeddings", {"input": long}, max_model_len=100)
    assert status == 400 and message.startswith("This model's maximum context length is 100 tokens.")


def test_rerank_counts_one_pair_per_document():
    query, docs = "what is batching?", ["continuous batching", "a cat", "prefill and decode share a step"]
    req = parse("rerank", {"query": query, "documents": docs})
    q = estimate_tokens(query)
    assert req.prompt_tokens == sum(q + estimate_tokens(d) + 1 for d in docs)


def test_chat_form_counts_as_a_chat_prompt():
    messages = [{"role": "user", "content": [{"type": "text", "text": "embed this sentence please"}]}]
    req = parse("embeddings", {"messages": messages})
    assert req.prompt_tokens == estimate_tokens("user: embed this sentence please\n")
    assert req.pooled is not None and len(req.pooled.texts) == 1


@pytest.mark.parametrize(("kind", "body", "fragment"), [
    ("embeddings", {}, "'input' is required"),
    ("embeddings", {"input": []}, "'input' must be a non-empty"),
    ("embeddings", {"input": ""}, "'input' must not hold empty strings"),
    ("embeddings", {"input": ["a", 3]}, "'input' must be a string"),
    ("embeddings", {"input": "a", "stream": True}, "do not stream"),
    ("embeddings", {"input": "a", "encoding_format": "bytes"}, "encoding_format"),
    ("embeddings", {"input": "a", "dimensions": 0}, "'dimensions'"),
    ("pooling", {"input": "a", "truncate_prompt_tokens": 0}, "truncate_prompt_tokens"),
    ("rerank", {"documents": ["a"]}, "'query'"),
    ("rerank", {"query": "q", "documents": []}, "'documents'"),
    ("rerank", {"query": "q", "documents": ["a"], "top_n": -1}, "'top_n'"),
])
def test_bad_bodies_get_400(kind, body, fragment):
    status, message = refused(kind, body)
    assert status == 400 and fragment in message


def test_unknown_model_gets_404():
    cfg = SimConfig(model=MODEL)
    with pytest.raises(RequestError) as info:
        RequestParser(cfg).parse("embeddings", json.dumps({"model": "other", "input": "a"}).encode())
    assert info.value.status == 404


# -- the answers ------------------------------------------------------------------------------------------


def test_embeddings_answer_shape_and_vectors():
    req = parse("embeddings", {"input": ["a", "b", "a"]})
    body = answer(req)
    assert body["object"] == "list" and body["model"] == MODEL and body["id"] == "embd-test-1"
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] == req.prompt_tokens
    assert [d["index"] for d in body["data"]] == [0, 1, 2] and {d["object"] for d in body["data"]} == {"embedding"}
    vectors = [d["embedding"] for d in body["data"]]
    assert all(len(v) == 64 for v in vectors)
    assert vectors[0] == vectors[2] != vectors[1]
    assert math.isclose(math.sqrt(sum(x * x for x in vectors[1])), 1.0, rel_tol=1e-5)


def test_base64_is_little_endian_float32_of_the_same_vector():
    floats = answer(parse("embeddings", {"input": "hello", "dimensions": 8}))["data"][0]["embedding"]
    encoded = answer(parse("embeddings", {"input": "hello", "dimensions": 8, "encoding_format": "base64"}))
    raw = base64.b64decode(encoded["data"][0]["embedding"])
    assert len(raw) == 8 * 4 and array("f", raw).tolist() == floats


def test_pooling_answer_shape():
    body = answer(parse("pooling", {"input": ["x", "y"]}))
    assert [(d["index"], d["object"], len(d["data"])) for d in body["data"]] == [(0, "pooling", 64), (1, "pooling", 64)]
    assert body["usage"]["completion_tokens"] == 0


def test_rerank_answer_sorted_and_cut():
    docs = [f"document number {i}" for i in range(6)]
    full = answer(parse("rerank", {"query": "q", "documents": docs}))
    scores = [r["relevance_score"] for r in full["results"]]
    assert scores == sorted(scores, reverse=True) and all(0.0 <= s < 1.0 for s in scores)
    assert sorted(r["index"] for r in full["results"]) == list(range(6))
    assert all(r["document"]["text"] == docs[r["index"]] for r in full["results"])
    top = answer(parse("rerank", {"query": "q", "documents": docs, "top_n": 2}))
    assert top["results"] == full["results"][:2]
    assert top["usage"]["prompt_tokens"] == top["usage"]["total_tokens"] > 0


# -- the engine -------------------------------------------------------------------------------------------


def run_steps(engine: BatchEngine, limit: int = 100) -> list[list[tuple[object, int]]]:
    steps = []
    now = 0.0
    while not engine.idle and len(steps) < limit:
        now += engine.plan_step(now) or 1e-3
        steps.append([(s.key, n) for s, n in engine.complete_step(now)])
    return steps


def test_prefill_only_sequence_finishes_with_its_prefill():
    engine = BatchEngine(PROFILES["tiny"])
    seq = Seq("pool", 100, 50, prefill_only=True)
    assert seq.output_tokens == 0 and seq.reserved == 100
    engine.add(seq)
    steps = run_steps(engine)
    assert steps == [[("pool", 0)]]
    assert engine.idle and engine.kv_reserved == 0 and seq.generated == 0


def test_pooling_shares_the_step_budget_with_generation():
    profile = PROFILES["tiny"]  # 4096 prefill tokens a step
    engine = BatchEngine(profile)
    engine.add(Seq("gen", 10, 5))
    engine.add(Seq("pool", 6000, 0, prefill_only=True))
    steps = run_steps(engine)
    keys = [[k for k, _ in step] for step in steps]
    # step 1: gen's prefill and 4086 of pool's; step 2: gen decodes beside the rest of pool's prefill
    assert keys[0] == ["gen"] and keys[1] == ["pool", "gen"]
    assert sum(n for step in steps for k, n in step if k == "gen") == 5
    assert sum(1 for step in steps for k, _ in step if k == "pool") == 1
    assert engine.idle and engine.kv_reserved == 0


def test_pooling_stays_while_another_sequence_finishes():
    """A request that ends during a pooling request's chunked prefill must not take it out of the batch."""
    engine = BatchEngine(PROFILES["tiny"])
    engine.add(Seq("one-token", 10, 1))
    engine.add(Seq("pool", 6000, 0, prefill_only=True))
    steps = run_steps(engine)
    assert steps == [[("one-token", 1)], [("pool", 0)]]
    assert engine.idle and engine.kv_reserved == 0


def test_zero_output_without_prefill_only_still_generates_one_token():
    assert Seq("x", 10, 0).output_tokens == 1
    assert [len(t) for t in simulate(PROFILES["tiny"], [(0.0, 10, 0), (0.0, 10, 3)])] == [1, 3]
