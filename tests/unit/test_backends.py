"""Each engine's real stream bytes give the text, TTFT flags, token counts and errors users see."""

from __future__ import annotations

import random

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmload.client.backends import BACKENDS, StreamEvent, get_backend
from llmload.client.sse import DONE, parse_line
from llmload.common.errors import ConfigError, EndpointError


def events(name: str, raw: bytes) -> list[StreamEvent]:
    """Feed a byte stream line by line, as the Locust user does; stop at [DONE] or EOF."""
    backend = get_backend(name)
    state = backend.new_state()
    out = []
    for line in raw.splitlines(keepends=True):
        payload = parse_line(line)
        if payload is None:
            continue
        if payload == DONE:
            break
        out.append(backend.parse_event(payload, state))
    return out


# vLLM /v1/completions with stream_options.include_usage: usage arrives on a choice-less last chunk.
VLLM_COMPLETIONS = (
    b'data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":'
    b'[{"index":0,"text":" Hello","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":null}\n\n'
    b'data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":'
    b'[{"index":0,"text":" world","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":null}\n\n'
    b'data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":'
    b'[{"index":0,"text":"!","logprobs":null,"finish_reason":"length","stop_reason":null}],"usage":null}\n\n'
    b'data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[],'
    b'"usage":{"prompt_tokens":7,"total_tokens":10,"completion_tokens":3}}\n\n'
    b"data: [DONE]\n\n"
)

# vLLM /v1/chat/completions: a role-only first chunk, sent before generation.
VLLM_CHAT = (
    b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":'
    b'[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n'
    b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":'
    b'[{"index":0,"delta":{"content":"Hi"},"logprobs":null,"finish_reason":null}]}\n\n'
    b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":'
    b'[{"index":0,"delta":{"content":" there"},"logprobs":null,"finish_reason":"stop","stop_reason":null}]}\n\n'
    b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],'
    b'"usage":{"prompt_tokens":12,"total_tokens":14,"completion_tokens":2}}\n\n'
    b"data: [DONE]\n\n"
)

# SGLang native /generate: cumulative text, empty first chunk, completion_tokens jumping by 3.
SGLANG = (
    b'data: {"text":"","meta_info":{"id":"a","finish_reason":null,"prompt_tokens":5,"completion_tokens":1,'
    b'"cached_tokens":0}}\n\n'
    b'data: {"text":"The","meta_info":{"id":"a","finish_reason":null,"prompt_tokens":5,"completion_tokens":2,'
    b'"cached_tokens":0}}\n\n'
    b'data: {"text":"The quick brown","meta_info":{"id":"a","finish_reason":null,"prompt_tokens":5,'
    b'"completion_tokens":5,"cached_tokens":0}}\n\n'
    b'data: {"text":"The quick brown fox","meta_info":{"id":"a","finish_reason":{"type":"length","length":6},'
    b'"prompt_tokens":5,"completion_tokens":6,"cached_tokens":0}}\n\n'
    b"data: [DONE]\n\n"
)

# TGI /generate_stream: "data:" without a space, one token per event, final generated_text + details.
TGI_STREAM = (
    b'data:{"index":1,"token":{"id":415,"text":"The","logprob":-0.5,"special":false},'
    b'"generated_text":null,"details":null}\n\n'
    b'data:{"index":2,"token":{"id":2936,"text":" sky","logprob":-0.3,"special":false},'
    b'"generated_text":null,"details":null}\n\n'
    b": ping\n\n"
    b'data:{"index":3,"token":{"id":2,"text":"</s>","logprob":-0.1,"special":true},'
    b'"generated_text":"The sky","details":{"finish_reason":"eos_token","generated_tokens":3,"seed":null}}\n\n'
)

# Triton / TensorRT-LLM ensemble generate_stream.
TRT_STREAM = (
    b'data: {"model_name":"ensemble","model_version":"1","sequence_end":false,"sequence_id":0,'
    b'"sequence_start":false,"text_output":"Paris"}\n\n'
    b'data: {"model_name":"ensemble","model_version":"1","sequence_end":false,"sequence_id":0,'
    b'"sequence_start":false,"text_output":" is"}\n\n'
)

# transformers serve 5.x chat: role chunk, usage on the finish chunk, no [DONE].
TRANSFORMERS_CHAT = (
    b'data: {"id":"req_0","choices":[{"delta":{"role":"assistant"},"index":0}],"created":1,"model":"m",'
    b'"object":"chat.completion.chunk","system_fingerprint":""}\n\n'
    b'data: {"id":"req_0","choices":[{"delta":{"content":"ab"},"index":0}],"created":1,"model":"m",'
    b'"object":"chat.completion.chunk","system_fingerprint":""}\n\n'
    b'data: {"id":"req_0","choices":[{"delta":{},"finish_reason":"length","index":0}],"created":1,"model":"m",'
    b'"object":"chat.completion.chunk","system_fingerprint":"",'
    b'"usage":{"completion_tokens":4,"prompt_tokens":9,"total_tokens":13}}\n\n'
)
TRANSFORMERS_ERROR = (
    b'data: {"id":"req_1","choices":[{"delta":{"role":"assistant"},"index":0}],"created":1,"model":"m",'
    b'"object":"chat.completion.chunk","system_fingerprint":""}\n\n'
    b'data: {"error": "CUDA out of memory.\\nTried to allocate 2.00 GiB"}\n\n'
)


def test_vllm_completions_usage_only_last_chunk() -> None:
    evs = events("vllm", VLLM_COMPLETIONS)
    assert "".join(e.text for e in evs) == " Hello world!"
    assert [e.content for e in evs] == [True, True, True, False]
    assert [e.has_choices for e in evs] == [True, True, True, False]
    assert evs[2].finish_reason == "length"
    assert (evs[-1].completion_tokens, evs[-1].prompt_tokens) == (3, 7)
    assert all(e.error is None for e in evs)


def test_vllm_chat_role_chunk_is_not_content() -> None:
    evs = events("openai-chat", VLLM_CHAT)
    first = evs[0]
    assert (first.content, first.has_choices, first.text) == (False, True, "")
    assert [e.content for e in evs] == [False, True, True, False]
    assert "".join(e.text for e in evs) == "Hi there"
    assert evs[-1].completion_tokens == 2


def test_sglang_cumulative_text_and_token_deltas() -> None:
    evs = events("sglang", SGLANG)
    assert [e.text for e in evs] == ["", "The", " quick brown", " fox"]
    assert [e.content for e in evs] == [False, True, True, True]
    assert all(e.has_choices for e in evs)  # vLLM's rule would count the empty first chunk
    # completion_tokens 1, 2, 5, 6 -> per-event deltas 1, 1, 3, 1
    assert [e.tokens for e in evs] == [1, 1, 3, 1]
    assert evs[-1].completion_tokens == 6
    assert evs[-1].prompt_tokens == 5
    assert evs[-1].finish_reason == "length"


def test_sglang_incremental_mode() -> None:
    raw = (
        b'data: {"text":"Hel","meta_info":{}}\n\ndata: {"text":"lo","meta_info":{}}\n\ndata: {"text":"!"}\n\n'
    )
    assert [e.text for e in events("sglang", raw)] == ["Hel", "lo", "!"]


def test_tgi_no_space_and_special_token() -> None:
    evs = events("tgi", TGI_STREAM)
    assert [e.text for e in evs] == ["The", " sky", ""]
    assert [e.tokens for e in evs] == [1, 1, 1]
    assert [e.content for e in evs] == [True, True, False]
    assert evs[-1].completion_tokens == 3
    assert evs[-1].finish_reason == "eos_token"


def test_tensorrt_llm_text_output() -> None:
    evs = events("tensorrt-llm", TRT_STREAM)
    assert [e.text for e in evs] == ["Paris", " is"]
    assert all(e.content and e.has_choices and e.tokens is None for e in evs)


def test_trt_ndjson_lines_without_data_prefix() -> None:
    raw = b'{"text_output":"a"}\n{"text_output":"b"}\n'
    assert [e.text for e in events("tensorrt-llm", raw)] == ["a", "b"]


def test_transformers_serve_usage_on_finish_chunk_no_done() -> None:
    evs = events("openai-chat", TRANSFORMERS_CHAT)
    assert len(evs) == 3  # ended on EOF
    assert [e.content for e in evs] == [False, True, False]
    last = evs[-1]
    assert last.has_choices and last.finish_reason == "length"
    assert (last.completion_tokens, last.prompt_tokens) == (4, 9)


def test_error_object_in_200_stream() -> None:
    evs = events("openai-chat", TRANSFORMERS_ERROR)
    assert evs[0].error is None
    assert evs[1].error == "CUDA out of memory. Tried to allocate 2.00 GiB"  # one line
    assert not evs[1].content


@pytest.mark.parametrize(
    "payload",
    [
        b'{"error":{"message":"boom","type":"BadRequestError","code":400}}',
        b'{"object":"error","message":"boom","type":"BadRequestError","code":400}',
        b'{"error":"boom","error_type":"generation"}',
    ],
)
def test_error_shapes(payload: bytes) -> None:
    for name in BACKENDS:
        assert get_backend(name).parse_event(payload, get_backend(name).new_state()).error == "boom"


@pytest.mark.parametrize(
    "payload", [b'{"choices": [', b"not json", b"[1, 2]", b'"str"', b'{"choices": "x"}', b"\xff\xfe"]
)
def test_malformed_is_an_error_event(payload: bytes) -> None:
    ev = get_backend("vllm").parse_event(payload, None)
    assert ev.error is not None and ev.error.startswith("malformed stream event")


def test_chat_reasoning_and_tool_calls_are_content() -> None:
    b = get_backend("openai-chat")
    ev = b.parse_event(b'{"choices":[{"index":0,"delta":{"reasoning_content":"hmm"}}]}', None)
    assert ev.content and ev.text == "" and ev.reasoning == "hmm"
    ev = b.parse_event(
        b'{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}]}', None
    )
    assert ev.content and ev.text == ""


def test_done_passed_to_parse_event_is_empty() -> None:
    ev = get_backend("openai").parse_event(DONE, None)
    assert ev == StreamEvent()


# --- request bodies ------------------------------------------------------------------------------


def body(name: str, **kw: object) -> dict:
    args: dict = {"model": "m", "ignore_eos": False}
    args.update(kw)
    return get_backend(name).build_body("hi", 16, **args)


def test_completions_body() -> None:
    for name in ("vllm", "openai"):
        assert body(name) == {
            "model": "m",
            "prompt": "hi",
            "max_tokens": 16,
            "logprobs": None,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        assert body(name, ignore_eos=True)["ignore_eos"] is True
        assert get_backend(name).default_path == "/v1/completions"
    # no temperature unless asked (today's vllm bench serve): the server's default sampling applies
    assert "temperature" not in body("openai-chat")


def test_chat_body_and_messages() -> None:
    b = body("openai-chat")
    assert b["messages"] == [{"role": "user", "content": "hi"}]
    assert b["max_completion_tokens"] == 16 and "ignore_eos" not in b
    assert b["stream_options"] == {"include_usage": True}
    history = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    assert body("openai-chat", messages=history)["messages"] is history


def test_native_bodies() -> None:
    assert body("sglang", ignore_eos=True) == {
        "text": "hi",
        "sampling_params": {"max_new_tokens": 16, "temperature": 0.0, "ignore_eos": True},
        "stream": True,
    }
    assert body("tgi") == {
        "inputs": "hi",
        "parameters": {
            "max_new_tokens": 16,
            "do_sample": True,
            "temperature": 0.01,
            "top_p": 0.99,
            "details": True,
        },
    }
    trt = body("tensorrt-llm", ignore_eos=True)
    assert trt["text_input"] == "hi" and trt["max_tokens"] == 16 and trt["stream"] is True
    assert trt["min_length"] == 16
    assert body("modular", ignore_eos=True) == {
        "model": "m",
        "prompt": "hi",
        "max_tokens": 16,
        "stream": True,
        "ignore_eos": True,
    }
    assert body("modular-chat", ignore_eos=True)["stream_options"] == {"include_usage": True}


def test_extra_is_merged_last() -> None:
    b = body("vllm", extra={"temperature": 0.7, "top_k": 5})
    assert b["temperature"] == 0.7 and b["top_k"] == 5


def test_registry() -> None:
    assert set(BACKENDS) == {
        "vllm",
        "openai",
        "openai-chat",
        "openai-responses",
        "anthropic-messages",
        "sglang",
        "modular",
        "modular-chat",
        "tgi",
        "tensorrt-llm",
        "openai-embeddings",
        "openai-embeddings-chat",
        "vllm-pooling",
        "vllm-rerank",
    }
    for name in BACKENDS:
        assert get_backend(name).name == name
    with pytest.raises(ConfigError, match="valid: vllm, openai"):
        get_backend("nope")


# --- non-streaming responses ---------------------------------------------------------------------


def test_parse_response() -> None:
    completion = {
        "choices": [{"index": 0, "text": "abc"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2},
    }
    assert get_backend("vllm").parse_response(orjson.dumps(completion)) == ("abc", 2, 3)
    chat = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}}], "usage": None}
    assert get_backend("openai-chat").parse_response(orjson.dumps(chat)) == ("x", None, None)
    sg = {"text": "t", "meta_info": {"prompt_tokens": 4, "completion_tokens": 1}}
    assert get_backend("sglang").parse_response(orjson.dumps(sg)) == ("t", 1, 4)
    tgi = [{"generated_text": "g", "details": {"generated_tokens": 5}}]
    assert get_backend("tgi").parse_response(orjson.dumps(tgi)) == ("g", 5, None)
    assert get_backend("tensorrt-llm").parse_response(b'{"text_output":"o"}') == ("o", None, None)
    with pytest.raises(EndpointError, match="server error: bad"):
        get_backend("vllm").parse_response(b'{"error":{"message":"bad"}}')
    with pytest.raises(EndpointError, match="malformed"):
        get_backend("tgi").parse_response(b"<html>")


# --- never raise on arbitrary input --------------------------------------------------------------

SAMPLES = [VLLM_COMPLETIONS, VLLM_CHAT, SGLANG, TGI_STREAM, TRT_STREAM, TRANSFORMERS_CHAT, TRANSFORMERS_ERROR]


def _check_all(payload: bytes) -> None:
    for name in BACKENDS:
        backend = get_backend(name)
        ev = backend.parse_event(payload, backend.new_state())
        assert isinstance(ev, StreamEvent)
        assert isinstance(ev.text, str) and isinstance(ev.content, bool)


def test_mutated_streams_never_raise() -> None:
    check_mutations(SAMPLES, seed=99, rounds=3000)


def check_mutations(samples: list[bytes], *, seed: int, rounds: int) -> None:
    """Every backend reads ``rounds`` lines of ``samples``, each with a few random bytes changed, without raising."""
    rng = random.Random(seed)
    lines = [ln for s in samples for ln in s.splitlines() if ln]
    for _ in range(rounds):
        line = bytearray(rng.choice(lines))
        for _ in range(rng.randrange(1, 4)):
            i = rng.randrange(len(line))
            line[i : i + rng.randrange(1, 4)] = rng.randbytes(rng.randrange(0, 3))
        payload = parse_line(bytes(line))
        if payload is not None:
            _check_all(payload)


FUZZ = settings(max_examples=200, deadline=None)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "choices",
                    "delta",
                    "text",
                    "content",
                    "usage",
                    "completion_tokens",
                    "meta_info",
                    "token",
                    "details",
                    "error",
                    "special",
                    "text_output",
                    "finish_reason",
                    "message",
                    "object",
                    "x",
                ]
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=12,
)

@FUZZ
@given(st.binary(max_size=200))
def test_hypothesis_bytes_never_raise(raw: bytes) -> None:
    _check_all(raw)

@FUZZ
@given(json_values)
@pytest.mark.slow
def test_hypothesis_json_shapes_never_raise(value: object) -> None:
    _check_all(orjson.dumps(value))


@settings(FUZZ, max_examples=100)  # each example runs every backend over a whole sequence
@given(st.lists(json_values.map(orjson.dumps) | st.binary(max_size=40), max_size=6))
def test_hypothesis_event_sequences_never_raise(payloads: list[bytes]) -> None:
    """One stream's events share a state (SGLang keeps the text so far): no sequence of junk breaks it."""
    for name in BACKENDS:
        backend = get_backend(name)
        state = backend.new_state()
        for payload in payloads:
            ev = backend.parse_event(payload, state)
            assert isinstance(ev, StreamEvent)
            assert isinstance(ev.text, str) and isinstance(ev.content, bool)
