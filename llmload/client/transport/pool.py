"""Keep-alive connections to one origin, and the one place where socket errors become transport errors."""

from __future__ import annotations

import ipaddress
import socket
import ssl
import sys
from collections.abc import Callable
from time import perf_counter
from urllib.parse import urlsplit

from llmload.client.transport.errors import (
    ClosedBeforeResponse,
    ClosedMidStream,
    ConnectError,
    ConnectTimeout,
    TransportError,
    cancelled,
    read_timed_out,
    request_timed_out,
)
from llmload.client.transport.parser import OnLines, ResponseParser
from llmload.client.transport.reactor import SO_TIMESTAMPNS, Connection, Reactor
from llmload.client.transport.response import Response
from llmload.common.errors import ConfigError

#: socket errors of a reused keep-alive connection the server had already closed
_STALE_ERRORS = (ConnectionResetError, BrokenPipeError)


class Pool:
    """Keep-alive connections to one origin; LIFO so a warm connection is reused first.

    ``connect_timeout`` bounds opening a connection, ``read_timeout`` a gap with no data,
    ``request_timeout`` (None: none) the whole request from the moment its bytes go out. ``user:password@``
    in ``base_url`` is sent as HTTP Basic authentication and never appears in a message.

    ``reactor`` reads the responses; without one the pool creates and owns a private :class:`Reactor`
    (released by :meth:`close`). A process running many pools should give them all one shared reactor: one
    epoll set and one wake-up then serve every stream, and its read lag covers them all.

    :meth:`request` raises only :class:`~llmload.client.transport.errors.TransportError` subclasses for what went
    wrong on the wire; a socket error is its ``__cause__``.
    """

    def __init__(self, base_url: str, *, connect_timeout: float = 30.0, read_timeout: float = 600.0,
                 request_timeout: float | None = None, reactor: Reactor | None = None,
                 verify_tls: bool = True) -> None:
        from llmload.common.urls import basic_auth, redact_url

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
        #: reads every response of this pool (shared, or the pool's own)
        self.reactor = reactor if reactor is not None else Reactor()
        self._owns_reactor = reactor is None
        self._idle: list[Connection] = []
        self._ssl = tls_context(verify_tls) if self.tls else None

    def close(self) -> None:
        """Close the idle connections (and an own reactor with nothing in flight); the pool stays usable."""
        while self._idle:
            self._idle.pop().close()
        if self._owns_reactor and not self.reactor.waiting:
            self.reactor.close()

    def request(self, method: str, path: str, headers: dict[str, str], body: bytes, on_lines: OnLines = None,
                before_send: Callable[[], None] | None = None, *, cancel_after_s: float | None = None,
                cancel_after_lines: int | None = None) -> Response:
        """Send one request and read the whole response. ``on_lines(response, first_new_index)`` is called after
        each read that completed lines (live listeners); otherwise lines are only collected.
        ``before_send()`` runs once a connection is in hand, immediately before the bytes go out (the ``st``
        of docs/design.md "Metric definitions": connection set-up is not part of TTFT).
        ``cancel_after_s`` seconds after the bytes went out, or once ``cancel_after_lines`` stream lines arrived,
        the request is cancelled: :class:`Cancelled` (with what had arrived) and the connection closed."""
        data = self._encode(method, path, headers, body)
        conn: Connection | None = None  # None while a connection is being opened
        if cancel_after_lines:
            on_lines = _cancelling(on_lines, cancel_after_lines)
        parser = ResponseParser(on_lines)
        try:
            reused = bool(self._idle)
            conn = self._idle.pop() if reused else self._connect()
            try:
                self._exchange(conn, parser, data, before_send, cancel_after_s)
            except (TransportError, OSError) as exc:
                if not (reused and _is_stale(exc, parser)):
                    raise
                # the server closed an idle keep-alive connection: retry once on a fresh one
                conn.close()
                conn, parser = None, ResponseParser(on_lines)
                conn = self._connect()
                self._exchange(conn, parser, data, before_send, cancel_after_s)
        except BaseException as exc:
            if conn is not None:
                conn.close()
            if isinstance(exc, OSError):
                raise self._error(exc, conn, parser) from exc
            raise
        conn.deadline = 0.0
        conn.request_deadline = 0.0
        conn.cancel_at = 0.0
        conn.buf = parser.leftover
        if parser.resp.reusable:
            self._idle.append(conn)
        else:
            conn.close()
        return parser.resp

    def _error(self, exc: OSError, conn: Connection | None, parser: ResponseParser) -> TransportError:
        """The transport error a socket error stands for: the only place this mapping is made.

        ``conn`` is None while the connection was being opened; else ``parser`` says what had arrived.
        """
        where = f"{self.host}:{self.port}"
        if conn is None:
            if isinstance(exc, TimeoutError):
                return ConnectTimeout(f"connect to {where} timed out after {self.connect_timeout:g} s")
            if isinstance(exc, ConnectionRefusedError):
                return ConnectError(f"connection refused by {where}")
            if isinstance(exc, ssl.SSLError):
                return ConnectError(f"TLS handshake with {where} failed: {exc}")
            return ConnectError(f"cannot connect to {where}: {exc.strerror or exc}")
        resp = parser.resp
        # the socket timeout of a direct read (errno None; a kernel ETIMEDOUT is a dead peer, below)
        if isinstance(exc, TimeoutError) and exc.errno is None:
            if conn.request_deadline and perf_counter() >= conn.request_deadline:
                return request_timed_out(resp)
            return read_timed_out(conn.timeout, resp)
        closed = ClosedBeforeResponse if parser.in_head else ClosedMidStream
        return closed(f"{type(exc).__name__}: {exc} after {len(resp.lines)} lines", resp)

    def _encode(self, method: str, path: str, headers: dict[str, str], body: bytes) -> bytes:
        head = [f"{method} {self.prefix}{path} HTTP/1.1", f"Host: {self.host_header}", f"Content-Length: {len(body)}"]
        if self.authorization and "Authorization" not in headers:
            head.append(f"Authorization: {self.authorization}")
        head.extend(f"{k}: {v}" for k, v in headers.items())
        return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body

    def _connect(self) -> Connection:
        """A new connection; raises the socket's own ``OSError`` (mapped by :meth:`request`)."""
        sock = self._open_socket()
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            stamped = False
            if self._ssl is None:
                try:
                    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
                    stamped = True
                except OSError:
                    pass
            else:
                sock = self._ssl.wrap_socket(sock, server_hostname=self.host)
            sock.settimeout(None)
        except BaseException:
            sock.close()
            raise
        conn = Connection(sock, self.read_timeout, tls=self._ssl is not None)
        conn.stamped = stamped and sys.platform.startswith("linux")
        return conn

    def _open_socket(self) -> socket.socket:
        """A connected socket. An IP address is connected to as it is: gevent would still hand it to its resolver
        threads, whose GIL hand-offs stalled the loop for ~10 ms while a batch of connections opened. A host
        name is resolved for every connection (round-robin DNS spreads them over the replicas)."""
        family = _ip_family(self.host)
        if family is None:
            return socket.create_connection((self.host, self.port), timeout=self.connect_timeout)
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.connect_timeout)
            sock.connect((self.host, self.port))
        except BaseException:
            sock.close()
            raise
        return sock

    def _exchange(self, conn: Connection, parser: ResponseParser, data: bytes,
                  before_send: Callable[[], None] | None, cancel_after_s: float | None) -> None:
        # a batch of requests starting together (the slots a batch of ends freed) must not hold back the reads
        self.reactor.yield_to_reads()
        if before_send is not None:
            before_send()
        now = perf_counter()
        conn.request_deadline = now + self.request_timeout if self.request_timeout else 0.0
        conn.cancel_at = now + cancel_after_s if cancel_after_s is not None else 0.0
        conn.sock.sendall(data)
        parser.resp.sent_at = perf_counter()
        if conn.buf:
            buffered, conn.buf = conn.buf, b""
            if parser.feed(buffered, perf_counter()):
                return
        self.reactor.read(conn, parser)


def _cancelling(on_lines: OnLines, after: int) -> OnLines:
    """``on_lines`` that cancels the request once ``after`` lines arrived (the reactor fails it with the error)."""
    def listen(resp: Response, first: int) -> None:
        if on_lines is not None:
            on_lines(resp, first)
        if len(resp.lines) >= after:
            raise cancelled(resp)

    return listen


def _ip_family(host: str) -> socket.AddressFamily | None:
    """AF_INET or AF_INET6 for an IP address (``urlsplit`` gives an IPv6 one without brackets), None for a name."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    return socket.AF_INET6 if address.version == 6 else socket.AF_INET


def _is_stale(exc: BaseException, parser: ResponseParser) -> bool:
    """A reused keep-alive connection the server had already closed: nothing of the response arrived."""
    return parser.untouched and isinstance(exc, (ClosedBeforeResponse, *_STALE_ERRORS))


def tls_context(verify: bool = True) -> ssl.SSLContext:
    """The client's TLS context: the system's trust store and host-name check, or neither (``--insecure``, as
    ``vllm bench serve``: a self-signed test server)."""
    context = ssl.create_default_context()
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context
