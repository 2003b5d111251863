"""Stream lines become event payloads the way every engine sends them, and junk never raises."""

from __future__ import annotations

import random

import pytest

from llmload.sse import DONE, parse_line


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


try:
    from hypothesis import given
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover - hypothesis is optional
    pass
else:

    @given(st.binary(max_size=200))
    def test_hypothesis_never_raises(line: bytes) -> None:
        out = parse_line(line)
        assert out is None or (isinstance(out, bytes) and out)
