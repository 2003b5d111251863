"""The pure-Python reader: the twin of the compiled one (``_cread.c``), with the same interface and the same results.

Three pieces, each the per-read work of the client (docs/design.md, "The compiled reader"):

- :class:`Decoder`: one HTTP/1.1 response. It finds the end of the head (the caller parses the head and calls
  :meth:`Decoder.start_body`), undoes chunked, Content-Length or until-close framing, and splits the body into
  lines, each stamped with the time of the read that brought its newline.
- :class:`ReadLoop`: one wake-up of the reactor. It reads every ready socket of an epoll set once, with the
  kernel's receive time, and feeds its decoder; it reports only what the caller must act on.
- :func:`pick_events`: a slice of stream lines becomes events, one per line (``None`` where a line carries none);
  here every payload goes to the dialect's ``parse_event``, which the compiled twin does for the OpenAI wire itself.

:mod:`llmload.client.transport.readers` chooses between the twins; the tests run every case on both.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Callable
from time import perf_counter
from typing import Any

import llmload.client.sse as sse

#: statuses of :meth:`Decoder.feed`, :meth:`Decoder.start_body`, :meth:`Decoder.eof` and of a read's report
MORE, DONE, HEAD, EOF, OSERROR, ERROR = 0, 1, 2, 3, 4, -1
#: body modes
MODE_HEAD, MODE_CHUNKED, MODE_LENGTH, MODE_CLOSE, MODE_DONE = 0, 1, 2, 3, 4
#: ``Decoder.error[0]``: what went wrong (the caller words the message)
ERR_HEAD_TOO_LARGE, ERR_NO_CRLF, ERR_BAD_SIZE = 1, 2, 3
ERR_CLOSED_BEFORE_RESPONSE, ERR_CLOSED_IN_HEAD, ERR_CLOSED_MID_STREAM = 4, 5, 6
#: the largest response head (status line and headers) accepted
MAX_HEAD = 1 << 20
#: below glibc's mmap threshold (128 KiB): a larger read buffer costs an mmap + munmap per read (~30 µs)
RECV_SIZE = 65536
#: read-lag histogram: 0.1 ms buckets, the last one for 1 s or more
LAG_BUCKETS = 10_001
_CMSG_SPACE = 64
_TIMESPEC = struct.Struct("qq")
#: a chunk size: hex digits only (no sign, no 0x, no underscores: int(_, 16) would take those), at most 2**64
_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")


class Decoder:
    """One response's framing undone into ``lines``: ``(t, line)`` for every complete, non-empty line.

    ``body`` keeps the body's pieces where the caller asked for them (``keep_body``), ``leftover`` what came past
    the end of the response, ``error`` ``(code, detail bytes)`` of a framing error. ``stamped`` (the kernel stamps
    arrivals), ``notify`` (report reads that completed lines), ``last_read`` and ``sock`` are the read loop's.
    """

    __slots__ = ("_crlf", "_pending", "_raw", "_remaining", "body", "error", "head", "keep_body", "last_read",
                 "leftover", "lines", "mode", "notify", "sock", "stamped")

    def __init__(self) -> None:
        self.mode = MODE_HEAD
        self.keep_body = True
        self.stamped = 0
        self.notify = 0
        self.last_read = 0.0
        self.lines: list[tuple[float, bytes]] = []
        self.body: list[bytes] = []
        self.head: bytes | None = None
        self.leftover = b""
        self.error: tuple[int, bytes] | None = None
        self.sock: Any = None
        self._raw = b""
        self._pending = b""
        self._remaining = 0
        self._crlf = False

    @property
    def untouched(self) -> bool:
        """Not one byte of the response has arrived."""
        return self.mode == MODE_HEAD and not self._raw

    def feed(self, data: bytes, t: float) -> int:
        """Take the next bytes, received at ``t``: MORE, HEAD (the head is in :attr:`head`), DONE or ERROR."""
        if self._raw:
            raw = self._raw + data
            self._raw = b""
        else:
            raw = data
        mode = self.mode
        if mode == MODE_CHUNKED:
            if self._remaining or self._crlf or self._pending or not self._whole_chunks(raw, t):
                return self._feed_chunked(raw, t)
            return MORE
        if mode == MODE_HEAD:
            end = raw.find(b"\r\n\r\n")
            if end > MAX_HEAD or (end < 0 and len(raw) > MAX_HEAD):
                return self._fail(ERR_HEAD_TOO_LARGE, b"")
            if end < 0:
                self._raw = raw
                return MORE
            self.head = raw[:end]
            self._raw = raw[end + 4 :]
            return HEAD
        if mode == MODE_LENGTH:
            take = raw[: self._remaining]
            self.body.append(take)
            self._remaining -= len(take)
            if self._remaining:
                return MORE
            self._lines(b"".join(self.body) + b"\n", t)
            return self._finish(raw[len(take) :])
        if mode == MODE_CLOSE:
            if raw:
                self._decoded(raw, t)
            return MORE
        return DONE

    def start_body(self, mode: int, remaining: int, keep_body: bool, t: float) -> int:
        """The head is parsed: decode the body in ``mode`` (``remaining``: its Content-Length) from what
        followed the head."""
        if mode not in (MODE_CHUNKED, MODE_LENGTH, MODE_CLOSE):
            raise ValueError("start_body: not a body mode")
        self.mode = mode
        self._remaining = remaining
        self.keep_body = bool(keep_body)
        rest, self._raw = self._raw, b""
        return self.feed(rest, t)

    def eof(self, t: float) -> int:
        """The server closed the connection: DONE for a body that runs to the close, else ERROR."""
        if self._pending:
            self._lines(b"\n", t)
        if self.mode == MODE_CLOSE:
            return self._finish(b"")
        if self.mode == MODE_DONE:
            return DONE
        if self.mode == MODE_HEAD:
            return self._fail(ERR_CLOSED_IN_HEAD if self._raw else ERR_CLOSED_BEFORE_RESPONSE, b"")
        return self._fail(ERR_CLOSED_MID_STREAM, b"")

    def _fail(self, code: int, detail: bytes) -> int:
        self.error = (code, detail)
        return ERROR

    def _finish(self, leftover: bytes) -> int:
        self.leftover = leftover
        self.mode = MODE_DONE
        return DONE

    def _lines(self, data: bytes, t: float) -> None:
        """Append the complete lines in ``pending + data`` with time ``t``; keep the incomplete tail."""
        if self._pending:
            data = self._pending + data
        append = self.lines.append
        start = 0
        find = data.find
        while True:
            i = find(b"\n", start)
            if i < 0:
                break
            if i > start + 1 or (i > start and data[start] != 13):
                append((t, data[start:i]))
            start = i + 1
        self._pending = data[start:]

    def _decoded(self, chunk: bytes, t: float) -> None:
        if self.keep_body:
            self.body.append(chunk)
        self._lines(chunk, t)

    def _feed_chunked(self, raw: bytes, t: float) -> int:
        """Decode chunk data as it arrives, so a line is stamped by the read that brought its newline (the
        general decoder: :meth:`feed` tries :meth:`_whole_chunks` first)."""
        pos = 0
        decoded: list[bytes] = []
        status = MORE
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
                    status = self._fail(ERR_NO_CRLF, raw[pos : pos + 2])
                    break
                pos += 2
                self._crlf = False
            i = raw.find(b"\r\n", pos)
            if i < 0:
                break
            size_field = raw[pos:i].split(b";", 1)[0].rstrip(b" \t")
            if not _HEX.fullmatch(size_field):
                status = self._fail(ERR_BAD_SIZE, raw[pos:i][:40])
                break
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
                return self._finish(raw[j + 2 :])
            self._remaining = size
            pos = i + 2
        # what arrived before a framing error is kept too
        if decoded:
            self._decoded(b"".join(decoded), t)
        if status == MORE:
            self._raw = raw[pos:]
        return status

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
        lines = self.lines
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
        if self.keep_body:
            self.body.extend(parts[1:count:2])
        return True


class ReadLoop:
    """Reads every ready socket of the epoll set ``ep`` once per :meth:`read_ready`, stamps each read with the
    kernel's arrival time (``SO_TIMESTAMPNS``, where the decoder is ``stamped``) moved onto ``perf_counter``'s
    clock by ``clock_offset``, and counts how late it was read in ``lag`` (0.1 ms buckets)."""

    __slots__ = ("clock_offset", "ep", "lag")

    def __init__(self, ep: Any, lag: Any, clock_offset: float = 0.0) -> None:
        if len(lag) != LAG_BUCKETS:
            raise ValueError("lag: 10001 int64 counters")
        self.ep = ep
        self.lag = lag
        self.clock_offset = clock_offset

    def read_ready(self, decoders: dict[int, Decoder]) -> list[tuple[int, int, float, int, int]]:
        """Read each ready socket once; returns ``(fd, status, t, first, errno)`` for each read the caller must act
        on: a head (HEAD), an end (DONE), a framing error (ERROR), the peer's close (EOF), a socket error
        (OSERROR with its errno), or lines a ``notify`` decoder gained (``first``: the index of the first new one,
        else -1)."""
        out = []
        read = os.read
        for fd, _ev in self.ep.poll(0):
            dec = decoders.get(fd)
            if dec is None:
                continue
            try:
                if dec.stamped:
                    data, ancillary, _flags, _addr = dec.sock.recvmsg(RECV_SIZE, _CMSG_SPACE)
                else:
                    data, ancillary = read(fd, RECV_SIZE), None
            except BlockingIOError:
                continue
            except OSError as exc:
                out.append((fd, OSERROR, perf_counter(), -1, exc.errno or 0))
                continue
            t = perf_counter()
            if ancillary:
                t = self._arrival(ancillary, t)
            dec.last_read = t
            if not data:
                out.append((fd, EOF, t, -1, 0))
                continue
            first = len(dec.lines)
            status = dec.feed(data, t)
            grew = dec.notify and len(dec.lines) > first
            if status != MORE or grew:
                out.append((fd, status, t, first if grew else -1, 0))
        return out

    def _arrival(self, ancillary: list[tuple[int, int, bytes]], t: float) -> float:
        """The kernel's arrival time of a read (independent of how busy this process was); counts the lag."""
        sec, nsec = _TIMESPEC.unpack_from(ancillary[0][2])
        arrived = sec + nsec * 1e-9 - self.clock_offset
        if not t - 1.0 < arrived < t:
            return t
        # how late this process read it: past one inter-token gap, chunks merge into one read
        lag = int((t - arrived) * 10_000)
        self.lag[min(lag, LAG_BUCKETS - 1)] += 1
        return arrived


def pick_events(lines: list[tuple[float, bytes]], start: int, stop: int,
                parse_event: Callable[[bytes, Any], Any], state: Any, openai: bool) -> list[Any]:
    """The event of each line in ``lines[start:stop]`` (``None`` where a line carries none: a blank, a comment,
    another SSE field, ``[DONE]``), each as ``parse_event(payload, state)`` gives it. ``openai``: the dialect
    reads the OpenAI wire (the compiled twin picks those events' fields itself)."""
    out: list[Any] = []
    append = out.append
    parse_line, end_marker = sse.parse_line, sse.DONE
    for i in range(max(start, 0), min(stop, len(lines))):
        payload = parse_line(lines[i][1])
        append(None if payload is None or payload == end_marker else parse_event(payload, state))
    return out
