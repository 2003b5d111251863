"""The compiled reader reads an OpenAI stream event exactly as orjson and the dialect do, or leaves it to them.

``pick_events`` of the compiled reader scans OpenAI chunks itself (llmload/client/transport/_cread.c) and hands
anything it is not certain of to the dialect's ``parse_event``. Here random events, well-formed and odd (every
field of the wrong type, error objects, duplicate keys, escapes, non-ASCII, big and float counts, junk and cut
payloads), go through both readers' ``pick_events``; each field must be equal, with its type.
"""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmload.client.backends import get_backend
from llmload.client.transport import readers

pytestmark = pytest.mark.needs("compiled-reader")

FUZZ = settings(max_examples=100, deadline=None)

odd = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=False, allow_infinity=False),
                st.text(max_size=3), st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=2),
                                                                                           st.integers(), max_size=2))
text = st.one_of(st.text(max_size=8), st.sampled_from(["", " hi", "é", "日本", "😀", "a\nb", "\\", '"', "\x00", "\u2028"]))
count = st.one_of(st.integers(0, 10**6), st.integers(10**17, 10**20), st.sampled_from([5.0, 5.5, True, None, "5"]),
                  odd)


def maybe(key: str, value: st.SearchStrategy, p_odd: float = 0.15) -> st.SearchStrategy:
    """``{key: value}``, ``{key: <odd>}`` or ``{}``."""
    return st.one_of(st.fixed_dictionaries({key: value}), st.just({}),
                     st.fixed_dictionaries({key: odd}) if p_odd else st.just({}))


def merged(*parts: st.SearchStrategy) -> st.SearchStrategy:
    return st.tuples(*parts).map(lambda ds: {k: v for d in ds for k, v in d.items()})


tool_calls = st.one_of(st.lists(st.fixed_dictionaries({"index": st.integers(0, 2)}), max_size=2), odd)
delta = merged(maybe("content", st.one_of(text, st.none())), maybe("reasoning_content", text),
               maybe("reasoning", text), maybe("tool_calls", tool_calls), maybe("role", st.just("assistant")))
choice = merged(st.one_of(st.fixed_dictionaries({"delta": st.one_of(delta, st.none())}), st.just({}),
                          st.fixed_dictionaries({"delta": odd})),
                maybe("text", text), maybe("finish_reason", st.one_of(st.none(), st.sampled_from(["stop", "length"]))),
                maybe("index", st.integers(0, 3)))
usage = merged(maybe("completion_tokens", count), maybe("prompt_tokens", count),
               maybe("prompt_tokens_details", merged(maybe("cached_tokens", count))))
event = merged(maybe("id", st.just("cmpl-1")), maybe("object", st.sampled_from(["text_completion", "error",
                                                                                 "chat.completion.chunk"])),
               maybe("choices", st.one_of(st.lists(choice, max_size=2), st.lists(odd, max_size=2))),
               maybe("usage", st.one_of(usage, st.none())), maybe("error", st.one_of(st.none(), text, odd), 0.0))


@st.composite
def payloads(draw: st.DrawFn) -> bytes:
    """An event as a server might write it: compact or spaced, escaped or raw UTF-8, sometimes damaged."""
    data = draw(event)
    indent = draw(st.sampled_from([None, None, 1]))
    separators = draw(st.sampled_from([(",", ":"), (", ", ": ")]))
    raw = json.dumps(data, ensure_ascii=draw(st.booleans()), indent=indent, separators=separators).encode()
    how = draw(st.sampled_from(["as is"] * 6 + ["cut", "junk", "duplicate", "escaped key", "spaces", "bad utf-8"]))
    rng = random.Random(draw(st.integers(0, 2**16)))
    if how == "cut" and len(raw) > 2:
        raw = raw[: rng.randrange(1, len(raw))]
    elif how == "junk":
        at = rng.randrange(len(raw) + 1)
        raw = raw[:at] + rng.choice([b"x", b",", b"}", b"\\", b'"', b"\x01", b"]"]) + raw[at:]
    elif how == "duplicate" and raw.startswith(b"{") and len(raw) > 2:
        raw = b'{"usage":{"completion_tokens":3},' + raw[1:] if raw != b"{}" else b'{"choices":[],"choices":[]}'
    elif how == "escaped key":
        raw = raw.replace(b'"choices"', b'"cho\\u0069ces"')
    elif how == "spaces":
        raw = b" \t" + raw + b" \r"
    elif how == "bad utf-8":
        raw = raw.replace(b'"', b'"\xff', 1)
    return raw


def picked(reader: readers.Reader, payload: bytes) -> list:
    backend = get_backend("openai-chat")
    events = reader.pick_events([(0.0, b"data: " + payload)], 0, 1, backend.parse_event, None, backend.openai_wire)
    return [None if ev is None else [(type(x).__name__, x) for x in ev] for ev in events]


@pytest.fixture(scope="module")
def twins() -> tuple[readers.Reader, readers.Reader]:
    if readers.COMPILED not in readers.available():
        pytest.skip("the compiled reader is not built here (no C compiler when llmload was installed)")
    return readers.named(readers.COMPILED), readers.named(readers.PYTHON)


@FUZZ
@given(payloads())
def test_the_compiled_scanner_reads_every_event_as_the_dialect_does(twins, payload: bytes) -> None:
    compiled, python = twins
    assert picked(compiled, payload) == picked(python, payload), payload


@pytest.mark.parametrize("payload", [
    b'{"choices":[{"delta":{"content":"\\ud83d\\ude00"}}]}',  # a surrogate pair: left to orjson
    b'{"choices":[{"delta":{"content":"\\ud83d"}}]}',  # a lone surrogate: malformed
    b'{"choices":[{"text":"a"}],"choices":[{"text":"b"}]}',  # orjson keeps the last
    b'{"usage":{"completion_tokens":5.0,"prompt_tokens":3}}',  # 5.0 counts as 5
    b'{"usage":{"completion_tokens":123456789012345678901}}',  # a float to orjson
    b'{"choices":[{"delta":{"tool_calls":0}}]}',  # a number's truth
    b'{"choices":[{"delta":{"tool_calls":[{"index":0}]}}]}',  # a tool call is content
    b'{"object":"error","message":"overloaded"}', b'{"error":{"message":"x"}}', b'{"error":null,"choices":[]}',
    b'{"choices":"abc"}', b'{"choices":{}}', b'{"choices":[1]}', b'[1,2]', b'{"a":1} x', b'{"a":1e400}',
    b'{"choices":[{"delta":{"content":"caf\xc3\xa9 \\n \\t \\/ \\u00e9"},"finish_reason":"st\\u006fp"}]}',
])
def test_known_corners_read_the_same(twins, payload: bytes) -> None:
    compiled, python = twins
    assert picked(compiled, payload) == picked(python, payload)


def test_the_scanner_reads_the_common_chunk_itself(twins) -> None:
    """The point of the scanner: a plain chunk never goes back to Python (its parse_event is not called)."""
    compiled, _python = twins
    calls: list[bytes] = []

    def parse_event(payload: bytes, state: object) -> object:
        calls.append(payload)
        return None

    lines = [(0.0, b'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}'),
             (1.0, b'data: {"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":2,'
                   b'"prompt_tokens_details":{"cached_tokens":1}}}'), (2.0, b"data: [DONE]")]
    events = compiled.pick_events(lines, 0, 3, parse_event, None, True)
    assert not calls
    assert events[0] == ("hi", True, True, None, None, None, None, None, "", None)
    assert events[1] == ("", False, False, None, 2, 4, None, None, "", 1)
    assert events[2] is None
