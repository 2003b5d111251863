"""The Responses and Messages APIs' typed streams, as recorded from their servers' formats, give the same text,
TTFT flags, token counts and errors as the equivalent chat stream (``VLLM_CHAT`` in test_backends.py): the
first content event, one counted event per text delta, usage from the final events. Bodies and headers too."""

from __future__ import annotations

import pytest
from test_backends import VLLM_CHAT, check_mutations, events

from llmload.client.backends import get_backend

# OpenAI /v1/responses, stream: typed events; the text as two output_text deltas; usage on response.completed
RESPONSES = (
    b'event: response.created\ndata: {"type":"response.created","sequence_number":0,"response":{"id":"resp_1",'
    b'"object":"response","status":"in_progress","output":[]}}\n\n'
    b'event: response.in_progress\ndata: {"type":"response.in_progress","sequence_number":1,"response":'
    b'{"id":"resp_1","status":"in_progress"}}\n\n'
    b'event: response.output_item.added\ndata: {"type":"response.output_item.added","sequence_number":2,'
    b'"output_index":0,"item":{"type":"message","id":"msg_1","status":"in_progress","role":"assistant",'
    b'"content":[]}}\n\n'
    b'event: response.content_part.added\ndata: {"type":"response.content_part.added","sequence_number":3,'
    b'"item_id":"msg_1","output_index":0,"content_index":0,"part":{"type":"output_text","text":""}}\n\n'
    b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","sequence_number":4,'
    b'"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hi"}\n\n'
    b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","sequence_number":5,'
    b'"item_id":"msg_1","output_index":0,"content_index":0,"delta":" there"}\n\n'
    b'event: response.output_text.done\ndata: {"type":"response.output_text.done","sequence_number":6,'
    b'"item_id":"msg_1","output_index":0,"content_index":0,"text":"Hi there"}\n\n'
    b'event: response.completed\ndata: {"type":"response.completed","sequence_number":7,"response":{"id":'
    b'"resp_1","status":"completed","output":[],"usage":{"input_tokens":12,"input_tokens_details":'
    b'{"cached_tokens":4},"output_tokens":2,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":14}}}\n\n'
)

# Anthropic /v1/messages, stream: message_start (prompt usage), ping, two text deltas, message_delta (output)
MESSAGES = (
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","type":"message","role":'
    b'"assistant","content":[],"model":"m","stop_reason":null,"usage":{"input_tokens":8,'
    b'"cache_read_input_tokens":4,"cache_creation_input_tokens":0,"output_tokens":1}}}\n\n'
    b'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text",'
    b'"text":""}}\n\n'
    b'event: ping\ndata: {"type": "ping"}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta",'
    b'"text":"Hi"}}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta",'
    b'"text":" there"}}\n\n'
    b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
    b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},'
    b'"usage":{"output_tokens":2}}\n\n'
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
)


def _summary(name: str, raw: bytes) -> dict:
    """What the reader takes from a stream: the counted events' texts (content rule), the tokens, the finish."""
    evs = events(name, raw)
    return {"texts": [e.text for e in evs if e.content], "first": next(i for i, e in enumerate(evs) if e.content) >= 0,
            "completion": [e.completion_tokens for e in evs if e.completion_tokens is not None][-1],
            "prompt": [e.prompt_tokens for e in evs if e.prompt_tokens is not None][-1],
            "finish": [e.finish_reason for e in evs if e.finish_reason][-1], "errors": [e.error for e in evs if e.error]}


@pytest.mark.parametrize(("name", "raw"), [("openai-responses", RESPONSES), ("anthropic-messages", MESSAGES)])
def test_a_typed_stream_reads_as_the_chat_stream(name: str, raw: bytes) -> None:
    chat, typed = _summary("openai-chat", VLLM_CHAT), _summary(name, raw)
    assert typed == chat, (typed, chat)
    # under vLLM's rule the same events count (no typed event before the first delta does)
    evs = events(name, raw)
    assert [e.text for e in evs if e.has_choices] == ["Hi", " there"]


def test_cached_tokens_come_with_the_prompt_usage() -> None:
    responses = [e for e in events("openai-responses", RESPONSES) if e.prompt_tokens is not None]
    assert [(e.prompt_tokens, e.cached_tokens) for e in responses] == [(12, 4)]
    # Anthropic counts cached prompt tokens apart from input_tokens: the prompt is both
    messages = [e for e in events("anthropic-messages", MESSAGES) if e.prompt_tokens is not None]
    assert [(e.prompt_tokens, e.cached_tokens) for e in messages] == [(12, 4)]


def test_reasoning_and_tool_call_deltas_are_content() -> None:
    responses = (b'data: {"type":"response.reasoning_text.delta","delta":"think"}\n\n'
                 b'data: {"type":"response.function_call_arguments.delta","delta":"{\\"a\\""}\n\n'
                 b'data: {"type":"response.output_text.delta","delta":"ok"}\n\n')
    evs = events("openai-responses", responses)
    assert [(e.content, e.reasoning, e.text) for e in evs] == [(True, "think", ""), (True, "", ""), (True, "", "ok")]
    messages = (b'data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hm"}}\n\n'
                b'data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta",'
                b'"partial_json":"{"}}\n\n'
                b'data: {"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"ok"}}\n\n')
    evs = events("anthropic-messages", messages)
    assert [(e.content, e.reasoning, e.text) for e in evs] == [(True, "hm", ""), (True, "", ""), (True, "", "ok")]


@pytest.mark.parametrize(("name", "payload", "message"), [
    ("openai-responses", b'data: {"type":"error","code":"server_error","message":"boom  now"}\n\n', "boom now"),
    ("openai-responses", b'data: {"type":"response.failed","response":{"error":{"code":"x","message":"bad"}}}\n\n',
     "bad"),
    ("anthropic-messages", b'data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n',
     "Overloaded"),
])
def test_error_events_fail_the_request_with_their_message(name: str, payload: bytes, message: str) -> None:
    assert [e.error for e in events(name, payload)] == [message]


def test_max_tokens_reached_is_a_length_finish() -> None:
    incomplete = (b'data: {"type":"response.incomplete","response":{"status":"incomplete","usage":'
                  b'{"input_tokens":3,"output_tokens":9}}}\n\n')
    assert [(e.finish_reason, e.completion_tokens) for e in events("openai-responses", incomplete)] == [("length", 9)]
    delta = b'data: {"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":9}}\n\n'
    assert [(e.finish_reason, e.completion_tokens) for e in events("anthropic-messages", delta)] == [("length", 9)]


def test_bodies_headers_and_whole_responses() -> None:
    responses, messages = get_backend("openai-responses"), get_backend("anthropic-messages")
    assert responses.build_body("hi", 7, model="m", ignore_eos=False) == {
        "model": "m", "input": "hi", "max_output_tokens": 7, "temperature": 0.0, "stream": True}
    history = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    assert responses.build_body("", 7, model="m", ignore_eos=True, messages=history)["input"] == history
    body = messages.build_body("", 7, model="m", ignore_eos=False, messages=history)
    assert body == {"model": "m", "messages": [{"role": "user", "content": "hi"}], "system": "be brief",
                    "max_tokens": 7, "temperature": 0.0, "stream": True}
    assert messages.extra_headers() == {"anthropic-version": "2023-06-01"}
    assert messages.auth_headers("k") == {"x-api-key": "k", "Authorization": "Bearer k"}
    assert responses.auth_headers("k") == {"Authorization": "Bearer k"} and responses.extra_headers() == {}
    whole = (b'{"id":"r","object":"response","status":"completed","output":[{"type":"reasoning","summary":[]},'
             b'{"type":"message","content":[{"type":"output_text","text":"Hi there"}]}],'
             b'"usage":{"input_tokens":5,"output_tokens":2}}')
    assert responses.parse_response(whole) == ("Hi there", 2, 5)
    anthropic = (b'{"id":"m","type":"message","content":[{"type":"text","text":"Hi"},{"type":"text","text":" there"}],'
                 b'"usage":{"input_tokens":3,"cache_read_input_tokens":2,"output_tokens":2}}')
    assert messages.parse_response(anthropic) == ("Hi there", 2, 5)


def test_mutated_typed_streams_never_raise() -> None:
    check_mutations([RESPONSES, MESSAGES], seed=7, rounds=2000)
