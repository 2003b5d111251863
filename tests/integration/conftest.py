"""Raw-socket HTTP/1.1 client for the sim tests: timestamps each read at once (perf_counter), parses later.

``time.perf_counter`` and the server's ``time.monotonic`` are the same CLOCK_MONOTONIC on Linux, so client
timestamps compare directly with the simulator's trace file.
"""

from __future__ import annotations

import bisect
import json
import selectors
import socket
import time
from dataclasses import dataclass, field

import pytest

HOST = "127.0.0.1"


def build_request(method: str, path: str, body: object = None, headers: dict[str, str] | None = None,
                  raw_body: bytes | None = None) -> bytes:
    if raw_body is None:
        raw_body = b"" if body is None else json.dumps(body).encode()
    lines = [f"{method} {path} HTTP/1.1", f"Host: {HOST}", "Accept-Encoding: identity"]
    if raw_body or method == "POST":
        lines += ["Content-Type: application/json", f"Content-Length: {len(raw_body)}"]
    for name, value in (headers or {}).items():
        lines.append(f"{name}: {value}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + raw_body


@dataclass
class Event:
    """One SSE event (or NDJSON line): ``data`` is the payload after ``data:``; ``t`` its arrival time."""

    t: float
    data: bytes

    def json(self) -> dict:
        return json.loads(self.data)


@dataclass
class Response:
    t_send: float
    status: int = 0
    reason: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    t_head: float | None = None
    body: bytes = b""
    #: HTTP chunks: (arrival time, payload)
    chunks: list[tuple[float, bytes]] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    #: the response framing completed (terminating chunk or full Content-Length)
    complete: bool = False
    eof: bool = False
    reset: bool = False
    timed_out: bool = False
    t_end: float | None = None

    def data_events(self) -> list[Event]:
        """Events other than ``[DONE]``."""
        return [e for e in self.events if e.data != b"[DONE]"]

    def json(self) -> dict:
        return json.loads(self.body)

    @property
    def done_marker(self) -> bool:
        return any(e.data == b"[DONE]" for e in self.events)


def _sse_events(chunks: list[tuple[float, bytes]]) -> list[Event]:
    events: list[Event] = []
    buf = b""
    for t, payload in chunks:
        buf += payload
        while True:
            end = buf.find(b"\n\n")
            if end < 0:
                break
            block, buf = buf[:end], buf[end + 2:]
            for line in block.split(b"\n"):
                line = line.rstrip(b"\r")
                if not line or line.startswith(b":"):
                    continue
                if line.startswith(b"data:"):
                    line = line[5:]
                    if line.startswith(b" "):
                        line = line[1:]
                events.append(Event(t, line))
    return events


def parse_response(reads: list[tuple[float, bytes]], t_send: float, start: int = 0) -> tuple[Response, int]:
    """Parse one HTTP response starting at byte ``start`` of the concatenated reads; returns it and where it ends."""
    raw = b"".join(d for _, d in reads)
    ends: list[int] = []
    total = 0
    for _, d in reads:
        total += len(d)
        ends.append(total)

    def time_at(offset: int) -> float:
        """Arrival time of the read holding byte ``offset - 1``."""
        i = bisect.bisect_left(ends, offset)
        return reads[min(i, len(reads) - 1)][0]

    resp = Response(t_send=t_send)
    head_end = raw.find(b"\r\n\r\n", start)
    if head_end < 0:
        return resp, len(raw)
    resp.t_head = time_at(head_end + 4)
    head = raw[start:head_end].decode("latin-1").split("\r\n")
    parts = head[0].split(" ", 2)
    resp.status = int(parts[1])
    resp.reason = parts[2] if len(parts) > 2 else ""
    for line in head[1:]:
        name, _, value = line.partition(":")
        resp.headers[name.strip().lower()] = value.strip()
    pos = head_end + 4
    if "chunked" in resp.headers.get("transfer-encoding", "").lower():
        while True:
            line_end = raw.find(b"\r\n", pos)
            if line_end < 0:
                break
            size = int(raw[pos:line_end].split(b";")[0], 16)
            data_end = line_end + 2 + size
            if data_end + 2 > len(raw):
                break
            if size == 0:
                resp.complete = True
                pos = data_end + 2
                break
            resp.chunks.append((time_at(data_end + 2), raw[line_end + 2: data_end]))
            pos = data_end + 2
        resp.body = b"".join(p for _, p in resp.chunks)
        resp.events = _sse_events(resp.chunks)
    elif "content-length" in resp.headers:
        length = int(resp.headers["content-length"])
        resp.body = raw[pos: pos + length]
        resp.complete = len(resp.body) == length
        if resp.complete:
            resp.chunks = [(time_at(pos + length), resp.body)] if length else []
        pos += len(resp.body)
    else:
        resp.body = raw[pos:]
        pos = len(raw)
    if resp.chunks:
        resp.t_end = resp.chunks[-1][0]
    return resp, pos


class _Conn:
    __slots__ = (
        "buf",
        "chunked",
        "eof",
        "head_end",
        "index",
        "last",
        "length",
        "reads",
        "reset",
        "sock",
        "t_send",
        "timed_out",
    )

    def __init__(self, index: int, sock: socket.socket) -> None:
        self.index = index
        self.sock = sock
        self.buf = bytearray()
        self.reads: list[tuple[float, bytes]] = []
        self.head_end = -1
        self.length = -1
        self.chunked = False
        self.t_send = 0.0
        self.last = 0.0
        self.reset = False
        self.eof = False
        self.timed_out = False

    def finished(self) -> bool:
        buf = self.buf
        if self.head_end < 0:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return False
            self.head_end = end + 4
            head = bytes(buf[:end]).lower()
            self.chunked = b"transfer-encoding: chunked" in head
            for line in head.split(b"\r\n"):
                if line.startswith(b"content-length:"):
                    self.length = int(line.split(b":", 1)[1])
        if self.chunked:
            return buf.endswith(b"\r\n0\r\n\r\n") or bytes(buf[self.head_end:]) == b"0\r\n\r\n"
        if self.length >= 0:
            return len(buf) >= self.head_end + self.length
        return False


def fetch_many(port: int, requests: list[bytes], concurrency: int | None = None, read_timeout: float = 10.0,
               total_timeout: float = 60.0) -> list[Response]:
    """Send each request on its own connection, at most ``concurrency`` at once (closed loop), and read every
    response with per-read timestamps. A connection with no bytes for ``read_timeout`` s is abandoned."""
    concurrency = concurrency or len(requests)
    sel = selectors.DefaultSelector()
    conns: list[_Conn | None] = [None] * len(requests)
    active: dict[int, _Conn] = {}
    nxt = 0
    deadline = time.perf_counter() + total_timeout
    perf = time.perf_counter

    def finish(c: _Conn) -> None:
        sel.unregister(c.sock)
        c.sock.close()
        del active[c.index]

    try:
        while nxt < len(requests) or active:
            while nxt < len(requests) and len(active) < concurrency:
                sock = socket.create_connection((HOST, port))
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                c = _Conn(nxt, sock)
                conns[nxt] = c
                c.t_send = perf()
                sock.sendall(requests[nxt])
                c.last = c.t_send
                sock.setblocking(False)
                sel.register(sock, selectors.EVENT_READ, c)
                active[nxt] = c
                nxt += 1
            now = perf()
            if now > deadline:
                raise TimeoutError(f"fetch_many: {len(active)} responses still open after {total_timeout} s")
            wait = min(c.last for c in active.values()) + read_timeout - now
            for key, _ in sel.select(timeout=max(0.0, min(wait, deadline - now))):
                c = key.data
                try:
                    data = c.sock.recv(262144)
                except (BlockingIOError, InterruptedError):
                    continue
                except ConnectionResetError:
                    data = b""
                    c.reset = True
                t = perf()
                if data:
                    c.reads.append((t, data))
                    c.buf += data
                    c.last = t
                    if c.finished():
                        finish(c)
                else:
                    c.eof = True
                    finish(c)
            now = perf()
            for c in list(active.values()):
                if now - c.last >= read_timeout:
                    c.timed_out = True
                    finish(c)
    finally:
        for c in list(active.values()):
            c.sock.close()
        sel.close()

    out: list[Response] = []
    for c in conns:
        assert c is not None
        resp, _ = parse_response(c.reads, c.t_send)
        resp.eof, resp.reset, resp.timed_out = c.eof, c.reset, c.timed_out
        out.append(resp)
    return out


class RawHTTP:
    """``raw_http.post(sim, path, body)`` and friends, over fresh sockets to 127.0.0.1."""

    build = staticmethod(build_request)
    parse = staticmethod(parse_response)
    many = staticmethod(fetch_many)

    def request(self, port: int, method: str, path: str, body: object = None, headers: dict | None = None,
                raw_body: bytes | None = None, read_timeout: float = 10.0) -> Response:
        req = build_request(method, path, body, headers, raw_body)
        return fetch_many(port, [req], read_timeout=read_timeout)[0]

    def post(self, port: int, path: str, body: object = None, **kw: object) -> Response:
        return self.request(port, "POST", path, body, **kw)  # type: ignore[arg-type]

    def get(self, port: int, path: str, **kw: object) -> Response:
        return self.request(port, "GET", path, **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def raw_http() -> RawHTTP:
    return RawHTTP()
