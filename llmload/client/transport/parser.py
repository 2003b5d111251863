"""Push parsing of one HTTP/1.1 response: the head here, the framing in the reader's decoder (compiled or Python).

Complete lines carry the timestamp of the read that completed them; JSON and everything else happen later.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import llmload.client.transport.readers as readers
from llmload.client.transport.errors import (
    ClosedBeforeResponse,
    ClosedMidStream,
    ProtocolError,
    TransportError,
)
from llmload.client.transport.pyread import (
    DONE,
    ERR_BAD_SIZE,
    ERR_CLOSED_BEFORE_RESPONSE,
    ERR_CLOSED_IN_HEAD,
    ERR_HEAD_TOO_LARGE,
    ERR_NO_CRLF,
    HEAD,
    MAX_HEAD,
    MODE_CHUNKED,
    MODE_CLOSE,
    MODE_HEAD,
    MODE_LENGTH,
    MORE,
)
from llmload.client.transport.response import Response

__all__ = ["MAX_HEAD", "OnLines", "ResponseParser"]

OnLines = Callable[["Response", int], None] | None


class ResponseParser:
    """Push parser for one response: :meth:`feed` bytes as they arrive, with the time they arrived.

    The framing is the reader's :class:`Decoder` (compiled or Python: :mod:`llmload.client.transport.readers`);
    this class parses the head, words the errors and tells a live listener of new lines. The reactor feeds the
    decoder itself, one wake-up for all ready sockets, and hands what it reports to :meth:`handle`.
    """

    __slots__ = ("_keep_body", "_length", "_mode", "decoder", "done", "keep_alive", "on_lines", "resp")

    def __init__(self, on_lines: OnLines = None, *, decoder: Any = None) -> None:
        self.resp = Response()
        self.on_lines = on_lines
        #: the framing: a reader's Decoder (the chosen reader's unless one is given)
        self.decoder = decoder if decoder is not None else readers.chosen().Decoder()
        self.decoder.notify = on_lines is not None
        #: the lines are the decoder's own list: what arrived is there, whatever happens next
        self.resp.lines = self.decoder.lines
        self.done = False
        self.keep_alive = False
        self._mode = MODE_HEAD
        self._length = 0
        self._keep_body = True

    @property
    def in_head(self) -> bool:
        """The response head is not complete yet (a failure now came before the response)."""
        return self.decoder.mode == MODE_HEAD

    @property
    def untouched(self) -> bool:
        """Not one byte of the response has arrived."""
        return bool(self.decoder.untouched)

    @property
    def leftover(self) -> bytes:
        """Bytes received past the end of this response."""
        return self.decoder.leftover

    @property
    def last_read(self) -> float:
        """When data last arrived through the reactor (0: not yet)."""
        return self.decoder.last_read

    def feed(self, data: bytes, t: float) -> bool:
        """Take the next bytes; returns True once the response is complete."""
        first = len(self.resp.lines)
        return self.handle(self.decoder.feed(data, t), t, first)

    def eof(self, t: float) -> None:
        """The server closed the connection: fine for a body that runs to the close, else an error."""
        first = len(self.resp.lines)
        status = self.decoder.eof(t)
        self.resp.body = b"".join(self.decoder.body)
        self.handle(status, t, first)

    def handle(self, status: int, t: float, first: int) -> bool:
        """Act on what the decoder said of a read at ``t`` (``first``: the line count before it, -1 where no
        listener needs telling): parse a head, tell the listener of new lines, finish, or raise the error."""
        if status == HEAD:
            self._parse_head(self.decoder.head, t)
            if first < 0:
                first = len(self.resp.lines)  # the body's first lines came with the head
            status = self.decoder.start_body(self._mode, self._length, self._keep_body, t)
        if self.on_lines is not None and first >= 0 and len(self.resp.lines) > first:
            self.on_lines(self.resp, first)
        if status == MORE:
            return False
        if status == DONE:
            self.resp.body = b"".join(self.decoder.body)
            self.done = True
            self.resp.reusable = self.keep_alive
            return True
        raise self._error()

    def _error(self) -> TransportError:
        code, detail = self.decoder.error
        resp = self.resp
        if code == ERR_HEAD_TOO_LARGE:
            return ProtocolError("response headers larger than 1 MiB", resp)
        if code == ERR_NO_CRLF:
            return ProtocolError(f"chunk not followed by CRLF: {detail!r}", resp)
        if code == ERR_BAD_SIZE:
            return ProtocolError(f"malformed chunk size line: {detail!r}", resp)
        if code == ERR_CLOSED_BEFORE_RESPONSE:
            return ClosedBeforeResponse("connection closed before the response", resp)
        if code == ERR_CLOSED_IN_HEAD:
            return ClosedBeforeResponse("connection closed before the response headers", resp)
        return ClosedMidStream(f"connection closed mid-stream after {len(resp.lines)} lines", resp)

    def _parse_head(self, head: bytes, t: float) -> None:
        resp = self.resp
        resp.header_time = t
        lines = head.decode("latin-1").split("\r\n")
        try:
            version, status = lines[0].split(" ", 2)[:2]
            resp.status = int(status)
        except ValueError:
            raise ProtocolError(f"malformed status line: {lines[0][:80]!r}", resp) from None
        for line in lines[1:]:
            name, _, value = line.partition(":")
            resp.headers[name.strip().lower()] = value.strip()
        self.keep_alive = resp.headers.get("connection", "").lower() != "close" and version == "HTTP/1.1"
        content_type = resp.headers.get("content-type", "").lower()
        self._keep_body = resp.status != 200 or not ("event-stream" in content_type or "ndjson" in content_type)
        self._length = 0
        if "chunked" in resp.headers.get("transfer-encoding", "").lower():
            self._mode = MODE_CHUNKED
        elif "content-length" in resp.headers:
            try:
                length = resp.headers["content-length"]
                if not (length.isascii() and length.isdigit()):
                    raise ValueError(length)
                self._length = int(length)
            except ValueError:
                raise ProtocolError(f"bad Content-Length: {resp.headers['content-length']!r}", resp) from None
            self._mode = MODE_LENGTH
        else:
            self._mode = MODE_CLOSE
            self.keep_alive = False
