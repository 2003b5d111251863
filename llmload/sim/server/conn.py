"""Connections and jobs: the per-socket state, and non-blocking accept, read, write and close.

:class:`Connections` is one part of :class:`~llmload.sim.server.core.SimServer`; the other parts supply
``_next_request`` (HTTP) and ``_abandon`` (a job whose client went away).
"""

from __future__ import annotations

import select
import socket
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmload.sim.engine import Seq
    from llmload.sim.faults import Fault
    from llmload.sim.loop import EventLoop
    from llmload.sim.requests import GenRequest
    from llmload.sim.wire import Wire

IN = select.EPOLLIN | select.EPOLLRDHUP
OUT = select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLOUT
_READABLE = select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLHUP | select.EPOLLERR
#: SO_LINGER on with a 0 s timeout: close() sends an RST instead of a FIN
_LINGER_RST = b"\x01\x00\x00\x00\x00\x00\x00\x00"


class Conn:
    """One client connection."""

    __slots__ = ("busy", "closed", "fd", "job", "keep_alive", "rbuf", "sock", "wbuf")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.rbuf = bytearray()
        self.wbuf = bytearray()
        self.busy = False
        self.closed = False
        self.keep_alive = True
        self.job: Job | None = None


class Job:
    """One generation request in flight."""

    __slots__ = (
        "chunk_times", "chunk_tokens", "client_id", "conn", "fault", "fault_at", "generated", "held", "in_engine",
        "lora_load", "path", "received", "req", "request_id", "seq", "session", "stalled_until", "started", "text",
        "traced_request", "wire",
    )

    def __init__(self, conn: Conn, req: GenRequest, wire: Wire, request_id: str, client_id: str, path: str) -> None:
        self.conn = conn
        self.req = req
        self.wire = wire
        self.request_id = request_id
        self.client_id = client_id
        self.path = path
        #: the session header's value (``--session-header``), or None
        self.session: str | None = None
        self.received = 0.0
        self.started = 0.0
        self.generated = 0
        self.chunk_times: list[float] = []
        self.chunk_tokens: list[int] = []
        self.text: list[bytes] = []
        self.fault: Fault | None = None
        #: index of the chunk at which a mid-stream fault strikes
        self.fault_at = -1
        self.seq: Seq | None = None
        self.stalled_until = 0.0
        #: engine chunks produced during a stall, sent when it ends
        self.held: list[bytes] = []
        #: generation started (the engine, or the fixed-timing clock, has it): /metrics counts its end
        self.in_engine = False
        #: seconds its LoRA adapter took to load before the prefill (0: loaded already, or a base model)
        self.lora_load = 0.0
        #: ``--trace-requests``: the request's headers (no credentials) and JSON body, for the trace
        self.traced_request: dict | None = None

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens the prefix cache held: the engine's lookup, else the fixed-timing one."""
        return self.seq.cached if self.seq is not None else self.req.cached_tokens


class Connections:
    """Accepting, reading, writing (with a write buffer when the socket is full) and closing."""

    sock: socket.socket
    loop: EventLoop
    conns: dict[int, Conn]

    def _on_accept(self, _events: int) -> None:
        while True:
            try:
                client, _addr = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            client.setblocking(False)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = Conn(client)
            self.conns[conn.fd] = conn
            self.loop.register(conn.fd, IN, lambda ev, c=conn: self._on_conn(c, ev))

    def _on_conn(self, conn: Conn, events: int) -> None:
        if events & select.EPOLLOUT:
            self._flush(conn)
        if events & _READABLE:
            try:
                data = conn.sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if not data:
                self._close(conn)
                return
            conn.rbuf += data
            if not conn.busy:
                self._next_request(conn)

    def _close(self, conn: Conn) -> None:
        if conn.closed:
            return
        conn.closed = True
        job = conn.job
        if job is not None:
            conn.job = None
            self._abandon(job)
        self.loop.unregister(conn.fd)
        self.conns.pop(conn.fd, None)
        try:
            conn.sock.close()
        except OSError:
            pass

    def _close_abruptly(self, conn: Conn) -> None:
        try:
            conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
        except OSError:
            pass
        self._close(conn)

    def _send(self, conn: Conn, data: bytes) -> None:
        if conn.closed:
            return
        if conn.wbuf:
            conn.wbuf += data
            return
        try:
            sent = conn.sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self._close(conn)
            return
        if sent < len(data):
            conn.wbuf += data[sent:]
            self.loop.modify(conn.fd, OUT)

    def _flush(self, conn: Conn) -> None:
        try:
            sent = conn.sock.send(conn.wbuf)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn)
            return
        del conn.wbuf[:sent]
        if not conn.wbuf and not conn.closed:
            self.loop.modify(conn.fd, IN)
            if not conn.keep_alive and not conn.busy:
                self._close(conn)
