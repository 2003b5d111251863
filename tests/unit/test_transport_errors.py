"""Each way a request can fail on the wire raises its own TransportError type, and the type alone gives its kind.

Real sockets on 127.0.0.1: a small server thread per test plays the misbehaving server. No timing is asserted;
the timeouts are short only so the file runs fast.
"""

from __future__ import annotations

import socket
import threading

import pytest
from wire_server import CHUNKED_HEAD, EVENT, PATIENCE_S, chunk, ok, read_request, reset

from llmload.client import failures
from llmload.client.transport import (
    ClosedBeforeResponse,
    ClosedMidStream,
    ConnectError,
    ConnectTimeout,
    ListenerError,
    Pool,
    ProtocolError,
    Reactor,
    ReadTimeout,
    RequestTimeout,
    TransportError,
)

#: every case on both readers, the compiled one and its Python twin (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("reader")

def fail(url: str, *, reactor: Reactor | None = None, on_lines=None, **timeouts: float) -> TransportError:
    """The error one POST to ``url`` raises (it must raise a TransportError, and nothing else)."""
    pool = Pool(url, connect_timeout=timeouts.pop("connect_timeout", 5.0),
                read_timeout=timeouts.pop("read_timeout", 5.0), request_timeout=timeouts.pop("request_timeout", None),
                reactor=reactor)
    try:
        with pytest.raises(TransportError) as info:
            pool.request("POST", "/v1/completions", {"Content-Type": "application/json"}, b"{}", on_lines)
    finally:
        pool.close()
    exc = info.value
    assert isinstance(exc, TransportError)
    assert "\n" not in str(exc) and str(exc)
    return exc


def assert_kind(exc: TransportError, cls: type[TransportError], kind: str) -> None:
    assert isinstance(exc, cls), f"{type(exc).__name__}: {exc}"
    assert exc.kind == kind
    assert exc.kind in failures.TRANSPORT_KINDS


# -- connecting ---------------------------------------------------------------------------------------------


def test_a_closed_port_is_a_connect_error() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exc = fail(f"http://127.0.0.1:{port}")
    assert_kind(exc, ConnectError, "connect")
    assert not isinstance(exc, ConnectTimeout)
    assert isinstance(exc.__cause__, ConnectionRefusedError)
    assert exc.response is None
    assert f"127.0.0.1:{port}" in str(exc)


def test_a_full_accept_queue_is_a_connect_timeout() -> None:
    """A listener that never accepts, its queue full: Linux drops further SYNs, so connect cannot finish."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        fillers = []
        try:
            for _ in range(4):
                s = socket.socket()
                s.setblocking(False)
                s.connect_ex(("127.0.0.1", port))
                fillers.append(s)
            probe = socket.socket()
            probe.settimeout(0.5)
            try:
                probe.connect(("127.0.0.1", port))
            except TimeoutError:
                pass
            else:
                pytest.skip("this kernel accepts connections past a full listen queue")
            finally:
                probe.close()
            exc = fail(f"http://127.0.0.1:{port}", connect_timeout=0.5)
        finally:
            for s in fillers:
                s.close()
    assert_kind(exc, ConnectTimeout, "connect")
    assert isinstance(exc, ConnectError)
    assert isinstance(exc.__cause__, TimeoutError)
    assert "timed out" in str(exc)


# -- closed before the response head ------------------------------------------------------------------------


def closes_after_request(conn: socket.socket, stop: threading.Event) -> None:
    read_request(conn)


def sends_half_a_head_then_closes(conn: socket.socket, stop: threading.Event) -> None:
    read_request(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Ty")


def resets_after_request(conn: socket.socket, stop: threading.Event) -> None:
    read_request(conn)
    reset(conn)


def test_closed_before_the_response(serve) -> None:
    exc = fail(serve(closes_after_request).url)
    assert_kind(exc, ClosedBeforeResponse, "disconnect")
    assert str(exc) == "connection closed before the response"
    assert exc.response is not None and exc.response.status == 0


def test_closed_inside_the_response_head(serve) -> None:
    exc = fail(serve(sends_half_a_head_then_closes).url)
    assert_kind(exc, ClosedBeforeResponse, "disconnect")
    assert "before the response headers" in str(exc)


def test_reset_before_the_response(serve) -> None:
    exc = fail(serve(resets_after_request).url)
    assert_kind(exc, ClosedBeforeResponse, "disconnect")
    assert isinstance(exc.__cause__, ConnectionResetError)  # the socket error is kept as the cause
    assert "ConnectionResetError" in str(exc)


# -- closed mid-stream ----------------------------------------------------------------------------------------


def closes_mid_body(conn: socket.socket, stop: threading.Event) -> None:
    read_request(conn)
    conn.sendall(CHUNKED_HEAD + chunk(EVENT))


def resets_mid_body(conn: socket.socket, stop: threading.Event) -> None:
    read_request(conn)
    conn.sendall(CHUNKED_HEAD + chunk(EVENT))
    stop.wait(0.2)  # the client reads the head first (only an ordering aid: the kernel keeps it queued anyway)
    reset(conn)


def closes_inside_a_content_length_body(conn: socket.socket, stop: threading.Event) -> None:
    read_request(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"partial\":")


def test_closed_mid_stream_keeps_what_arrived(serve) -> None:
    exc = fail(serve(closes_mid_body).url)
    assert_kind(exc, ClosedMidStream, "disconnect")
    assert str(exc) == "connection closed mid-stream after 1 lines"
    assert exc.response is not None and exc.response.status == 200
    assert [line for _, line in exc.response.lines] == [b"data: x"]


def test_reset_mid_stream(serve) -> None:
    exc = fail(serve(resets_mid_body).url)
    assert_kind(exc, ClosedMidStream, "disconnect")
    assert isinstance(exc.__cause__, ConnectionResetError)
    assert exc.response is not None and exc.response.status == 200


def test_closed_inside_a_content_length_body(serve) -> None:
    exc = fail(serve(closes_inside_a_content_length_body).url)
    assert_kind(exc, ClosedMidStream, "disconnect")


# -- malformed HTTP -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("wire", "message"), [
    (b"HTTX/1.1 OK\r\nContent-Length: 0\r\n\r\n", "malformed status line"),
    (b"garbage\r\n\r\n", "malformed status line"),
    (CHUNKED_HEAD + b"zz\r\nxx\r\n", "malformed chunk size line"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n", "bad Content-Length"),
    (b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * (1 << 20) + b"\r\n\r\n", "larger than 1 MiB"),
], ids=["status-line", "garbage", "chunk-size", "content-length", "oversized-head"])
def test_malformed_http_is_a_protocol_error(serve, wire: bytes, message: str) -> None:
    def garbage(conn: socket.socket, stop: threading.Event) -> None:
        read_request(conn)
        conn.sendall(wire)

    exc = fail(serve(garbage).url)
    assert_kind(exc, ProtocolError, "malformed_http")
    assert message in str(exc)


# -- timeouts -------------------------------------------------------------------------------------------------


def silent(conn: socket.socket, stop: threading.Event) -> None:
    read_request(conn)
    stop.wait(PATIENCE_S)


def silent_after_head(conn: socket.socket, stop: threading.Event) -> None:
    read_request(conn)
    conn.sendall(CHUNKED_HEAD + chunk(EVENT))
    stop.wait(PATIENCE_S)


def trickles(conn: socket.socket, stop: threading.Event) -> None:
    """Keep the stream alive with an event every 0.1 s: never a read timeout, only the request's limit."""
    read_request(conn)
    conn.sendall(CHUNKED_HEAD)
    while not stop.wait(0.1):
        conn.sendall(chunk(EVENT))


@pytest.mark.parametrize("epoll", [True, False], ids=["reactor", "direct-read"])
def test_a_silent_server_is_a_read_timeout(serve, epoll: bool) -> None:
    exc = fail(serve(silent).url, read_timeout=0.5, reactor=Reactor(epoll=epoll))
    assert_kind(exc, ReadTimeout, "read_timeout")
    assert str(exc) == "timed out: no data for 0.5 s after 0 lines"


@pytest.mark.parametrize("epoll", [True, False], ids=["reactor", "direct-read"])
def test_a_stall_mid_stream_is_a_read_timeout(serve, epoll: bool) -> None:
    exc = fail(serve(silent_after_head).url, read_timeout=0.5, reactor=Reactor(epoll=epoll))
    assert_kind(exc, ReadTimeout, "read_timeout")
    assert exc.response is not None and exc.response.status == 200 and len(exc.response.lines) == 1


@pytest.mark.parametrize("epoll", [True, False], ids=["reactor", "direct-read"])
def test_a_trickling_server_is_a_request_timeout(serve, epoll: bool) -> None:
    exc = fail(serve(trickles).url, read_timeout=5.0, request_timeout=1.0, reactor=Reactor(epoll=epoll))
    assert_kind(exc, RequestTimeout, "request_timeout")
    assert "took longer than its limit" in str(exc)
    assert exc.response is not None and exc.response.lines, "the events before the limit are kept"


# -- the reactor's listener and the keep-alive retry ---------------------------------------------------------


def test_a_raising_listener_is_a_listener_error(serve) -> None:
    def streams(conn: socket.socket, stop: threading.Event) -> None:
        read_request(conn)
        conn.sendall(CHUNKED_HEAD + chunk(EVENT) + b"0\r\n\r\n")

    def listener(resp, first: int) -> None:
        raise KeyError("oops")

    exc = fail(serve(streams).url, on_lines=listener)
    assert_kind(exc, ListenerError, "client_error")
    assert isinstance(exc.__cause__, KeyError)


def test_a_stale_keep_alive_connection_is_retried_once(serve) -> None:
    def answers_then_closes(conn: socket.socket, stop: threading.Event) -> None:
        read_request(conn)
        conn.sendall(ok())  # keep-alive (HTTP/1.1, no Connection: close), then closes the idle connection

    def answers(conn: socket.socket, stop: threading.Event) -> None:
        read_request(conn)
        conn.sendall(ok(b'{"second": true}'))

    server = serve(answers_then_closes, answers)
    pool = Pool(server.url, connect_timeout=5.0, read_timeout=5.0)
    try:
        first = pool.request("POST", "/", {}, b"{}")
        assert first.status == 200 and first.reusable
        # the server's FIN arrives while the connection idles; the next request finds it closed
        server.stop.wait(0.2)
        second = pool.request("POST", "/", {}, b"{}")
    finally:
        pool.close()
    assert second.body == b'{"second": true}'
    assert server.accepted == 2
