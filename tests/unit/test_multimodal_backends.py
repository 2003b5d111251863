"""How each dialect carries images and pooling inputs: vLLM's bodies (docs/multimodal.md), and what the reader makes
of a pooling answer (an E2E latency, the server's prompt tokens, no first token)."""

from __future__ import annotations

import orjson
import pytest

from llmload.client.backends import POOLING_BACKENDS, get_backend
from llmload.client.backends.pooling import grounded_prompt, pooled_inputs
from llmload.client.reader import StreamReader
from llmload.client.records import RequestRecord
from llmload.client.transport.response import Response

URLS = ["data:image/png;base64,iVBORw0KGgo=", "https://example.invalid/x.jpg"]


def body(backend: str, **kw: object) -> dict:
    return get_backend(backend).build_body("look", 8, model="m", ignore_eos=False, **kw)


@pytest.mark.parametrize("backend", ["openai-chat", "modular-chat"])
def test_openai_chat_parts_text_first(backend: str) -> None:
    content = body(backend, images=URLS)["messages"][-1]["content"]
    assert content == [{"type": "text", "text": "look"},
                       *({"type": "image_url", "image_url": {"url": u}} for u in URLS)]


def test_responses_parts() -> None:
    given = body("openai-responses", images=URLS)["input"]
    assert given == [{"role": "user", "content": [{"type": "input_text", "text": "look"},
                                                  *({"type": "input_image", "image_url": u} for u in URLS)]}]


def test_anthropic_blocks() -> None:
    content = body("anthropic-messages", images=URLS)["messages"][-1]["content"]
    assert content == [{"type": "text", "text": "look"},
                       {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                    "data": "iVBORw0KGgo="}},
                       {"type": "image", "source": {"type": "url", "url": URLS[1]}}]


def test_images_leave_a_conversation_s_own_messages_alone() -> None:
    history = [{"role": "user", "content": "first"}, {"role": "assistant", "content": "ok"},
               {"role": "user", "content": "second"}]
    before = orjson.dumps(history)
    sent = body("openai-chat", messages=history, images=URLS[:1])["messages"]
    assert orjson.dumps(history) == before
    assert sent[0]["content"] == "first" and sent[2]["content"][0] == {"type": "text", "text": "second"}


@pytest.mark.parametrize("backend", ["vllm", "openai", "sglang", "tgi", "tensorrt-llm", *POOLING_BACKENDS])
def test_dialects_without_images_say_so(backend: str) -> None:
    assert not get_backend(backend).sends_images


def test_pooling_bodies_are_vllm_s() -> None:
    assert body("openai-embeddings") == {"model": "m", "input": "look", "truncate_prompt_tokens": -1}
    assert body("openai-embeddings", inputs=["a", "b"], extra={"dimensions": 8}) == {
        "model": "m", "input": ["a", "b"], "truncate_prompt_tokens": -1, "dimensions": 8}
    assert body("vllm-pooling", inputs=["a"]) == {"model": "m", "input": ["a"], "truncate_prompt_tokens": -1}
    assert body("openai-embeddings-chat") == {
        "model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "look"}]}],
        "truncate_prompt_tokens": -1}
    # vLLM's rerank client ignores --extra-body; so does llmload's
    assert body("vllm-rerank", inputs=["q", "d1", "d2"], extra={"x": 1}) == {
        "model": "m", "query": "q", "documents": ["d1", "d2"], "truncate_prompt_tokens": -1}
    assert all(not get_backend(b).streams and "stream" not in body(b, inputs=["q", "d"]) for b in POOLING_BACKENDS)


def test_input_sequences_are_vllm_s() -> None:
    assert pooled_inputs("openai-embeddings", ["a", "b", "c"]) == 3
    assert pooled_inputs("openai-embeddings", None) == 1
    assert pooled_inputs("openai-embeddings-chat", ["a", "b"]) == 1
    assert pooled_inputs("vllm-rerank", ["q", "d1", "d2"]) == 2


def test_a_generation_class_answers_from_the_documents() -> None:
    prompt = grounded_prompt(["what?", "doc one", "doc two"])
    assert prompt.index("doc one") < prompt.index("doc two") < prompt.index("what?")


def answer(status: int, payload: object) -> Response:
    resp = Response()
    resp.status = status
    resp.headers = {"content-type": "application/json"}
    resp.body = orjson.dumps(payload)
    resp.lines = [(123.5, resp.body)]
    return resp


@pytest.mark.parametrize(("backend", "payload", "tokens"), [
    ("openai-embeddings", {"data": [{"embedding": [0.1]}], "usage": {"prompt_tokens": 7, "total_tokens": 7}}, 7),
    ("vllm-pooling", {"data": [{"data": [0.1]}], "usage": {"prompt_tokens": 5}}, 5),
    ("vllm-rerank", {"results": [{"index": 0, "relevance_score": 0.5}], "usage": {"total_tokens": 9}}, 9),
    ("openai-embeddings", {"data": []}, None),
])
def test_a_pooling_answer_is_an_e2e_latency_without_a_first_token(backend: str, payload: object,
                                                                   tokens: int | None) -> None:
    record = RequestRecord(start=123.0)
    StreamReader(record, False, get_backend(backend)).finish(answer(200, payload))
    assert record.success and record.first_token is None and record.ttft is None
    assert record.e2el == pytest.approx(0.5) and record.output_tokens == 0
    assert record.server_prompt_tokens == tokens


def test_a_pooling_answer_of_the_wrong_shape_fails_the_request() -> None:
    record = RequestRecord(start=1.0)
    StreamReader(record, False, get_backend("vllm-rerank")).finish(answer(200, {"data": []}))
    assert not record.success and "no 'results' list" in record.error
    record = RequestRecord(start=1.0)
    StreamReader(record, False, get_backend("openai-embeddings")).finish(
        answer(200, {"error": {"message": "boom"}}))
    assert not record.success and "boom" in record.error
