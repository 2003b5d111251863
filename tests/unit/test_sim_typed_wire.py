"""The simulator's Responses and Messages streams, rendered in the order its server renders them (the first
delta before the events sent ahead of it): every event's ``sequence_number`` is its position, reasoning comes
first in an item (Responses) or block (Messages) of its own, and llmload's own parsers read back the reasoning
and answer tokens, whichever token the chunks split at."""

from __future__ import annotations

import json

import pytest

from llmload.client.backends import get_backend
from llmload.sim.requests import GenRequest
from llmload.sim.text import text_of
from llmload.sim.typed_wire import make_wire

WIRES = {"responses": "openai-responses", "messages": "anthropic-messages"}


def request(kind: str, output: int, reasoning: int, stream: bool = True) -> GenRequest:
    return GenRequest(kind=kind, stream=stream, model="m", prompt_tokens=11, max_tokens=output, output_tokens=output,
                      include_usage=True, text_offset=3, ignore_eos=True, reasoning_tokens=reasoning)


def render(kind: str, output: int, reasoning: int, chunk: int) -> bytes:
    """The stream as the server sends it: head, then ``chunk`` tokens at a time, first events ahead of the first."""
    req = request(kind, output, reasoning)
    wire = make_wire(req, "vllm", "r1", 0)
    out, done = wire.head_events(), 0
    while done < output:
        n = min(chunk, output - done)
        event = wire.token_event(text_of(req.text_offset, done, n), done + n, done + n >= output, n)
        out += (wire.first_events() + event) if done == 0 else event
        done += n
    return out + wire.tail_events()


def payloads(raw: bytes) -> list[dict]:
    return [json.loads(block.split(b"data: ", 1)[1]) for block in raw.split(b"\n\n") if b"data: " in block]


CASES = [(output, reasoning, chunk) for output, reasoning in ((6, 0), (6, 2), (6, 6), (1, 1), (5, 4))
         for chunk in (1, 3)]


@pytest.mark.parametrize(("output", "reasoning", "chunk"), CASES)
def test_responses_stream_numbers_every_event_by_its_position(output: int, reasoning: int, chunk: int) -> None:
    events = payloads(render("responses", output, reasoning, chunk))
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    kinds = [e["type"] for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    final = events[-1]["response"]
    assert final["usage"]["output_tokens_details"]["reasoning_tokens"] == reasoning
    items = [i["type"] for i in final["output"]]
    assert items == (["reasoning"] if reasoning else []) + (["message"] if output > reasoning else [])
    thought = "".join(e["delta"] for e in events if e["type"] == "response.reasoning_text.delta")
    answer = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert thought + answer == text_of(3, 0, output).decode()
    assert thought == text_of(3, 0, reasoning).decode()
    # each delta names the item that was added for it, and every added item is done before the end
    added = {e["item"]["id"]: e["output_index"] for e in events if e["type"] == "response.output_item.added"}
    for e in events:
        if e["type"].endswith(".delta"):
            assert added[e["item_id"]] == e["output_index"]
    assert sorted(e["item"]["id"] for e in events if e["type"] == "response.output_item.done") == sorted(added)


@pytest.mark.parametrize(("output", "reasoning", "chunk"), CASES)
def test_messages_stream_thinks_in_block_zero(output: int, reasoning: int, chunk: int) -> None:
    events = payloads(render("messages", output, reasoning, chunk))
    starts = [e["content_block"]["type"] for e in events if e["type"] == "content_block_start"]
    assert starts == (["thinking"] if reasoning else []) + (["text"] if output > reasoning or not reasoning else [])
    stops = [e["index"] for e in events if e["type"] == "content_block_stop"]
    assert stops == list(range(len(starts)))
    deltas = [e for e in events if e["type"] == "content_block_delta"]
    thought = "".join(e["delta"]["thinking"] for e in deltas if e["delta"]["type"] == "thinking_delta")
    answer = "".join(e["delta"]["text"] for e in deltas if e["delta"]["type"] == "text_delta")
    assert thought == text_of(3, 0, reasoning).decode() and thought + answer == text_of(3, 0, output).decode()
    assert all(e["index"] == (1 if reasoning else 0) for e in deltas if e["delta"]["type"] == "text_delta")
    assert [e["delta"]["type"] for e in deltas].count("signature_delta") == (1 if reasoning else 0)


@pytest.mark.parametrize("kind", sorted(WIRES))
@pytest.mark.parametrize(("output", "reasoning", "chunk"), CASES)
def test_our_parsers_read_the_reasoning_back(kind: str, output: int, reasoning: int, chunk: int) -> None:
    backend = get_backend(WIRES[kind])
    state = backend.new_state()
    events = [backend.parse_event(json.dumps(p).encode(), state) for p in payloads(render(kind, output, reasoning,
                                                                                          chunk))]
    counted = [e for e in events if e.content]
    assert "".join(e.reasoning for e in counted) == text_of(3, 0, reasoning).decode()
    assert "".join(e.text for e in counted) == text_of(3, 0, output).decode()[len(text_of(3, 0, reasoning)):]
    assert [e.completion_tokens for e in events if e.completion_tokens is not None][-1] == output


@pytest.mark.parametrize("kind", sorted(WIRES))
def test_unstreamed_answers_split_reasoning_from_the_answer(kind: str) -> None:
    req = request(kind, 6, 2, stream=False)
    body = json.loads(make_wire(req, "vllm", "r1", 0).full_json(text_of(3, 0, 6)))
    text, completion, prompt = get_backend(WIRES[kind]).parse_response(json.dumps(body).encode())
    assert text == text_of(3, 2, 4).decode() and completion == 6 and prompt is not None
    parts = body["output"] if kind == "responses" else body["content"]
    assert [p["type"] for p in parts] == (["reasoning", "message"] if kind == "responses" else ["thinking", "text"])
