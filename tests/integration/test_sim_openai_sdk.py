"""The official openai SDK can stream and fetch chat/text completions from `llmload sim` with exact usage counts."""

from __future__ import annotations

import math

import openai
import pytest

MODEL = "sim-test-model"


@pytest.fixture(scope="module")
def sim(start_sim_module):
    return start_sim_module("--profile", "tiny", "--model", MODEL, "--seed", "7")


@pytest.fixture(scope="module")
def client(sim):
    c = openai.OpenAI(base_url=f"{sim.url}/v1", api_key="x", max_retries=0, timeout=30)
    yield c
    c.close()


def _stream_chat(client, max_tokens, prompt="Tell me about batching."):
    return list(client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True}, temperature=0,
    ))


def _stream_text(client, max_tokens, prompt="Once upon a time"):
    return list(client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=max_tokens, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True}, temperature=0,
    ))


def _chat_content_chunks(chunks):
    return [c for c in chunks if c.choices and c.choices[0].delta.content]


@pytest.mark.parametrize("max_tokens", [7, 33])
def test_chat_stream_chunks_and_usage(client, max_tokens):
    chunks = _stream_chat(client, max_tokens)
    content = _chat_content_chunks(chunks)
    assert len(content) == max_tokens
    text = "".join(c.choices[0].delta.content for c in content)
    assert len(text.split()) == max_tokens  # one word per token
    # the final chunk carries usage only
    last = chunks[-1]
    assert last.choices == []
    assert last.usage is not None
    assert last.usage.completion_tokens == max_tokens
    assert last.usage.prompt_tokens > 0
    assert last.usage.total_tokens == last.usage.prompt_tokens + max_tokens
    # no other chunk carries usage; the last content chunk says why it stopped
    assert all(c.usage is None for c in chunks[:-1])
    assert content[-1].choices[0].finish_reason == "length"
    assert all(c.choices[0].finish_reason is None for c in content[:-1])
    assert len({c.id for c in chunks}) == 1
    assert chunks[0].model == MODEL


@pytest.mark.parametrize("max_tokens", [7, 33])
def test_text_stream_chunks_and_usage(client, max_tokens):
    chunks = _stream_text(client, max_tokens)
    content = [c for c in chunks if c.choices]
    assert len(content) == max_tokens
    assert all(c.choices[0].text for c in content)
    assert len("".join(c.choices[0].text for c in content).split()) == max_tokens
    last = chunks[-1]
    assert last.choices == []
    assert last.usage is not None and last.usage.completion_tokens == max_tokens
    assert content[-1].choices[0].finish_reason == "length"


def test_non_streaming_both_endpoints(client):
    chat = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi there"}], max_tokens=9,
        extra_body={"ignore_eos": True},
    )
    assert chat.object == "chat.completion"
    assert chat.choices[0].message.role == "assistant"
    assert len(chat.choices[0].message.content.split()) == 9
    assert chat.usage.completion_tokens == 9
    assert chat.usage.total_tokens == chat.usage.prompt_tokens + 9
    assert chat.choices[0].finish_reason == "length"

    text = client.completions.create(model=MODEL, prompt="x" * 400, max_tokens=12, extra_body={"ignore_eos": True})
    assert len(text.choices[0].text.split()) == 12
    assert text.usage.completion_tokens == 12
    # ~4 characters per prompt token without a tokenizer
    assert text.usage.prompt_tokens == 100


def test_max_completion_tokens_is_honoured(client):
    chunks = list(client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "q"}], max_completion_tokens=5, stream=True,
        stream_options={"include_usage": True},
    ))
    assert len(_chat_content_chunks(chunks)) == 5
    assert chunks[-1].usage.completion_tokens == 5


def test_no_usage_chunk_without_include_usage(client):
    chunks = list(client.completions.create(model=MODEL, prompt="p", max_tokens=4, stream=True))
    assert len(chunks) == 4
    assert all(c.choices and c.usage is None for c in chunks)


def test_models_list(client):
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]


def test_unknown_model_is_not_found(client):
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="no-such-model", prompt="p", max_tokens=3)


def test_text_is_deterministic_per_seed_and_prompt(client):
    def text(prompt):
        r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=20)
        return r.choices[0].text

    a1, a2 = text("The quick brown fox"), text("The quick brown fox")
    b = text("A completely different prompt about GPUs")
    assert a1 == a2
    assert a1 != b


def _text_of(url, prompt, max_tokens=20):
    with openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0) as c:
        return c.completions.create(model=MODEL, prompt=prompt, max_tokens=max_tokens).choices[0].text


def test_text_is_deterministic_across_processes_and_changes_with_seed(sim, start_sim):
    prompt = "The quick brown fox"
    same_seed = start_sim("--ttft-ms", "1", "--itl-ms", "0.5", "--model", MODEL, "--seed", "7")
    other_seed = start_sim("--ttft-ms", "1", "--itl-ms", "0.5", "--model", MODEL, "--seed", "8")
    reference = _text_of(sim.url, prompt)
    assert _text_of(same_seed.url, prompt) == reference
    assert _text_of(other_seed.url, prompt) != reference


@pytest.mark.parametrize("timing", [("--profile", "tiny"), ("--ttft-ms", "2", "--itl-ms", "1")],
                         ids=["batching", "fixed"])
def test_tokens_per_chunk(start_sim, timing):
    sim = start_sim(*timing, "--tokens-per-chunk", "3", "--model", MODEL)
    with openai.OpenAI(base_url=f"{sim.url}/v1", api_key="x", max_retries=0) as client:
        for max_tokens in (1, 7, 33):
            expected = 1 + math.ceil((max_tokens - 1) / 3)
            chunks = _stream_text(client, max_tokens)
            content = [c for c in chunks if c.choices]
            assert len(content) == expected, max_tokens
            words = [len(c.choices[0].text.split()) for c in content]
            assert words[0] == 1
            assert sum(words) == max_tokens
            assert chunks[-1].usage.completion_tokens == max_tokens

            chat = _stream_chat(client, max_tokens)
            assert len(_chat_content_chunks(chat)) == expected
            assert chat[-1].usage.completion_tokens == max_tokens
