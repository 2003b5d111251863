"""ResponseParser undoes HTTP/1.1 framing exactly, whatever the read boundaries, and stamps each line with
the time of the read that completed it; junk from the server fails as TransportError, never as a hang or a crash.

Every test drives the real parser with ``feed(data, t)``; read ``i`` gets ``t = i``, so a line's expected
timestamp follows from which read holds its final newline.
"""

from __future__ import annotations

import sys
from bisect import bisect_right
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from llmload.client.sse import parse_line
from llmload.client.transport import Response, ResponseParser, TransportError, pyread

#: a few seconds for the whole file; never a timing deadline (shared CI machines are noisy)
#: 120 per reader (the reader fixture only sets LLMLOAD_READER: the same for every example)
FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
#: for the regression tests of bugs fuzzing found: the same examples every run, so they cannot pass by chance, and
#: no shrinking (a failure is a known bug coming back; shrinking it would cost most of the file's run time)
KNOWN_BUG = settings(FUZZ, derandomize=True, database=None, phases=[Phase.explicit, Phase.generate])

CHUNKED = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
CLOSE = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"


def length_head(n: int) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % n


def chunk(data: bytes, ext: bytes = b"") -> bytes:
    return b"%x%s\r\n%s\r\n" % (len(data), ext, data)


LAST = b"0\r\n\r\n"


def feed(parser: ResponseParser, *pieces: bytes) -> list[bool]:
    """Feed piece ``i`` at time ``i``; what each feed returned."""
    return [parser.feed(p, float(i)) for i, p in enumerate(pieces)]


class Hang(AssertionError):
    pass


@contextmanager
def bounded(calls: int = 200_000) -> Iterator[None]:
    """Fail (instead of hanging the test run) when the block makes more than ``calls`` function calls.

    Counted with a profile hook, not a clock: feeding a few KiB takes a few thousand calls, an endless
    loop reaches the limit in milliseconds, and a busy machine changes neither.
    """
    count = 0

    def profile(frame: object, event: str, arg: object) -> None:
        nonlocal count
        count += 1
        if count > calls:
            raise Hang(f"no return after {calls} function calls: an endless loop")

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield
    finally:
        sys.setprofile(previous)


#: every case on both readers (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("reader")


# --- examples ------------------------------------------------------------------------------------


def test_content_length_body() -> None:
    body = b'{"text": "hi"}\n{"text": "there"}'
    p = ResponseParser()
    assert feed(p, length_head(len(body)) + body) == [True]
    resp = p.resp
    assert resp.status == 200
    assert resp.headers["content-type"] == "application/json"
    assert resp.headers["content-length"] == str(len(body))
    assert resp.body == body
    assert resp.lines == [(0.0, b'{"text": "hi"}'), (0.0, b'{"text": "there"}')]
    assert p.done and resp.reusable and p.leftover == b""


def test_content_length_across_reads_lines_at_the_last_read() -> None:
    body = b"line one\nline two\n"
    p = ResponseParser()
    # a non-streamed body: its lines appear once it is complete, with the time of the read that completed it
    assert feed(p, length_head(len(body))[:10], length_head(len(body))[10:] + body[:5], body[5:12], body[12:]) == [
        False, False, False, True]
    assert p.resp.header_time == 1.0
    assert p.resp.lines == [(3.0, b"line one"), (3.0, b"line two")]
    assert p.resp.body == body


def test_content_length_zero() -> None:
    p = ResponseParser()
    assert feed(p, length_head(0)) == [True]
    assert p.resp.body == b"" and p.resp.lines == [] and p.resp.reusable


def test_chunked_without_trailers() -> None:
    p = ResponseParser()
    done = feed(p, CHUNKED + chunk(b'data: {"a":1}\n\n'), chunk(b'data: {"a":2}\n\n'), chunk(b"data: [DONE]\n\n") + LAST)
    assert done == [False, False, True]
    assert p.resp.lines == [(0.0, b'data: {"a":1}'), (1.0, b'data: {"a":2}'), (2.0, b"data: [DONE]")]
    assert p.resp.body == b""  # a 200 event stream is held once: as its lines
    assert p.resp.reusable and p.leftover == b""


def test_chunked_with_trailers() -> None:
    p = ResponseParser()
    wire = CHUNKED + chunk(b"data: x\n\n") + b"0\r\nX-Checksum: abc\r\nX-Other: 1\r\n\r\n"
    assert feed(p, wire) == [True]
    assert p.resp.lines == [(0.0, b"data: x")]
    assert p.leftover == b""


def test_chunked_trailers_across_reads() -> None:
    p = ResponseParser()
    wire = CHUNKED + chunk(b"data: x\n\n") + b"0\r\nX-Checksum: abc\r\n\r\n"
    for i in range(len(CHUNKED) + 1, len(wire)):
        p = ResponseParser()
        assert feed(p, wire[:i], wire[i:]) == [False, True], i
        assert [line for _, line in p.resp.lines] == [b"data: x"]


def test_chunk_size_extensions_and_hex_case() -> None:
    data = b"x" * 26 + b"\n"
    wire = CHUNKED + b"1B;name=value\r\n" + data + b"\r\n" + b'1b;a="b c";d\r\n' + data + b"\r\n" + b"0;end\r\n\r\n"
    p = ResponseParser()
    assert feed(p, wire) == [True]
    assert p.resp.body == b""
    assert [line for _, line in p.resp.lines] == [b"x" * 26] * 2


@pytest.mark.parametrize("head", [
    b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
])
def test_the_raw_body_is_kept_where_something_reads_it(head: bytes) -> None:
    """An error status, a JSON answer, an answer of no stated type: the reader reads the body as a whole."""
    p = ResponseParser()
    assert feed(p, head + chunk(b'{"error": "x"}\n') + chunk(b'{"more": 1}\n'), LAST) == [False, True]
    assert p.resp.body == b'{"error": "x"}\n{"more": 1}\n'
    assert [line for _, line in p.resp.lines] == [b'{"error": "x"}', b'{"more": 1}']


def test_line_split_across_chunks_and_reads() -> None:
    p = ResponseParser()
    done = feed(p, CHUNKED + chunk(b'data: {"te'), chunk(b'xt":"a"}'), chunk(b"\n\ndata: b\n") + LAST)
    assert done == [False, False, True]
    assert p.resp.lines == [(2.0, b'data: {"text":"a"}'), (2.0, b"data: b")]


def test_chunked_last_line_without_newline() -> None:
    p = ResponseParser()
    assert feed(p, CHUNKED + chunk(b"data: a\n") + chunk(b"data: b"), LAST) == [False, True]
    assert p.resp.lines == [(0.0, b"data: a"), (1.0, b"data: b")]


def test_body_until_close() -> None:
    p = ResponseParser()
    assert feed(p, CLOSE + b"data: a\n\nda", b"ta: b\n\n", b"data: c") == [False, False, False]
    assert p.resp.lines == [(0.0, b"data: a"), (1.0, b"data: b")]
    assert not p.done
    p.eof(3.0)
    assert p.done and not p.resp.reusable
    assert p.resp.lines[-1] == (3.0, b"data: c")  # the last line, unterminated, ends at the close
    assert p.resp.body == b""


def test_http10_without_length_reads_until_close() -> None:
    p = ResponseParser()
    assert feed(p, b"HTTP/1.0 200 OK\r\n\r\n{\"a\": 1}\n") == [False]
    p.eof(1.0)
    assert p.resp.lines == [(0.0, b'{"a": 1}')] and not p.resp.reusable


@pytest.mark.parametrize(
    ("wire", "message"),
    [
        (b"", "connection closed before the response"),
        (b"HTTP/1.1 200 OK\r\nContent-", "connection closed before the response headers"),
        (CHUNKED + chunk(b"data: a\n") + b"10\r\ndata: b\n", "connection closed mid-stream after"),
        (CHUNKED + chunk(b"data: a\n"), "connection closed mid-stream after"),
        (CHUNKED + chunk(b"data: a\n") + b"0\r\nX-Trailer: 1\r\n", "connection closed mid-stream after"),
        (length_head(20) + b"data: a\nda", "connection closed mid-stream after"),
    ],
)
def test_eof_mid_response_raises(wire: bytes, message: str) -> None:
    p = ResponseParser()
    if wire:
        assert feed(p, wire) == [False]
    with pytest.raises(TransportError, match=message) as exc:
        p.eof(1.0)
    assert exc.value.response is p.resp
    assert not p.done


def test_eof_mid_stream_keeps_what_arrived() -> None:
    p = ResponseParser()
    feed(p, CHUNKED + chunk(b"data: a\n\ndata: b\n\nda"), b"5\r\nta: c\r\n")
    with pytest.raises(TransportError, match="after 3 lines") as exc:
        p.eof(2.0)
    # the unterminated line is kept too, stamped with the close
    assert exc.value.response.lines == [(0.0, b"data: a"), (0.0, b"data: b"), (2.0, b"data: c")]


@pytest.mark.parametrize(
    "status_line",
    [b"garbage", b"HTTP/1.1", b"HTTP/1.1 abc OK", b"HTTP/1.1  200 OK", b"", b"\x00\xff \xfe"],
)
def test_malformed_status_line(status_line: bytes) -> None:
    p = ResponseParser()
    with pytest.raises(TransportError, match="malformed status line"):
        feed(p, status_line + b"\r\nContent-Length: 0\r\n\r\n")


def test_status_line_without_reason_phrase() -> None:
    p = ResponseParser()
    assert feed(p, b"HTTP/1.1 503\r\nContent-Length: 0\r\n\r\n") == [True]
    assert p.resp.status == 503


@pytest.mark.parametrize("size_line", [b"zz", b"", b"5 5", b"\xff", b"0x", b";ext"])
def test_malformed_chunk_size_line(size_line: bytes) -> None:
    p = ResponseParser()
    with pytest.raises(TransportError, match="malformed chunk size line"):
        feed(p, CHUNKED + chunk(b"data: a\n") + size_line + b"\r\nxxxxx\r\n")


def test_malformed_chunk_size_after_good_chunks_keeps_their_lines() -> None:
    p = ResponseParser()
    feed(p, CHUNKED + chunk(b"data: a\n"))
    with pytest.raises(TransportError, match="malformed chunk size line") as exc:
        feed(p, b"", b"nope\r\n")
    assert exc.value.response.lines == [(0.0, b"data: a")]


def test_bad_content_length() -> None:
    p = ResponseParser()
    with pytest.raises(TransportError, match="bad Content-Length"):
        feed(p, b"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n")


def test_headers_over_1_mib_raise() -> None:
    p = ResponseParser()
    piece = b"X-Filler: " + b"a" * 65_000 + b"\r\n"
    p.feed(b"HTTP/1.1 200 OK\r\n", 0.0)
    with pytest.raises(TransportError, match="larger than 1 MiB"):
        for i in range(1, 40):
            p.feed(piece, float(i))
    assert 17 + i * len(piece) > 1 << 20 >= 17 + (i - 1) * len(piece)


def test_headers_just_under_1_mib_are_fine() -> None:
    p = ResponseParser()
    filler = b"X-Filler: " + b"a" * ((1 << 20) - 200) + b"\r\n"
    assert feed(p, b"HTTP/1.1 200 OK\r\n", filler, b"Content-Length: 2\r\n\r\nok") == [False, False, True]
    assert p.resp.body == b"ok"


@pytest.mark.parametrize(
    "first",
    [
        length_head(9) + b"data: a\n\n",
        CHUNKED + chunk(b"data: a\n\n") + LAST,
        CHUNKED + chunk(b"data: a\n\n") + b"0\r\nX-T: 1\r\n\r\n",
    ],
)
def test_leftover_after_response_is_the_next_one(first: bytes) -> None:
    second = CHUNKED + chunk(b"data: b\n\n") + LAST
    p = ResponseParser()
    assert feed(p, first + second[:7]) == [True]
    assert p.resp.reusable and p.leftover == second[:7]
    assert [line for _, line in p.resp.lines] == [b"data: a"]
    q = ResponseParser()
    assert feed(q, p.leftover, second[7:]) == [False, True]
    assert [line for _, line in q.resp.lines] == [b"data: b"]
    assert q.leftover == b""


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nconnection: Close\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n",
    ],
)
def test_not_reusable(head: bytes) -> None:
    p = ResponseParser()
    assert feed(p, head) == [True]
    assert not p.resp.reusable


def test_header_names_case_insensitive_values_stripped() -> None:
    p = ResponseParser()
    feed(p, b"HTTP/1.1 429 Too Many Requests\r\nRETRY-AFTER:   3 \r\ncontent-LENGTH: 0\r\n\r\n")
    assert p.resp.status == 429 and p.resp.headers["retry-after"] == "3" and p.done


def test_header_time_is_the_read_that_completed_the_head() -> None:
    p = ResponseParser()
    feed(p, CHUNKED[:-3], CHUNKED[-3:-1], CHUNKED[-1:] + chunk(b"data: a\n"))
    assert p.resp.header_time == 2.0


def test_crlf_and_lf_lines_give_the_same_events() -> None:
    lf = b'data: {"a":1}\n\ndata: {"a":2}\n\n: ping\n\ndata: [DONE]\n\n'
    crlf = lf.replace(b"\n", b"\r\n")
    out = []
    for body in (lf, crlf):
        p = ResponseParser()
        feed(p, CHUNKED + chunk(body) + LAST)
        assert len(p.resp.lines) == 4
        assert [line.rstrip(b"\r") for _, line in p.resp.lines] == [b'data: {"a":1}', b'data: {"a":2}', b": ping",
                                                                    b"data: [DONE]"]
        out.append([parse_line(line) for _, line in p.resp.lines])
    assert out[0] == out[1] == [b'{"a":1}', b'{"a":2}', None, b"[DONE]"]


def test_crlf_split_between_cr_and_lf() -> None:
    p = ResponseParser()
    feed(p, CHUNKED + chunk(b"data: a\r"), chunk(b"\n\r"), chunk(b"\n") + LAST)
    assert [(t, line.rstrip(b"\r")) for t, line in p.resp.lines] == [(1.0, b"data: a")]


def test_empty_lines_skipped() -> None:
    p = ResponseParser()
    feed(p, CHUNKED + chunk(b"\n\n\r\n\n\r\n") + chunk(b"data: a\n\n\n\r\n") + LAST)
    assert [line for _, line in p.resp.lines] == [b"data: a"]


def test_on_lines_sees_each_new_line_once() -> None:
    seen: list[tuple[int, list[tuple[float, bytes]]]] = []

    def on_lines(resp: Response, first: int) -> None:
        seen.append((first, resp.lines[first:]))

    p = ResponseParser(on_lines)
    feed(p, CHUNKED + chunk(b"data: a\n\nda"), chunk(b"ta: b\n\ndata: c\n\n"), b"", chunk(b": ping\n") + LAST)
    assert seen == [(0, [(0.0, b"data: a")]), (1, [(1.0, b"data: b"), (1.0, b"data: c")]), (3, [(3.0, b": ping")])]


# --- bugs found by fuzzing, fixed: each of these failed before the fix ---------------------------------


def test_negative_chunk_size_raises_instead_of_hanging() -> None:
    p = ResponseParser()
    with bounded(), pytest.raises(TransportError, match="malformed chunk size line"):
        feed(p, CHUNKED + b"-6\r\nxxxxxxxx\r\n")


def test_negative_chunk_size_is_not_accepted() -> None:
    p = ResponseParser()
    # today: -1 moves the position to 1 byte past the size line; "X" is skipped and "hello" taken as the body
    with bounded(), pytest.raises(TransportError, match="malformed chunk size line"):
        feed(p, CHUNKED + b"-1\r\nX5\r\nhello\r\n0\r\n\r\n")


def test_negative_content_length_raises() -> None:
    p = ResponseParser()
    with pytest.raises(TransportError, match="bad Content-Length"):
        feed(p, b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\ndata: a\n")


def test_line_stamped_by_the_read_holding_its_newline() -> None:
    p = ResponseParser()
    feed(p, CHUNKED + b"a\r\ndata: xyz\n", b"\r\n")
    assert p.resp.lines == [(0.0, b"data: xyz")]


# --- properties: a valid response split anywhere --------------------------------------------------


@dataclass
class Wire:
    """A response as sent, and where each body byte lies in it."""

    data: bytes
    body: bytes
    mode: str  # chunked | length | close
    #: offset just past the response (what follows is the next response on the connection)
    end: int
    #: wire offset of each body byte
    at: list[int] = field(repr=False)
    #: wire offset of the last byte of the framing that closes each body byte's chunk (its CRLF)
    chunk_end: list[int] = field(repr=False)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # hypothesis' report: the bytes, not the maps
        printer.text(repr(self))


SSE_LINES = [
    b'data: {"choices":[{"text":" hi","finish_reason":null}]}\n',
    b'data: {"choices":[{"delta":{"content":"x"}}]}\r\n',
    b'data:{"token":{"text":"y"}}\n',
    b'{"text_output":"z"}\n',
    b"data: [DONE]\n",
    b": ping\r\n",
    b"event: message\n",
    b"\n",
    b"\r\n",
    b"\r",
    b"data: ",
]
bodies = st.lists(st.sampled_from(SSE_LINES) | st.binary(max_size=12), max_size=30).map(b"".join)
next_response = st.sampled_from([b"", b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", CHUNKED]) | st.binary(max_size=8)


@st.composite
def framed(draw: st.DrawFn, body: bytes) -> Wire:
    mode = draw(st.sampled_from(["chunked", "length", "close"]))
    if mode == "close":
        head = draw(st.sampled_from([CLOSE, b"HTTP/1.0 200 OK\r\n\r\n", b"HTTP/1.1 200 OK\r\nX-A: b\r\n\r\n"]))
        at = list(range(len(head), len(head) + len(body)))
        data = head + body
        return Wire(data, body, mode, len(data), at, at)
    if mode == "length":
        head = length_head(len(body))
        at = list(range(len(head), len(head) + len(body)))
        data = head + body
        return Wire(data + draw(next_response), body, mode, len(data), at, at)
    cuts = sorted(draw(st.sets(st.integers(1, len(body) - 1), max_size=12))) if len(body) > 1 else []
    data = bytearray(CHUNKED)
    at: list[int] = []
    chunk_end: list[int] = []
    for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True):
        if a == b:
            continue
        size = b"%x" % (b - a)
        if draw(st.booleans()):
            size = size.upper()
        data += size + draw(st.sampled_from([b"", b";x=1", b';name="v w"'])) + b"\r\n"
        at.extend(range(len(data), len(data) + b - a))
        data += body[a:b] + b"\r\n"
        chunk_end.extend([len(data) - 1] * (b - a))
    data += b"0" + draw(st.sampled_from([b"", b";last"])) + b"\r\n"
    data += draw(st.sampled_from([b"", b"X-Checksum: 1\r\n", b"A: b\r\nC: d\r\n"])) + b"\r\n"
    end = len(data)
    return Wire(bytes(data) + draw(next_response), body, mode, end, at, chunk_end)


@st.composite
def split_wires(draw: st.DrawFn, body_strategy: st.SearchStrategy[bytes] = bodies) -> tuple[Wire, list[int]]:
    wire = draw(framed(draw(body_strategy)))
    cuts = sorted(draw(st.sets(st.integers(1, len(wire.data) - 1), max_size=25)))
    return wire, cuts


def model_lines(body: bytes) -> list[tuple[int | None, bytes]]:
    """The lines of ``body`` as the parser should give them: (offset of the closing newline, line); an
    unterminated last line has offset None. Empty and lone-CR lines carry nothing and are skipped."""
    out: list[tuple[int | None, bytes]] = []
    start = 0
    for i, byte in enumerate(body):
        if byte == 10:
            if body[start:i] not in (b"", b"\r"):
                out.append((i, body[start:i]))
            start = i + 1
    if body[start:] not in (b"", b"\r"):
        out.append((None, body[start:]))
    return out


@dataclass
class Run:
    parser: ResponseParser
    pieces: list[bytes]
    #: index of the feed (or the eof, = len(pieces)) that completed the response
    done_at: int
    batches: list[tuple[int, list[tuple[float, bytes]]]]


def run(wire: Wire, cuts: list[int]) -> Run:
    pieces = [wire.data[a:b] for a, b in zip([0, *cuts], [*cuts, len(wire.data)], strict=True)]
    batches: list[tuple[int, list[tuple[float, bytes]]]] = []
    parser = ResponseParser(lambda resp, first: batches.append((first, resp.lines[first:])))
    done_at = -1
    with bounded():
        for i, piece in enumerate(pieces):
            if parser.feed(piece, float(i)):
                done_at = i
                break
        else:
            assert wire.mode == "close", "a complete response did not finish"
            parser.eof(float(len(pieces)))
            done_at = len(pieces)
    assert parser.done
    return Run(parser, pieces, done_at, batches)


def expected_times(wire: Wire, cuts: list[int], done_at: int, offsets: list[int]) -> list[float]:
    """Read index holding each line's closing newline (through ``offsets``), or of the read that completed
    the response for an unterminated last line and for a Content-Length body (delivered whole)."""
    out = []
    for e, _line in model_lines(wire.body):
        if e is None or wire.mode == "length":
            out.append(float(done_at))
        else:
            out.append(float(bisect_right(cuts, offsets[e])))
    return out


def check_same_as_one_read(wire: Wire, cuts: list[int]) -> Run:
    whole, split = run(wire, []), run(wire, cuts)
    lines = [line for _, line in model_lines(wire.body)]
    assert [line for _, line in whole.parser.resp.lines] == lines
    assert [line for _, line in split.parser.resp.lines] == lines
    for r in (whole, split):
        resp = r.parser.resp
        assert resp.status == 200 and resp.body == (b"" if b"event-stream" in wire.data[: wire.data.index(b"\r\n\r\n")] else wire.body)
        assert resp.reusable == (wire.mode != "close")
        # what follows the response is handed back for the next one
        assert r.parser.leftover + b"".join(r.pieces[r.done_at + 1 :]) == wire.data[wire.end :]
        # live listeners see every line once, in order, each batch at the time of its read
        assert [line for _, batch in r.batches for line in batch] == resp.lines
        assert [first for first, _ in r.batches] == [sum(len(b) for _, b in r.batches[:k]) for k in range(len(r.batches))]
        for _, batch in r.batches:
            assert len({t for t, _ in batch}) == 1
    assert split.parser.resp.header_time == bisect_right(cuts, wire.data.index(b"\r\n\r\n") + 3)
    assert split.done_at == (len(split.pieces) if wire.mode == "close" else bisect_right(cuts, wire.end - 1))
    return split


@FUZZ
@given(split_wires())
def test_any_split_gives_the_same_lines_as_one_read(case: tuple[Wire, list[int]]) -> None:
    wire, cuts = case
    split = check_same_as_one_read(wire, cuts)
    times = [t for t, _ in split.parser.resp.lines]
    assert times == sorted(times)
    # never earlier than the read that brought the newline, never later than the one that closed its chunk
    earliest = expected_times(wire, cuts, split.done_at, wire.at)
    latest = expected_times(wire, cuts, split.done_at, wire.chunk_end)
    assert all(lo <= t <= hi for lo, t, hi in zip(earliest, times, latest, strict=True)), (earliest, times, latest)
    if wire.mode != "chunked":
        assert times == earliest


@KNOWN_BUG
@given(split_wires())
def test_each_line_stamped_by_the_read_that_completed_it(case: tuple[Wire, list[int]]) -> None:
    wire, cuts = case
    split = run(wire, cuts)
    assert [t for t, _ in split.parser.resp.lines] == expected_times(wire, cuts, split.done_at, wire.at)


payloads = st.binary(min_size=1, max_size=20).filter(lambda p: b"\n" not in p and not p.endswith(b"\r"))


@st.composite
def sse_streams(draw: st.DrawFn) -> tuple[bytes, list[bytes]]:
    """An SSE / NDJSON stream with comments, other fields and both line ends; and its event payloads."""
    out = bytearray()
    events = []
    for _ in range(draw(st.integers(0, 12))):
        eol = draw(st.sampled_from([b"\n", b"\r\n"]))
        kind = draw(st.sampled_from(["data", "data-tgi", "ndjson", "comment", "field"]))
        if kind == "comment":
            out += b":" + draw(payloads) + eol
            continue
        if kind == "field":
            out += draw(st.sampled_from([b"event: message", b"id: 7", b"retry: 100"])) + eol
            continue
        payload = draw(payloads)
        if kind == "ndjson":
            payload = b"{" + payload
            out += payload + eol
        else:
            out += (b"data: " if kind == "data" else b"data:") + payload + eol
            if kind == "data-tgi" and payload.startswith(b" "):
                payload = payload[1:]  # one space after the colon belongs to the framing
        if payload:
            events.append(payload)
        out += draw(st.sampled_from([b"", eol]))
    return bytes(out), events


@FUZZ
@given(st.data())
def test_sse_events_survive_any_framing_and_split(data: st.DataObject) -> None:
    stream, events = data.draw(sse_streams())
    wire, cuts = data.draw(split_wires(st.just(stream)))
    split = check_same_as_one_read(wire, cuts)
    got = [parse_line(line) for _, line in split.parser.resp.lines]
    assert [p for p in got if p is not None] == events


# --- properties: junk never hangs and fails only as TransportError -------------------------------------


def feed_junk(pieces: list[bytes]) -> None:
    """Feed like the reactor does: stop at completion or the first error; eof if the stream ran out."""
    p = ResponseParser(lambda resp, first: None)
    try:
        with bounded():
            for i, piece in enumerate(pieces):
                if p.feed(piece, float(i)):
                    assert p.done
                    return
            p.eof(float(len(pieces)))
            assert p.done
    except TransportError as exc:
        assert exc.response is p.resp


heads = st.sampled_from([b"", CHUNKED, CLOSE, length_head(5), length_head(1000), b"HTTP/1.1 200 OK\r\n"])


def pieces_of(data_strategy: st.SearchStrategy[bytes]) -> st.SearchStrategy[list[bytes]]:
    return st.tuples(heads, data_strategy, st.sets(st.integers(1, 3000), max_size=20)).map(
        lambda c: [(c[0] + c[1])[a:b] for a, b in zip([0, *sorted(c[2])], [*sorted(c[2]), 1 << 30], strict=True)
                   if (c[0] + c[1])[a:b]])


@FUZZ
@given(pieces_of(st.binary(max_size=2000)))
def test_random_bytes_fail_only_as_http_error(pieces: list[bytes]) -> None:
    feed_junk(pieces)


TOKENS = [b"\r\n", b"\n", b"\r", b"\r\n\r\n", b" ", b";x=y", b"0", b"0\r\n\r\n", b"5\r\nhello\r\n", b"data: x\n",
          b"HTTP/1.1 200 OK\r\n", b"Transfer-Encoding: chunked\r\n", b"Content-Length: 7\r\n", b"Content-Length: x\r\n",
          b"Connection: close\r\n", b"X-T: 1\r\n", b"\xff"]


def framing_junk(sizes: st.SearchStrategy[int]) -> st.SearchStrategy[bytes]:
    token = st.sampled_from(TOKENS) | st.binary(max_size=6) | sizes.map(lambda n: b"%x" % n)
    return st.lists(token, max_size=60).map(b"".join)


@FUZZ
@given(pieces_of(framing_junk(st.integers(0, 4096))))
def test_framing_junk_fails_only_as_http_error(pieces: list[bytes]) -> None:
    feed_junk(pieces)


@st.composite
def signed_chunks(draw: st.DrawFn) -> bytes:
    """Well-formed chunks, except that some sizes are negative."""
    out = bytearray(CHUNKED)
    for _ in range(draw(st.integers(1, 8))):
        n = draw(st.integers(-16, 16))
        out += b"%x" % n + draw(st.sampled_from([b"", b";x=y"])) + b"\r\n"
        out += (b"d" * n if n >= 0 else draw(st.binary(max_size=12))) + b"\r\n"
    return bytes(out + draw(st.sampled_from([b"", LAST])))


@KNOWN_BUG
@given(signed_chunks(), st.sets(st.integers(1, 400), max_size=10))
def test_chunks_with_signed_sizes_never_hang(data: bytes, cuts: set[int]) -> None:
    edges = [0, *sorted(cuts), len(data)]
    feed_junk([data[a:b] for a, b in pairwise(edges) if data[a:b]])


def test_headers_over_1_mib_in_one_read_are_refused_too() -> None:
    """The limit holds whether the blank line ending the head arrives in the same read or a later one."""
    head = b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * (1 << 20) + b"\r\nContent-Length: 0\r\n\r\n"
    with pytest.raises(TransportError, match="larger than 1 MiB") as info:
        ResponseParser().feed(head, 0.0)
    assert info.value.kind == "malformed_http"


# --- the fast path (whole chunks of whole lines in one split) gives exactly what the general decoder gives --


class GeneralDecoder(pyread.Decoder):
    """The Python decoder without its fast path: every read through the general chunk decoder."""

    __slots__ = ()

    def _whole_chunks(self, raw: bytes, t: float) -> bool:
        return False


def outcome(pieces: list[bytes], fast: bool) -> tuple:
    """Everything a parser hands on, fed ``pieces`` like the reactor does (stop at completion or the first
    error, eof when the data ran out): lines with their times, body, status, leftover, where it ended, what live
    listeners saw, and the error's type and message."""
    batches: list[tuple[int, list[tuple[float, bytes]]]] = []
    p = ResponseParser(lambda resp, first: batches.append((first, resp.lines[first:])),
                       decoder=pyread.Decoder() if fast else GeneralDecoder())
    ended: object = None
    try:
        with bounded():
            for i, piece in enumerate(pieces):
                if p.feed(piece, float(i)):
                    ended = i
                    break
            else:
                p.eof(float(len(pieces)))
                ended = "eof"
    except TransportError as exc:
        ended = (type(exc).__name__, str(exc))
    resp = p.resp
    return resp.lines, resp.body, resp.status, resp.reusable, p.leftover, ended, batches


EVENTS = st.sampled_from([
    b'data: {"choices":[{"text":" hi","finish_reason":null}]}\n\n',
    b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n',
    b"data: [DONE]\n\n", b": ping\n\n", b"data: a\r\n\r\n", b"data: b\n", b"data: c",
]) | st.binary(max_size=10)


@st.composite
def event_streams(draw: st.DrawFn) -> list[bytes]:
    """A stream as servers send it, one event per chunk (sometimes two, sometimes a chunk of junk), cut into
    reads mostly at chunk ends (where the fast path applies) and sometimes anywhere."""
    chunks = [b"%x\r\n%s\r\n" % (len(e), e) for e in draw(st.lists(EVENTS, max_size=20)) if e]
    wire = bytearray(draw(st.sampled_from([CHUNKED, CLOSE, length_head(40)])))
    cuts = [len(wire)] if draw(st.booleans()) else []
    for c in chunks:
        wire += c
        if draw(st.integers(0, 3)):
            cuts.append(len(wire))
    wire += draw(st.sampled_from([LAST, b"0\r\nX: y\r\n\r\n", b"", b"5\r\nab"]))
    wire += draw(next_response)
    cuts += draw(st.sets(st.integers(1, max(1, len(wire) - 1)), max_size=4))
    cuts = sorted({c for c in cuts if 0 < c < len(wire)})
    return [bytes(wire[a:b]) for a, b in zip([0, *cuts], [*cuts, len(wire)], strict=True)]


@FUZZ
@given(event_streams())
def test_fast_path_gives_what_the_general_decoder_gives(pieces: list[bytes]) -> None:
    assert outcome(pieces, fast=True) == outcome(pieces, fast=False)


@FUZZ
@given(split_wires())
def test_fast_path_gives_what_the_general_decoder_gives_for_any_framing(case: tuple[Wire, list[int]]) -> None:
    wire, cuts = case
    pieces = [wire.data[a:b] for a, b in zip([0, *cuts], [*cuts, len(wire.data)], strict=True)]
    assert outcome(pieces, fast=True) == outcome(pieces, fast=False)


@FUZZ
@given(pieces_of(framing_junk(st.integers(0, 4096))))
def test_fast_path_fails_as_the_general_decoder_does(pieces: list[bytes]) -> None:
    assert outcome(pieces, fast=True) == outcome(pieces, fast=False)


def test_the_fast_path_takes_a_read_of_whole_event_chunks() -> None:
    """The common read (whole chunks, one event each) is the fast path's: it takes it, and the same read with a
    chunk cut short, an extension or CRLF lines is left to the general decoder untouched."""
    events = [b'data: {"a":%d}\n\n' % i for i in range(3)]
    read = b"".join(chunk(e) for e in events)
    p = ResponseParser(decoder=pyread.Decoder())
    feed(p, CHUNKED)
    assert p.decoder._whole_chunks(read, 1.0)
    assert p.resp.lines == [(1.0, b'data: {"a":%d}' % i) for i in range(3)]
    for other in (read[:-3], chunk(events[0], b";x=1"), chunk(b"data: a\r\n\r\n"), read + LAST):
        q = ResponseParser(decoder=pyread.Decoder())
        feed(q, CHUNKED)
        assert not q.decoder._whole_chunks(other, 1.0) and q.resp.lines == []
