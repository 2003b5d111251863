"""Push parsing of one HTTP/1.1 response: undo the framing with a few slice operations per read.

Complete lines carry the timestamp of the read that completed them; JSON and everything else happen later.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from llmload.client.transport.errors import ClosedBeforeResponse, ClosedMidStream, ProtocolError
from llmload.client.transport.response import Response

#: the largest response head (status line and headers) accepted
MAX_HEAD = 1 << 20
OnLines = Callable[["Response", int], None] | None
#: a chunk size: hex digits only (no sign, no 0x, no underscores: int(_, 16) would take those), at most 2**64
_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")


class ResponseParser:
    """Push parser for one response: :meth:`feed` bytes as they arrive, with the time they arrived."""

    __slots__ = ("_body", "_crlf", "_fast", "_keep_body", "_mode", "_pending", "_raw", "_remaining", "done",
                 "keep_alive", "leftover", "on_lines", "resp")

    def __init__(self, on_lines: OnLines = None, *, fast: bool = True) -> None:
        self.resp = Response()
        self.on_lines = on_lines
        #: take reads made of whole chunks of whole lines in one split (:meth:`_whole_chunks`); False: only the
        #: general decoder (the tests compare the two)
        self._fast = fast
        self._keep_body = True
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

    @property
    def in_head(self) -> bool:
        """The response head is not complete yet (a failure now came before the response)."""
        return self._mode == "head"

    @property
    def untouched(self) -> bool:
        """Not one byte of the response has arrived."""
        return self._mode == "head" and not self._raw

    def feed(self, data: bytes, t: float) -> bool:
        """Take the next bytes; returns True once the response is complete."""
        raw = self._raw + data if self._raw else data
        self._raw = b""
        if self._mode == "head":
            end = raw.find(b"\r\n\r\n")
            if end > MAX_HEAD or (end < 0 and len(raw) > MAX_HEAD):
                raise ProtocolError("response headers larger than 1 MiB", self.resp)
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
            if self._keep_body:
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
            raise ClosedBeforeResponse("connection closed before the response" if not self._raw else
                                       "connection closed before the response headers", self.resp)
        raise ClosedMidStream(f"connection closed mid-stream after {len(self.resp.lines)} lines", self.resp)

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
            raise ProtocolError(f"malformed status line: {lines[0][:80]!r}", resp) from None
        for line in lines[1:]:
            name, _, value = line.partition(":")
            resp.headers[name.strip().lower()] = value.strip()
        self.keep_alive = resp.headers.get("connection", "").lower() != "close" and version == "HTTP/1.1"
        content_type = resp.headers.get("content-type", "").lower()
        self._keep_body = resp.status != 200 or not ("event-stream" in content_type or "ndjson" in content_type)
        if "chunked" in resp.headers.get("transfer-encoding", "").lower():
            self._mode = "chunked"
        elif "content-length" in resp.headers:
            try:
                length = resp.headers["content-length"]
                if not (length.isascii() and length.isdigit()):
                    raise ValueError(length)
                self._remaining = int(length)
            except ValueError:
                raise ProtocolError(f"bad Content-Length: {resp.headers['content-length']!r}", resp) from None
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
        if self._fast and not self._remaining and not self._crlf and not self._pending and self._whole_chunks(raw, t):
            return False
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
                        raise ProtocolError(f"chunk not followed by CRLF: {raw[pos : pos + 2]!r}", self.resp)
                    pos += 2
                    self._crlf = False
                i = raw.find(b"\r\n", pos)
                if i < 0:
                    break
                size_field = raw[pos:i].split(b";", 1)[0].rstrip(b" \t")
                if not _HEX.fullmatch(size_field):
                    raise ProtocolError(f"malformed chunk size line: {raw[pos:i][:40]!r}", self.resp)
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
        if self._keep_body:
            self._body.append(chunk)
        self._lines(chunk, t)

    def _whole_chunks(self, raw: bytes, t: float) -> bool:
        """The common read of a stream: one or more whole chunks (not the last one), each of whole lines
        (``8c\\r\\ndata: {...}\\n\\n\\r\\n``...). Splitting at CRLF then gives size, data, size, data, ...;
        when every size matches its data and every data ends a line, take them all at once and return True;
        else change nothing and return False (the general decoder takes the read). Same result, fewer calls."""
        parts = raw.split(b"\r\n")
        count = len(parts) - 1
        if count < 2 or count % 2 or parts[-1]:
            return False
        fullmatch = _HEX.fullmatch
        lines = self.resp.lines
        first = len(lines)
        append = lines.append
        for k in range(0, count, 2):
            size = parts[k]
            data = parts[k + 1]
            if not data or data[-1] != 10 or not fullmatch(size) or int(size, 16) != len(data):
                # a size line with extensions, the last chunk, CR/LF inside the data: the long way, from scratch
                del lines[first:]
                return False
            if data.find(b"\n") == len(data) - 2:
                # one event: "data: {...}\n\n" (no line here can be a lone CR: the data holds no CRLF)
                if len(data) > 2:
                    append((t, data[:-2]))
            else:
                for line in data.split(b"\n"):
                    if line:
                        append((t, line))
        if self._keep_body:
            self._body.extend(parts[1:count:2])
        if self.on_lines is not None and len(lines) > first:
            self.on_lines(self.resp, first)
        return True
