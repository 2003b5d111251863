"""A minimal HTTP/1.1 client for streaming responses, on (gevent-patched) sockets.

Why not geventhttpclient's ``readline``: every line costs a Python-level parse loop inside the client, and
a batching server delivers a burst of events at once, so per-event client work delays every later
timestamp in the burst (DESIGN §8). Here each ``recv`` is timestamped the moment it returns, the chunked
framing is undone with a few slice operations, and complete SSE lines are handed over with the timestamp
of the read that completed them. Everything else (JSON, token counts) happens after the stream.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable
from time import perf_counter
from urllib.parse import urlsplit

from llmload.errors import ConfigError

RECV_SIZE = 262144


class HTTPError(Exception):
    """The connection broke or the server spoke something we cannot parse.

    ``response`` holds what arrived before the failure (status, headers, timestamped lines), if anything.
    """

    def __init__(self, message: str, response: Response | None = None) -> None:
        super().__init__(message)
        self.response = response


class Connection:
    __slots__ = ("buf", "deadline", "sock", "timed_out", "timeout")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        #: bytes received past the end of the previous response
        self.buf = b""
        #: when the watchdog gives up on this connection if no data arrives (0: idle)
        self.deadline = 0.0
        self.timed_out = False
        self.timeout = 600.0

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class Response:
    """Status, headers, and the body as (timestamp, line) pairs or raw bytes."""

    __slots__ = ("body", "header_time", "headers", "lines", "reusable", "status")

    def __init__(self) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self.header_time = 0.0
        #: (perf_counter of the read that completed the line, line without the trailing newline)
        self.lines: list[tuple[float, bytes]] = []
        self.body = b""
        self.reusable = False


class Pool:
    """Keep-alive connections to one origin; LIFO so a warm connection is reused first."""

    def __init__(self, base_url: str, *, connect_timeout: float = 30.0, read_timeout: float = 600.0) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"not an http(s) URL: {base_url!r}")
        self.tls = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.tls else 80)
        self.prefix = parts.path.rstrip("/")
        self.host_header = parts.netloc.rsplit("@", 1)[-1]
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._idle: list[Connection] = []
        self._busy: set[Connection] = set()
        self._watchdog: object | None = None
        self._ssl = ssl.create_default_context() if self.tls else None

    def _watch(self) -> None:
        """Close connections that received nothing for ``read_timeout`` (one check a second for all of
        them: a per-recv socket timeout costs a timer per read, on the hot path)."""
        import gevent

        while self._busy:
            gevent.sleep(min(1.0, self.read_timeout / 4))
            now = perf_counter()
            for conn in list(self._busy):
                if conn.deadline and now > conn.deadline:
                    conn.timed_out = True
                    try:
                        conn.sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
        self._watchdog = None

    def _connect(self) -> Connection:
        sock = socket.create_connection((self.host, self.port), timeout=self.connect_timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._ssl is not None:
            sock = self._ssl.wrap_socket(sock, server_hostname=self.host)
        sock.settimeout(None)
        conn = Connection(sock)
        conn.timeout = self.read_timeout
        return conn

    def close(self) -> None:
        while self._idle:
            self._idle.pop().close()

    def request(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes,
        on_lines: Callable[[Response, int], None] | None = None,
    ) -> Response:
        """Send one request; read the whole response. ``on_lines(response, first_new_index)`` is called after
        each read that completed lines (live listeners); otherwise lines are only collected."""
        head = [f"{method} {self.prefix}{path} HTTP/1.1", f"Host: {self.host_header}", f"Content-Length: {len(body)}"]
        head.extend(f"{k}: {v}" for k, v in headers.items())
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        reused = bool(self._idle)
        conn = self._idle.pop() if reused else self._connect()
        self._busy.add(conn)
        if self._watchdog is None:
            import gevent

            self._watchdog = gevent.spawn(self._watch)
        try:
            try:
                conn.sock.sendall(data)
                resp = _read_response(conn, on_lines)
            except (HTTPError, OSError) as exc:
                if not reused or not _is_stale(exc):
                    raise
                # the server closed an idle keep-alive connection: retry once on a fresh one
                conn.close()
                self._busy.discard(conn)
                conn = self._connect()
                self._busy.add(conn)
                conn.sock.sendall(data)
                resp = _read_response(conn, on_lines)
        except BaseException as exc:
            conn.close()
            self._busy.discard(conn)
            if conn.timed_out and isinstance(exc, HTTPError):
                raise HTTPError(f"timed out: no data for {self.read_timeout:g} s ({exc})", exc.response) from None
            raise
        self._busy.discard(conn)
        conn.deadline = 0.0
        if resp.reusable:
            self._idle.append(conn)
        else:
            conn.close()
        return resp


def _is_stale(exc: BaseException) -> bool:
    return isinstance(exc, (ConnectionResetError, BrokenPipeError)) or (
        isinstance(exc, HTTPError) and "before the response" in str(exc)
    )


def _read_response(conn: Connection, on_lines: Callable[[Response, int], None] | None) -> Response:
    sock = conn.sock
    buf = conn.buf
    conn.buf = b""
    conn.deadline = perf_counter() + conn.timeout
    while True:
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            break
        data = sock.recv(RECV_SIZE)
        conn.deadline = perf_counter() + conn.timeout
        if not data:
            raise HTTPError("connection closed before the response headers" if buf else
                            "connection closed before the response")
        buf += data
        if len(buf) > 1 << 20:
            raise HTTPError("response headers larger than 1 MiB")
    resp = Response()
    resp.header_time = perf_counter()
    lines = buf[:end].decode("latin-1").split("\r\n")
    try:
        version, status = lines[0].split(" ", 2)[:2]
        resp.status = int(status)
    except ValueError:
        raise HTTPError(f"malformed status line: {lines[0][:80]!r}") from None
    for line in lines[1:]:
        name, _, value = line.partition(":")
        resp.headers[name.strip().lower()] = value.strip()
    rest = buf[end + 4 :]
    try:
        _read_body(conn, rest, resp, version, on_lines)
    except HTTPError as exc:
        exc.response = resp
        raise
    except OSError as exc:
        what = "timed out waiting for data" if isinstance(exc, TimeoutError) else f"{type(exc).__name__}: {exc}"
        raise HTTPError(f"{what} after {len(resp.lines)} lines", resp) from exc
    return resp


def _read_body(
    conn: Connection, rest: bytes, resp: Response, version: str, on_lines: Callable[[Response, int], None] | None
) -> None:
    sock = conn.sock
    keep_alive = resp.headers.get("connection", "").lower() != "close" and version == "HTTP/1.1"
    if "chunked" in resp.headers.get("transfer-encoding", "").lower():
        conn.buf = _read_chunked(conn, rest, resp, on_lines, resp.header_time)
        resp.reusable = keep_alive
    elif "content-length" in resp.headers:
        length = int(resp.headers["content-length"])
        body = rest
        while len(body) < length:
            data = sock.recv(RECV_SIZE)
            conn.deadline = perf_counter() + conn.timeout
            if not data:
                raise HTTPError(f"connection closed after {len(body)} of {length} body bytes")
            body += data
        conn.buf = body[length:]
        resp.body = body[:length]
        _split_lines(resp, resp.body + b"\n", perf_counter(), b"", on_lines)
        resp.reusable = keep_alive
    else:
        pending = _split_lines(resp, rest, resp.header_time, b"", on_lines) if rest else b""
        parts = [rest]
        while True:
            data = sock.recv(RECV_SIZE)
            t = perf_counter()
            conn.deadline = t + conn.timeout
            if not data:
                break
            parts.append(data)
            pending = _split_lines(resp, data, t, pending, on_lines)
        if pending:
            _split_lines(resp, b"\n", perf_counter(), pending, on_lines)
        resp.body = b"".join(parts)


def _split_lines(
    resp: Response, data: bytes, t: float, pending: bytes, on_lines: Callable[[Response, int], None] | None
) -> bytes:
    """Append the complete lines in ``pending + data`` with time ``t``; return the incomplete tail."""
    if pending:
        data = pending + data
    lines = resp.lines
    first = len(lines)
    start = 0
    find = data.find
    while True:
        i = find(b"\n", start)
        if i < 0:
            break
        if i > start + 1 or (i > start and data[start] != 13):
            lines.append((t, data[start:i]))
        start = i + 1
    if on_lines is not None and len(lines) > first:
        on_lines(resp, first)
    return data[start:]


def _read_chunked(
    conn: Connection, raw: bytes, resp: Response, on_lines: Callable[[Response, int], None] | None, t: float
) -> bytes:
    """Undo chunked framing as bytes arrive; returns bytes that follow the message."""
    recv = conn.sock.recv
    timeout = conn.timeout
    pending = b""
    body: list[bytes] = []
    pos = 0
    while True:
        # decode every complete chunk in raw[pos:]
        decoded: list[bytes] = []
        while True:
            i = raw.find(b"\r\n", pos)
            if i < 0:
                break
            try:
                size = int(raw[pos:i].split(b";", 1)[0], 16)
            except ValueError:
                raise HTTPError(f"malformed chunk size line: {raw[pos:i][:40]!r}") from None
            if size == 0:
                # last chunk, then optional trailers and an empty line
                j = raw.find(b"\r\n", i + 2) if raw[i + 2 : i + 4] != b"\r\n" else i + 2
                if j < 0:
                    break
                if decoded:
                    chunk = b"".join(decoded)
                    body.append(chunk)
                    pending = _split_lines(resp, chunk, t, pending, on_lines)
                if pending:
                    _split_lines(resp, b"\n", t, pending, on_lines)
                resp.body = b"".join(body)
                return raw[j + 2 :]
            if len(raw) < i + 2 + size + 2:
                break
            decoded.append(raw[i + 2 : i + 2 + size])
            pos = i + 2 + size + 2
        if decoded:
            chunk = b"".join(decoded)
            body.append(chunk)
            pending = _split_lines(resp, chunk, t, pending, on_lines)
        raw = raw[pos:]
        pos = 0
        data = recv(RECV_SIZE)
        t = perf_counter()
        conn.deadline = t + timeout
        if not data:
            if pending:
                _split_lines(resp, b"\n", t, pending, on_lines)
            resp.body = b"".join(body)
            raise HTTPError(f"connection closed mid-stream after {len(resp.lines)} lines")
        raw += data
