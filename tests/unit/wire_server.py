"""A misbehaving HTTP server for the transport tests: a listening socket on 127.0.0.1 served by one thread."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable

CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
EVENT = b"data: x\n\n"
#: how long a handler may wait for the client before giving up (only a bound, never reached in a pass)
PATIENCE_S = 10.0

Handler = Callable[[socket.socket, threading.Event], None]


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def ok(body: bytes = b"{}") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


def read_request(conn: socket.socket) -> bytes:
    """Read one request (head and Content-Length body) off ``conn``."""
    conn.settimeout(PATIENCE_S)
    data = b""
    while b"\r\n\r\n" not in data:
        piece = conn.recv(65536)
        if not piece:
            return data
        data += piece
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        body += conn.recv(65536)
    return head


def reset(conn: socket.socket) -> None:
    """Close with a RST instead of a FIN."""
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


class Server:
    """A listening socket on 127.0.0.1; ``handlers[i]`` serves the i-th connection, in this server's thread."""

    def __init__(self, *handlers: Handler) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.stop = threading.Event()
        self.accepted = 0
        self.errors: list[BaseException] = []
        self._handlers = list(handlers)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while self._handlers and not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            self.accepted += 1
            handler = self._handlers.pop(0)
            try:
                handler(conn, self.stop)
            except OSError:
                pass  # the client went away first: fine for a server that misbehaves anyway
            except BaseException as exc:
                self.errors.append(exc)
            finally:
                conn.close()

    def close(self) -> None:
        self.stop.set()
        self._thread.join(PATIENCE_S)
        self.sock.close()
        assert not self._thread.is_alive(), "the test server did not stop"
        assert not self.errors, self.errors
