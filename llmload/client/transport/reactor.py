"""Read stream sockets from one epoll set, in a callback of gevent's loop, and timestamp every read.

Why not one gevent ``recv`` per stream: each costs a hub switch and Python work per event, and a batching
server delivers a burst of events to every stream at once, so per-event work delays every later timestamp in
the burst (docs/design.md, "Transport"). A :class:`Reactor` watches one epoll set holding the sockets of every request it reads;
when gevent's loop reports it ready, a callback reads every ready socket and stamps each read with the kernel's
arrival time (``SO_TIMESTAMPNS``) or, without one, the moment the read returned.

Socket errors are handed to the request's greenlet as they are: :class:`llmload.client.transport.Pool` maps them to
:mod:`llmload.client.transport.errors` types in one place.
"""

from __future__ import annotations

import os
import select
import socket
import weakref
from array import array
from time import perf_counter
from typing import Any

import llmload.client.transport.readers as readers
from llmload.client.transport.clock import clock_offset
from llmload.client.transport.errors import (
    ListenerError,
    TransportError,
    cancelled,
    read_timed_out,
    request_timed_out,
)
from llmload.client.transport.parser import ResponseParser
from llmload.client.transport.pyread import EOF, LAG_BUCKETS, OSERROR, RECV_SIZE
from llmload.client.transport.stalls import StallClock

#: Linux SO_TIMESTAMPNS / SCM_TIMESTAMPNS: the kernel stamps each received packet (CLOCK_REALTIME)
SO_TIMESTAMPNS = 35
#: longest stretch of greenlet work between two polls for arriving data
SWITCH_INTERVAL_S = 0.0005
#: client work that yields to the reactor (:meth:`Reactor.yield_to_reads`) gets its sockets read once this
#: long has passed since they were last looked at: far below any inter-token gap worth measuring
READ_EVERY_S = 0.0005
#: work waiting for an idle loop (:meth:`Reactor.idle_turn`) goes ahead after this long without one
IDLE_WAIT_S = 0.002
#: how often the watchdog checks read and request timeouts
WATCH_INTERVAL_S = 0.25


class Connection:
    __slots__ = ("buf", "cancel_at", "deadline", "raw", "request_deadline", "sock", "stamped", "timeout", "tls")

    def __init__(self, sock: socket.socket, timeout: float, tls: bool = False) -> None:
        self.sock = sock
        #: the OS-level socket under gevent's wrapper (for recvmsg without a hub switch)
        self.raw = getattr(sock, "_sock", sock)
        #: TLS: the ssl object must do its own reads, so the reactor reads it directly
        self.tls = tls
        #: the kernel timestamps arrivals on this socket (SO_TIMESTAMPNS)
        self.stamped = False
        #: bytes received past the end of the previous response
        self.buf = b""
        #: the read timeout from the request's start (0: idle); each read moves it on, by the decoder's
        #: ``last_read`` (the watchdog takes the later of the two)
        self.deadline = 0.0
        #: when the whole request must be over (0: no limit); set per request by the pool
        self.request_deadline = 0.0
        #: when the client cancels this request on purpose (0: never); set per request by the pool
        self.cancel_at = 0.0
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
    """Reads the sockets of every request given to :meth:`read` from one epoll set, and keeps their read lag.

    Share one among all the pools of a process: one wake-up then reads every ready stream, and the read lag
    covers them all. The epoll set opens on the first read and is released by :meth:`close` (or when the
    reactor is garbage-collected); a read after :meth:`close` opens a new one. Without epoll (not Linux, or
    ``epoll=False``) and for TLS, :meth:`read` reads the socket directly in the calling greenlet.

    ``reader`` does the per-read work (:mod:`llmload.client.transport.readers`: the compiled one where it was
    built, unless ``LLMLOAD_READER=python``); its read loop takes every ready socket in one call per wake-up.
    """

    def __init__(self, *, epoll: bool = True, reader: readers.Reader | None = None) -> None:
        #: the reader that reads this reactor's sockets: ``reader.name`` is what the result JSON reports
        self.reader = reader if reader is not None else readers.chosen()
        self._epoll_type = _epoll_type() if epoll and self.reader.ReadLoop is not None else None
        self.ep: Any = None
        self._loop: Any = None
        #: the decoder of each socket being read (what the read loop feeds), beside :attr:`waiting`
        self.decoders: dict[int, Any] = {}
        self._watcher: Any = None
        self._release: weakref.finalize | None = None
        self.waiting: dict[int, _Waiting] = {}
        self._watchdog: Any = None
        #: CLOCK_REALTIME - perf_counter, to move kernel timestamps onto perf_counter's clock
        self._clock_offset = clock_offset()
        #: histogram of read lag (our read - kernel arrival): index = 0.1 ms buckets, last = 1 s or more (int64
        #: counters the read loop adds to in place)
        self.read_lag = array("q", bytes(8 * LAG_BUCKETS))
        #: every stretch of loop work between two looks at the sockets (watched once the epoll set is open)
        self.stalls = StallClock()
        #: :meth:`yield_to_reads` reads once this long has passed since the sockets were last looked at
        self.read_every_s = READ_EVERY_S
        self._reading = False
        self._idle_gate = _idle_gate()

    @property
    def uses_epoll(self) -> bool:
        return self._epoll_type is not None

    @property
    def clock_offset(self) -> float:
        """CLOCK_REALTIME - perf_counter: moves a kernel timestamp onto perf_counter's clock."""
        return self._clock_offset

    @clock_offset.setter
    def clock_offset(self, value: float) -> None:
        self._clock_offset = value
        if self._loop is not None:
            self._loop.clock_offset = value

    def read(self, conn: Connection, parser: ResponseParser) -> None:
        """Block the calling greenlet until ``parser`` has a complete response from ``conn``.

        Raises what the parser raised, :class:`~llmload.client.transport.errors.ReadTimeout` or
        ``RequestTimeout`` from the watchdog, or the raw ``OSError`` of a failed read.
        """
        if conn.tls or self._epoll_type is None:
            read_directly(conn, parser)
            return
        import gevent
        from gevent.event import AsyncResult

        if self.ep is None:
            self._open()
        fd = conn.sock.fileno()
        result = AsyncResult()
        now = perf_counter()
        if conn.cancel_at and now >= conn.cancel_at:
            raise cancelled(parser.resp)
        self.waiting[fd] = _Waiting(conn, parser, result)
        decoder = parser.decoder
        decoder.stamped = conn.stamped
        decoder.sock = conn.raw
        self.decoders[fd] = decoder
        conn.deadline = now + conn.timeout
        timer = None
        try:
            self.ep.register(fd, select.EPOLLIN | select.EPOLLRDHUP)
            if self._watchdog is None or self._watchdog.dead:
                self._watchdog = gevent.spawn(_watch, weakref.ref(self))
            if conn.cancel_at:
                # to the moment, not the watchdog's quarter second: a cancel time is part of the workload
                timer = gevent.get_hub().loop.timer(conn.cancel_at - now)
                timer.start(self._cancel, fd)
            result.get()
        finally:
            if timer is not None:
                timer.close()
            self._detach(fd)

    def yield_to_reads(self) -> None:
        """Give the reads a turn: client work (parsing a finished stream, a request's end, a send) calls this
        between its pieces, from any greenlet. When the sockets have not been looked at for
        :attr:`read_every_s`, every ready one is read now, in the caller's greenlet, with no switch.

        Why: gevent runs queued greenlets one after another (it looks at the clock only every 50 of them) and
        wakes every idle-waiter in one go, so a batch of streams ending together kept the loop from polling for
        10-30 ms; a read that late merges two chunks under one timestamp (docs/design.md, "Transport").
        """
        if self.ep is None or self._reading:
            return
        if perf_counter() - self.stalls.last_look >= self.read_every_s:
            self._on_ready(yielded=True)

    def idle_turn(self, max_wait_s: float = IDLE_WAIT_S) -> None:
        """Wait for a moment when the loop has nothing else to do, at most ``max_wait_s``, one greenlet at a time.

        For client work that may wait (parsing a finished stream): reads, sends and timers go first. One at a
        time because gevent wakes every idle-waiter in the same loop iteration; the bound because a loop busy
        for longer than that has more work than idle moments, and the waiting work must still get done.
        """
        import gevent

        with self._idle_gate:  # noqa: SIM117 (the bound is on the idle wait, not on waiting for the gate)
            with gevent.Timeout(max_wait_s, False):
                gevent.idle()

    def close(self) -> None:
        """Release the epoll set; reads still in flight fail as :class:`TransportError` (a disconnect)."""
        for fd, w in list(self.waiting.items()):
            self._fail(fd, w, TransportError("stopped reading: the reactor was closed", w.parser.resp))
        if self._release is not None:
            self._release()
        self._release = self.ep = self._watcher = self._loop = None

    def read_lag_percentile(self, p: float) -> float | None:
        """The p-th percentile of how late arriving data was read, in ms (None: no timestamped reads); the
        one histogram rule of every live path (:func:`llmload.metrics.percentiles.rank_bucket`)."""
        from llmload.metrics.percentiles import rank_bucket

        bucket = rank_bucket(self.read_lag, p)
        return None if bucket is None else bucket / 10.0

    def reset_read_lag(self) -> None:
        self.read_lag[:] = array("q", bytes(8 * LAG_BUCKETS))

    def _open(self) -> None:
        import gevent

        # gevent runs queued greenlets for up to this long before it polls for I/O again; when a batch of
        # streams ends together, starting their successors can take longer than an inter-token gap
        gevent.setswitchinterval(min(gevent.getswitchinterval(), SWITCH_INTERVAL_S))
        assert self._epoll_type is not None
        ep = self._epoll_type()
        # started once and stopped only on release (re-arming an io watcher after a stop can miss a wake-up);
        # unref'd so it does not keep an otherwise finished loop alive; it holds the reactor only weakly, so
        # an unused reactor is collected and its epoll set released
        loop = gevent.get_hub().loop
        watcher = loop.io(ep.fileno(), 1, ref=False)
        watcher.start(_on_ready, weakref.ref(self))
        self.stalls.start(loop)
        self.ep, self._watcher = ep, watcher
        assert self.reader.ReadLoop is not None  # there is no epoll type without one
        self._loop = self.reader.ReadLoop(ep, self.read_lag, self._clock_offset)
        self._release = weakref.finalize(self, _release, watcher, ep, self.stalls)
        self._release.atexit = False  # at exit the hub may be gone; the process frees the fd anyway

    def _on_ready(self, yielded: bool = False) -> None:
        """Runs in the hub (no greenlet switch) whenever the epoll set has ready sockets, or in a greenlet that
        yields to the reads: read them all.

        Everything here is non-blocking; live ``on_lines`` listeners run here too and must not block.
        """
        began = perf_counter()
        if yielded:
            self.stalls.looked(began)  # after libev's own poll its check watcher has marked the look
        self._reading = True
        try:
            self._read_ready()
        finally:
            self._reading = False
            self.stalls.reading(perf_counter() - began)

    def _read_ready(self) -> None:
        """One call of the reader's read loop reads every ready socket; act on what it reports."""
        waiting = self.waiting
        for fd, status, t, first, err in self._loop.read_ready(self.decoders):
            w = waiting.get(fd)
            if w is None:
                continue
            if status == OSERROR:
                self._fail(fd, w, OSError(err, os.strerror(err)))  # the pool maps it, knowing what had arrived
                continue
            parser = w.parser
            try:
                if status == EOF:
                    parser.eof(t)
                    self._complete(fd, w)
                elif parser.handle(status, t, first):
                    self._complete(fd, w)
            except TransportError as exc:
                self._fail(fd, w, exc)
            except Exception as exc:  # a live listener's bug fails its own request, never the reactor
                error = ListenerError(f"{type(exc).__name__} in a stream listener: {exc}", parser.resp)
                error.__cause__ = exc
                self._fail(fd, w, error)

    def _cancel(self, fd: int) -> None:
        """The cancel time of the request reading ``fd`` came: fail it as :class:`Cancelled` (the pool closes
        the connection, which is how the server learns of it)."""
        w = self.waiting.get(fd)
        if w is not None:
            self._fail(fd, w, cancelled(w.parser.resp))

    def _complete(self, fd: int, w: _Waiting) -> None:
        self._detach(fd)
        w.result.set(None)

    def _fail(self, fd: int, w: _Waiting, exc: BaseException) -> None:
        self._detach(fd)
        w.result.set_exception(exc)

    def _detach(self, fd: int) -> None:
        self.decoders.pop(fd, None)
        if self.waiting.pop(fd, None) is not None and self.ep is not None:
            try:
                self.ep.unregister(fd)
            except (OSError, ValueError):
                pass

    def _check_timeouts(self) -> None:
        """Fail requests that received nothing for their read timeout, or ran past their request timeout."""
        self.clock_offset = clock_offset()
        now = perf_counter()
        for fd, w in list(self.waiting.items()):
            conn = w.conn
            if conn.request_deadline and now > conn.request_deadline:
                self._fail(fd, w, request_timed_out(w.parser.resp))
            elif conn.deadline and now > max(conn.deadline, w.parser.last_read + conn.timeout):
                self._fail(fd, w, read_timed_out(conn.timeout, w.parser.resp))


def _watch(ref: weakref.ReferenceType[Reactor]) -> None:
    """The watchdog: checks a reactor's timeouts every :data:`WATCH_INTERVAL_S` while it has requests (for
    all at once, so a limit may be exceeded by that much); it holds the reactor only weakly, between checks."""
    import gevent

    while True:
        gevent.sleep(WATCH_INTERVAL_S)
        reactor = ref()
        if reactor is None:
            return
        if not reactor.waiting:
            reactor._watchdog = None
            return
        reactor._check_timeouts()
        del reactor


def read_directly(conn: Connection, parser: ResponseParser) -> None:
    """Read ``conn`` in the calling greenlet until ``parser`` has a complete response (TLS, or no epoll).

    The read timeout is the socket's timeout: the ``TimeoutError`` it raises goes up as it is, like every
    other socket error.
    """
    recv = conn.sock.recv
    try:
        while True:
            timeout = conn.timeout
            if conn.request_deadline:
                left = conn.request_deadline - perf_counter()
                if left <= 0:
                    raise request_timed_out(parser.resp)
                timeout = min(timeout, left)
            if conn.cancel_at:
                left = conn.cancel_at - perf_counter()
                if left <= 0:
                    raise cancelled(parser.resp)
                timeout = min(timeout, left)
            conn.sock.settimeout(timeout)
            chunk = recv(RECV_SIZE)
            t = perf_counter()
            if not chunk:
                parser.eof(t)
                return
            if parser.feed(chunk, t):
                return
    finally:
        conn.sock.settimeout(None)


def _idle_gate() -> Any:
    from gevent.lock import Semaphore

    return Semaphore(1)


def _on_ready(ref: weakref.ReferenceType[Reactor]) -> None:
    reactor = ref()
    if reactor is not None:
        reactor._on_ready()


def _release(watcher: Any, ep: Any, stalls: StallClock) -> None:
    stalls.stop()
    watcher.stop()
    watcher.close()
    ep.close()


def _epoll_type() -> Any:
    """The unpatched ``select.epoll``, or None where there is none."""
    try:
        from gevent.monkey import get_original

        return get_original("select", "epoll")
    except (ImportError, AttributeError):
        return getattr(select, "epoll", None)
