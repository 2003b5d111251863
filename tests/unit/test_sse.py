"""Stream lines become event payloads the way every engine sends them, and junk never raises."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmload.client.sse import DONE, parse_line


@pytest.mark.parametrize(
    ("line", "payload"),
    [
        (b'data: {"a":1}\n', b'{"a":1}'),
        (b'data: {"a":1}\r\n', b'{"a":1}'),
        (b'data:{"token":{"text":"x"}}\n', b'{"token":{"text":"x"}}'),  # TGI: no space
        (b"data: [DONE]\n", DONE),
        (b"data: [DONE]", DONE),  # last line without a newline (EOF)
        (b'{"text_output":"x"}\n', b'{"text_output":"x"}'),  # NDJSON line
        (b"data:  two spaces\n", b" two spaces"),  # SSE strips exactly one space
    ],
)
def test_payloads(line: bytes, payload: bytes) -> None:
    assert parse_line(line) == payload


@pytest.mark.parametrize(
    "line",
    [
        b"",
        b"\n",
        b"\r\n",
        b": ping\n",
        b":\n",
        b"event: message\n",
        b"id: 7\n",
        b"retry: 1000\n",
        b"data:\n",
        b"data: \r\n",
    ],
)
def test_no_event(line: bytes) -> None:
    assert parse_line(line) is None


def test_random_bytes_never_raise() -> None:
    rng = random.Random(1234)
    prefixes = [b"", b"data:", b"data: ", b"{", b":"]
    for _ in range(5000):
        line = rng.choice(prefixes) + rng.randbytes(rng.randrange(0, 40))
        out = parse_line(line)
        assert out is None or isinstance(out, bytes)


FUZZ = settings(max_examples=200, deadline=None)
#: what a payload can be: no newline (the transport splits there), no CR at the end (part of a CRLF line end)
payloads = st.binary(min_size=1, max_size=60).filter(lambda p: b"\n" not in p and not p.endswith(b"\r"))
line_ends = st.sampled_from([b"", b"\n", b"\r\n", b"\r"])


@FUZZ
@given(st.binary(max_size=200))
def test_hypothesis_never_raises(line: bytes) -> None:
    out = parse_line(line)
    assert out is None or (isinstance(out, bytes) and out)
    if out is not None:
        assert not out.endswith((b"\r", b"\n"))


@FUZZ
@given(st.sampled_from([b"data: ", b"data:"]), payloads, line_ends)
def test_data_payload_round_trips(field: bytes, payload: bytes, end: bytes) -> None:
    expected = payload[1:] if field == b"data:" and payload[:1] == b" " else payload
    assert parse_line(field + payload + end) == (expected or None)


@FUZZ
@given(payloads, line_ends)
def test_ndjson_line_is_its_own_payload(payload: bytes, end: bytes) -> None:
    assert parse_line(b"{" + payload + end) == b"{" + payload


@FUZZ
@given(st.sampled_from([b":", b": ", b"event:", b"id: ", b"retry: ", b"Data: ", b" data: ", b"[", b"x"]),
       st.binary(max_size=60), line_ends)
def test_other_lines_carry_no_event(prefix: bytes, rest: bytes, end: bytes) -> None:
    assert parse_line(prefix + rest + end) is None
