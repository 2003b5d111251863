"""A minimal HTTP/1.1 client for streaming responses, built for timestamp accuracy under load.

Why not geventhttpclient's ``readline``, or even one gevent ``recv`` per stream: each costs a hub switch and
Python work per event, and a batching server delivers a burst of events to every stream at once, so the
client's per-event work delays every later timestamp in the burst (DESIGN §8). Here one :class:`Reactor`
per process watches a single epoll set holding every stream's socket; when gevent's loop reports it ready,
a callback reads every ready socket, timestamps each read the moment it returns, and undoes the framing with a few slice
operations (:class:`ResponseParser`). Complete SSE lines carry the timestamp of the read that completed
them. JSON, token counts and everything else happen after the stream, in the request's own greenlet.

Without epoll (not Linux) each request reads its own socket with the same parser.
"""

from __future__ import annotations

import os
import re
import select
import socket
import ssl
import struct
import sys
import time
from collections.abc import Callable
from time import perf_counter
from typing import Any
from urllib.parse import urlsplit

from llmload.errors import ConfigError

#: below glibc's mmap threshold (128 KiB): a larger read buffer costs an mmap + munmap per read (~30 µs)
RECV_SIZE = 65536
_TIMESPEC = struct.Struct("qq")
#: Linux SO_TIMESTAMPNS / SCM_TIMESTAMPNS: the kernel stamps each received packet (CLOCK_REALTIME)
SO_TIMESTAMPNS = 35
_CMSG_SPACE = 64
#: longest stretch of greenlet work between two polls for arriving data
SWITCH_INTERVAL_S = 0.0005
#: the largest response head (status line and headers) accepted
MAX_HEAD = 1 << 20
#: how often the watchdog checks read and request timeouts
WATCH_INTERVAL_S = 0.25
OnLines = Callable[["Response", int], None] | None
#: a chunk size: hex digits only (no sign, no 0x, no underscores: int(_, 16) would take those), at most 2**64
_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")


#: what went wrong on the wire, as :attr:`HTTPError.kind` (llmload.failures maps these to failure kinds)
CONNECT = "connect"
READ_TIMEOUT = "read_timeout"
REQUEST_TIMEOUT = "request_timeout"
DISCONNECT = "disconnect"
MALFORMED_HTTP = "malformed_http"


class HTTPError(Exception):
    """The connection broke or the server spoke something we cannot parse.

    ``response`` holds what arrived before the failure (status, headers, timestamped lines), if anything;
    ``kind`` says what failed: :data:`CONNECT`, :data:`READ_TIMEOUT`, :data:`REQUEST_TIMEOUT`,
    :data:`DISCONNECT` or :data:`MALFORMED_HTTP`.
    """

    def __init__(self, message: str, response: Response | None = None, kind: str = DISCONNECT) -> None:
        super().__init__(message)
        self.response = response
        self.kind = kind


class Response:
    """Status, headers, and the body as (timestamp, line) pairs plus raw bytes."""

    __slots__ = ("body", "header_time", "headers", "lines", "reusable", "status")

    def __init__(self) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self.header_time = 0.0
        #: (perf_counter of the read that completed the line, line without the trailing newline)
        self.lines: list[tuple[float, bytes]] = []
        self.body = b""
        self.reusable = False


class ResponseParser:
    """Push parser for one response: :meth:`feed` bytes as they arrive, with the time they arrived."""

    __slots__ = ("_body", "_crlf", "_mode", "_pending", "_raw", "_remaining", "done", "keep_alive", "leftover",
                 "on_lines", "resp")

    def __init__(self, on_lines: OnLines = None) -> None:
        self.resp = Response()
        self.on_lines = on_lines
        self._mode = "head"
        self._raw = b""
        self._pending = b""
        self._body: list[bytes] = []
        self._remaining = 0
        #: chunked: the CRLF that closes a chunk's data is still to come
        self._crlf = False
        self.done = False
        self.keep_alive = False
        #: bytes received past the end of this response
        self.leftover = b""

    def feed(self, data: bytes, t: float) -> bool:
        """Take the next bytes; returns True once the response is complete."""
        raw = self._raw + data if self._raw else data
        self._raw = b""
        if self._mode == "head":
            end = raw.find(b"\r\n\r\n")
            if end > MAX_HEAD or (end < 0 and len(raw) > MAX_HEAD):
                raise HTTPError("response headers larger than 1 MiB", self.resp, MALFORMED_HTTP)
            if end < 0:
                self._raw = raw
                return False
            self._parse_head(raw[:end], t)
            raw = raw[end + 4 :]
        if self._mode == "chunked":
            return self._feed_chunked(raw, t)
        if self._mode == "length":
            take = raw[: self._remaining]
            self._body.append(take)
            self._remaining -= len(take)
            if self._remaining == 0:
                self.leftover = raw[len(take) :]
                body = b"".join(self._body)
                self.resp.body = body
                self._lines(body + b"\n", t)
                return self._finish()
            return False
        # until close
        if raw:
            self._body.append(raw)
            self._lines(raw, t)
        return False

    def eof(self, t: float) -> None:
        """The server closed the connection: fine for a body that runs to the close, else an error."""
        if self._mode == "close":
            if self._pending:
                self._lines(b"\n", t)
            self.resp.body = b"".join(self._body)
            self._finish()
            return
        if self._pending:
            self._lines(b"\n", t)
        self.resp.body = b"".join(self._body)
        if self._mode == "head":
            raise HTTPError("connection closed before the response" if not self._raw else
                            "connection closed before the response headers", self.resp)
        raise HTTPError(f"connection closed mid-stream after {len(self.resp.lines)} lines", self.resp)

    def _finish(self) -> bool:
        self.done = True
        self.resp.reusable = self.keep_alive
        return True

    def _parse_head(self, head: bytes, t: float) -> None:
        resp = self.resp
        resp.header_time = t
        lines = head.decode("latin-1").split("\r\n")
        try:
            version, status = lines[0].split(" ", 2)[:2]
            resp.status = int(status)
        except ValueError:
            raise HTTPError(f"malformed status line: {lines[0][:80]!r}", resp, MALFORMED_HTTP) from None
        for line in lines[1:]:
            name, _, value = line.partition(":")
            resp.headers[name.strip().lower()] = value.strip()
        self.keep_alive = resp.headers.get("connection", "").lower() != "close" and version == "HTTP/1.1"
        if "chunked" in resp.headers.get("transfer-encoding", "").lower():
            self._mode = "chunked"
        elif "content-length" in resp.headers:
            try:
                length = resp.headers["content-length"]
                if not (length.isascii() and length.isdigit()):
                    raise ValueError(length)
                self._remaining = int(length)
            except ValueError:
                raise HTTPError(f"bad Content-Length: {resp.headers['content-length']!r}", resp,
                                MALFORMED_HTTP) from None
            self._mode = "length"
        else:
            self._mode = "close"
            self.keep_alive = False

    def _lines(self, data: bytes, t: float) -> None:
        """Append the complete lines in ``pending + data`` with time ``t``; keep the incomplete tail."""
        if self._pending:
            data = self._pending + data
        lines = self.resp.lines
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
        self._pending = data[start:]
        if self.on_lines is not None and len(lines) > first:
            self.on_lines(self.resp, first)

    def _feed_chunked(self, raw: bytes, t: float) -> bool:
        """Decode chunk data as it arrives, so a line is stamped by the read that brought its newline."""
        pos = 0
        decoded: list[bytes] = []
        try:
            while True:
                if self._remaining:
                    # inside a chunk's data: take what has arrived
                    take = raw[pos : pos + self._remaining]
                    if take:
                        decoded.append(take)
                        pos += len(take)
                        self._remaining -= len(take)
                    if self._remaining:
                        break
                    self._crlf = True
                if self._crlf:
                    if len(raw) < pos + 2:
                        break
                    if raw[pos : pos + 2] != b"\r\n":
                        raise HTTPError(f"chunk not followed by CRLF: {raw[pos : pos + 2]!r}", self.resp,
                                        MALFORMED_HTTP)
                    pos += 2
                    self._crlf = False
                i = raw.find(b"\r\n", pos)
                if i < 0:
                    break
                size_field = raw[pos:i].split(b";", 1)[0].rstrip(b" \t")
                if not _HEX.fullmatch(size_field):
                    raise HTTPError(f"malformed chunk size line: {raw[pos:i][:40]!r}", self.resp, MALFORMED_HTTP)
                size = int(size_field, 16)
                if size == 0:
                    # the last chunk, then optional trailers and an empty line
                    j = i + 2 if raw[i + 2 : i + 4] == b"\r\n" else raw.find(b"\r\n\r\n", i + 2)
                    if j < 0:
                        break
                    if j != i + 2:
                        j += 2
                    if decoded:
                        self._decoded(b"".join(decoded), t)
                        decoded = []
                    if self._pending:
                        self._lines(b"\n", t)
                    self.resp.body = b"".join(self._body)
                    self.leftover = raw[j + 2 :]
                    return self._finish()
                self._remaining = size
                pos = i + 2
        finally:
            # what arrived before a framing error is kept too
            if decoded:
                self._decoded(b"".join(decoded), t)
        self._raw = raw[pos:]
        return False

    def _decoded(self, chunk: bytes, t: float) -> None:
        self._body.append(chunk)
        self._lines(chunk, t)


class Connection:
    __slots__ = ("buf", "deadline", "raw", "request_deadline", "sock", "stamped", "timed_out", "timeout")

    def __init__(self, sock: socket.socket, timeout: float) -> None:
        self.sock = sock
        #: the OS-level socket under gevent's wrapper (for recvmsg without a hub switch)
        self.raw = getattr(sock, "_sock", sock)
        #: the kernel timestamps arrivals on this socket (SO_TIMESTAMPNS)
        self.stamped = False
        #: bytes received past the end of the previous response
        self.buf = b""
        #: when the watchdog gives up on this connection if no data arrives (0: idle)
        self.deadline = 0.0
        #: when the whole request must be over (0: no limit); set per request by :class:`Pool`
        self.request_deadline = 0.0
        self.timed_out = False
        self.timeout = timeout

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class _Waiting:
    """A request the reactor reads for; the request's greenlet sleeps on ``result``."""

    __slots__ = ("conn", "parser", "result")

    def __init__(self, conn: Connection, parser: ResponseParser, result: Any) -> None:
        self.conn = conn
        self.parser = parser
        self.result = result


class Reactor:
    """Reads every stream socket of this process from a single epoll set, in a callback of gevent's loop."""

    def __init__(self) -> None:
        try:
            from gevent.monkey import get_original

            epoll = get_original("select", "epoll")
        except (ImportError, AttributeError):
            epoll = getattr(select, "epoll", None)
        if epoll is None:
            raise OSError("no epoll")
        import gevent

        # gevent runs queued greenlets for up to this long before it polls for I/O again; when a batch of
        # streams ends together, starting their successors can take longer than an inter-token gap
        gevent.setswitchinterval(min(gevent.getswitchinterval(), SWITCH_INTERVAL_S))
        self._gevent = gevent
        self.ep = epoll()
        self.waiting: dict[int, _Waiting] = {}
        # started once and never stopped (re-arming an io watcher after a stop can miss a wake-up); unref'd so
        # it does not keep an otherwise finished loop alive
        self._watcher = gevent.get_hub().loop.io(self.ep.fileno(), 1, ref=False)
        self._watchdog: Any = None
        #: CLOCK_REALTIME - perf_counter, to move kernel timestamps onto perf_counter's clock
        self.clock_offset = _clock_offset()
        #: histogram of read lag (our read - kernel arrival): index = 0.1 ms buckets, last = 1 s or more
        self.read_lag = [0] * 10_001

    def read(self, conn: Connection, parser: ResponseParser) -> None:
        """Block the calling greenlet until ``parser`` has a complete response from ``conn``."""
        from gevent.event import AsyncResult

        fd = conn.sock.fileno()
        result = AsyncResult()
        self.waiting[fd] = _Waiting(conn, parser, result)
        conn.deadline = perf_counter() + conn.timeout
        self.ep.register(fd, select.EPOLLIN | select.EPOLLRDHUP)
        if not self._watcher.active:
            self._watcher.start(self._on_ready)
        if self._watchdog is None:
            self._watchdog = self._gevent.spawn(self._watch)
        try:
            result.get()
        finally:
            self._detach(fd)

    def _on_ready(self) -> None:
        """Runs in the hub (no greenlet switch) whenever the epoll set has ready sockets: read them all.

        Everything here is non-blocking; live ``on_lines`` listeners run here too and must not block.
        """
        waiting = self.waiting
        read = os.read
        read_lag = self.read_lag
        offset = self.clock_offset
        for fd, _ev in self.ep.poll(0):
            w = waiting.get(fd)
            if w is None:
                continue
            try:
                if w.conn.stamped:
                    data, ancillary, _flags, _addr = w.conn.raw.recvmsg(RECV_SIZE, _CMSG_SPACE)
                else:
                    data, ancillary = read(fd, RECV_SIZE), None
            except BlockingIOError:
                continue
            except OSError as exc:
                self._fail(fd, w, HTTPError(
                    f"{type(exc).__name__}: {exc} after {len(w.parser.resp.lines)} lines", w.parser.resp, DISCONNECT))
                continue
            t = perf_counter()
            if ancillary:
                # the kernel's arrival time, which does not depend on how busy this process was
                sec, nsec = _TIMESPEC.unpack_from(ancillary[0][2])
                arrived = sec + nsec * 1e-9 - offset
                if t - 1.0 < arrived < t:
                    # how late this process read it: past one inter-token gap, chunks merge into one read
                    lag = int((t - arrived) * 10_000)
                    read_lag[lag if lag < 10_000 else 10_000] += 1
                    t = arrived
            w.conn.deadline = t + w.conn.timeout
            try:
                if not data:
                    w.parser.eof(t)
                    self._complete(fd, w)
                elif w.parser.feed(data, t):
                    self._complete(fd, w)
            except HTTPError as exc:
                self._fail(fd, w, exc)
            except Exception as exc:  # a live listener's bug fails its own request, never the reactor
                self._fail(fd, w, HTTPError(f"{type(exc).__name__} in a stream listener: {exc}", w.parser.resp,
                                            "client_error"))

    def _complete(self, fd: int, w: _Waiting) -> None:
        self._detach(fd)
        w.result.set(None)

    def _fail(self, fd: int, w: _Waiting, exc: BaseException) -> None:
        self._detach(fd)
        w.result.set_exception(exc)

    def _detach(self, fd: int) -> None:
        if self.waiting.pop(fd, None) is not None:
            try:
                self.ep.unregister(fd)
            except (OSError, ValueError):
                pass

    def _watch(self) -> None:
        """Fail requests that received nothing for their read timeout, or ran past their request timeout
        (checked every :data:`WATCH_INTERVAL_S` for all streams at once, so a limit may be exceeded by that much)."""
        try:
            while self.waiting:
                self._gevent.sleep(WATCH_INTERVAL_S)
                self.clock_offset = _clock_offset()
                now = perf_counter()
                for fd, w in list(self.waiting.items()):
                    conn = w.conn
                    if conn.request_deadline and now > conn.request_deadline:
                        conn.timed_out = True
                        self._fail(fd, w, request_timed_out(w.parser.resp))
                    elif conn.deadline and now > conn.deadline:
                        conn.timed_out = True
                        self._fail(fd, w, read_timed_out(conn.timeout, w.parser.resp))
        finally:
            self._watchdog = None


def read_timed_out(timeout: float, resp: Response) -> HTTPError:
    return HTTPError(f"timed out: no data for {timeout:g} s after {len(resp.lines)} lines", resp, READ_TIMEOUT)


def request_timed_out(resp: Response) -> HTTPError:
    return HTTPError(f"timed out: the request took longer than its limit, after {len(resp.lines)} lines", resp,
                     REQUEST_TIMEOUT)


def read_lag_percentile(p: float) -> float | None:
    """The p-th percentile of how late this process read arriving data, in ms (None: no timestamped reads)."""
    if _reactor is None:
        return None
    hist = _reactor.read_lag
    total = sum(hist)
    if not total:
        return None
    target, seen = p / 100.0 * total, 0
    for i, n in enumerate(hist):
        seen += n
        if seen >= target:
            return i / 10.0
    return 1000.0


def reset_read_lag() -> None:
    if _reactor is not None:
        _reactor.read_lag[:] = [0] * len(_reactor.read_lag)


def _clock_offset() -> float:
    """``time.time() - perf_counter()``, from the tightest of a few back-to-back readings."""
    best = None
    for _ in range(5):
        a = perf_counter()
        wall = time.time()
        b = perf_counter()
        if best is None or b - a < best[0]:
            best = (b - a, wall - (a + b) / 2)
    return best[1]


_reactor: Reactor | None = None
_no_reactor = False


def _get_reactor() -> Reactor | None:
    global _reactor, _no_reactor
    if _reactor is None and not _no_reactor:
        try:
            _reactor = Reactor()
        except OSError:
            _no_reactor = True
    return _reactor


class Pool:
    """Keep-alive connections to one origin; LIFO so a warm connection is reused first.

    ``connect_timeout`` bounds opening a connection, ``read_timeout`` a gap with no data, ``request_timeout``
    (None: none) the whole request from the moment its bytes go out. ``user:password@`` in ``base_url`` is sent
    as HTTP Basic authentication and never appears in a message.
    """

    def __init__(self, base_url: str, *, connect_timeout: float = 30.0, read_timeout: float = 600.0,
                 request_timeout: float | None = None) -> None:
        from llmload.urls import basic_auth, redact_url

        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"not an http(s) URL: {redact_url(base_url)!r}")
        self.tls = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.tls else 80)
        self.prefix = parts.path.rstrip("/")
        self.host_header = parts.netloc.rsplit("@", 1)[-1]
        #: ``Authorization`` value from credentials in the URL (used unless a request sets its own)
        self.authorization = basic_auth(base_url)
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.request_timeout = request_timeout
        self._idle: list[Connection] = []
        self._ssl = ssl.create_default_context() if self.tls else None

    def _connect(self) -> Connection:
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.connect_timeout)
        except TimeoutError:
            raise HTTPError(f"connect to {self.host}:{self.port} timed out after {self.connect_timeout:g} s",
                            None, CONNECT) from None
        except ConnectionRefusedError:
            raise HTTPError(f"connection refused by {self.host}:{self.port}", None, CONNECT) from None
        except OSError as exc:
            raise HTTPError(f"cannot connect to {self.host}:{self.port}: {exc.strerror or exc}", None,
                            CONNECT) from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        stamped = False
        if self._ssl is None:
            try:
                sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
                stamped = True
            except OSError:
                pass
        else:
            try:
                sock = self._ssl.wrap_socket(sock, server_hostname=self.host)
            except (OSError, ssl.SSLError) as exc:
                sock.close()
                raise HTTPError(f"TLS handshake with {self.host}:{self.port} failed: {exc}", None, CONNECT) from None
        sock.settimeout(None)
        conn = Connection(sock, self.read_timeout)
        conn.stamped = stamped and sys.platform.startswith("linux")
        return conn

    def close(self) -> None:
        while self._idle:
            self._idle.pop().close()

    def request(self, method: str, path: str, headers: dict[str, str], body: bytes, on_lines: OnLines = None,
                before_send: Callable[[], None] | None = None) -> Response:
        """Send one request and read the whole response. ``on_lines(response, first_new_index)`` is called after
        each read that completed lines (live listeners); otherwise lines are only collected.
        ``before_send()`` runs once a connection is in hand, immediately before the bytes go out (the ``st``
        of DESIGN §3: connection set-up is not part of TTFT)."""
        head = [f"{method} {self.prefix}{path} HTTP/1.1", f"Host: {self.host_header}", f"Content-Length: {len(body)}"]
        if self.authorization and "Authorization" not in headers:
            head.append(f"Authorization: {self.authorization}")
        head.extend(f"{k}: {v}" for k, v in headers.items())
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        reused = bool(self._idle)
        conn = self._idle.pop() if reused else self._connect()
        try:
            try:
                parser = self._exchange(conn, data, on_lines, before_send)
            except (HTTPError, OSError) as exc:
                if not reused or not _is_stale(exc):
                    raise
                # the server closed an idle keep-alive connection: retry once on a fresh one
                conn.close()
                conn = self._connect()
                parser = self._exchange(conn, data, on_lines, before_send)
        except BaseException as exc:
            conn.close()
            if isinstance(exc, OSError) and not isinstance(exc, HTTPError):
                if isinstance(exc, TimeoutError):
                    raise HTTPError("timed out sending the request", None, READ_TIMEOUT) from exc
                raise HTTPError(f"{type(exc).__name__}: {exc}", None, DISCONNECT) from exc
            raise
        conn.deadline = 0.0
        conn.request_deadline = 0.0
        conn.buf = parser.leftover
        if parser.resp.reusable:
            self._idle.append(conn)
        else:
            conn.close()
        return parser.resp

    def _exchange(self, conn: Connection, data: bytes, on_lines: OnLines,
                  before_send: Callable[[], None] | None = None) -> ResponseParser:
        if before_send is not None:
            before_send()
        conn.request_deadline = perf_counter() + self.request_timeout if self.request_timeout else 0.0
        conn.sock.sendall(data)
        parser = ResponseParser(on_lines)
        if conn.buf:
            buffered, conn.buf = conn.buf, b""
            if parser.feed(buffered, perf_counter()):
                return parser
        reactor = _get_reactor() if self._ssl is None else None
        if reactor is not None:
            reactor.read(conn, parser)
            return parser
        # TLS (the record layer needs the ssl object's own reads) or no epoll: read this socket directly
        recv = conn.sock.recv
        try:
            while True:
                timeout = conn.timeout
                if conn.request_deadline:
                    left = conn.request_deadline - perf_counter()
                    if left <= 0:
                        raise request_timed_out(parser.resp)
                    timeout = min(timeout, left)
                conn.sock.settimeout(timeout)
                try:
                    chunk = recv(RECV_SIZE)
                except TimeoutError:
                    if conn.request_deadline and perf_counter() >= conn.request_deadline:
                        raise request_timed_out(parser.resp) from None
                    raise
                t = perf_counter()
                if not chunk:
                    parser.eof(t)
                    return parser
                if parser.feed(chunk, t):
                    return parser
        except TimeoutError:
            raise read_timed_out(conn.timeout, parser.resp) from None
        except HTTPError:
            raise
        except OSError as exc:
            raise HTTPError(f"{type(exc).__name__}: {exc} after {len(parser.resp.lines)} lines", parser.resp,
                            DISCONNECT) from exc
        finally:
            conn.sock.settimeout(None)


def _is_stale(exc: BaseException) -> bool:
    """A reused keep-alive connection the server had already closed: nothing of the response arrived."""
    if isinstance(exc, (ConnectionResetError, BrokenPipeError)):
        return True
    return isinstance(exc, HTTPError) and str(exc) == "connection closed before the response"
