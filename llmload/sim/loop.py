"""A minimal epoll event loop with absolute-deadline timers on a timerfd.

``epoll_wait`` only takes millisecond timeouts (CPython rounds up), which alone would make every chunk up to
1 ms late. A timerfd armed with an absolute CLOCK_MONOTONIC deadline wakes the loop within microseconds.
Python 3.13 has ``os.timerfd_create``; on older versions we call libc through ctypes.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import time
from collections.abc import Callable
from heapq import heappop, heappush
from itertools import count
from typing import Any

_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = os.O_CLOEXEC
_TFD_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = (("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long))


class _Itimerspec(ctypes.Structure):
    _fields_ = (("it_interval", _Timespec), ("it_value", _Timespec))


#: how early a timer may run to share a wake-up with an earlier one
EARLY_S = 50e-6


def _noop(_arg: Any, _deadline: float) -> None:
    pass


class TimerFD:
    """A CLOCK_MONOTONIC timerfd armed with absolute deadlines (``time.monotonic()`` seconds)."""

    def __init__(self) -> None:
        if hasattr(os, "timerfd_create"):
            self.fd = os.timerfd_create(time.CLOCK_MONOTONIC, flags=os.TFD_NONBLOCK | os.TFD_CLOEXEC)
            self._set = self._set_os
        else:
            libc = ctypes.CDLL(None, use_errno=True)
            self._settime = libc.timerfd_settime
            self._settime.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Itimerspec), ctypes.c_void_p)
            fd = libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
            if fd < 0:
                raise OSError(ctypes.get_errno(), "timerfd_create failed")
            self.fd = fd
            self._spec = _Itimerspec()
            self._set = self._set_ctypes

    def _set_os(self, deadline: float) -> None:
        os.timerfd_settime(self.fd, flags=os.TFD_TIMER_ABSTIME, initial=max(deadline, 1e-9))

    def _set_ctypes(self, deadline: float) -> None:
        sec = int(deadline)
        spec = self._spec
        spec.it_value.tv_sec = sec
        spec.it_value.tv_nsec = max(1, int((deadline - sec) * 1e9))
        self._settime(self.fd, _TFD_TIMER_ABSTIME, ctypes.byref(spec), None)

    def arm(self, deadline: float) -> None:
        self._set(deadline)

    def clear(self) -> None:
        try:
            os.read(self.fd, 8)
        except BlockingIOError:
            pass

    def close(self) -> None:
        os.close(self.fd)


def reduce_timer_slack() -> None:
    """Ask Linux for 1 ns timer slack (default 50 µs) so timer wake-ups land where they are due."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(29, 1, 0, 0, 0)  # PR_SET_TIMERSLACK
    except (OSError, AttributeError):
        pass


class EventLoop:
    """File-descriptor callbacks plus a heap of absolute-deadline callbacks."""

    def __init__(self) -> None:
        reduce_timer_slack()
        self.epoll = select.epoll()
        self.handlers: dict[int, Callable[[int], None]] = {}
        self.timers: list[tuple[float, int, Callable[[Any, float], None], Any]] = []
        self._seq = count()
        self._timerfd = TimerFD()
        self._armed = 0.0
        # Edge-triggered: re-arming resets the expiry count, so the fd never needs to be read.
        self.epoll.register(self._timerfd.fd, select.EPOLLIN | select.EPOLLET)
        self.running = False
        self._stop_requested = False
        #: send lateness histogram: index = microseconds late // 10, last bucket = 100 ms or more
        self.lateness = [0] * 10_001
        #: the pipe a signal writes to (:meth:`wake_on_signals`), and the wakeup fd it replaced
        self._wakeup: tuple[int, int, int] | None = None

    def register(self, fd: int, events: int, handler: Callable[[int], None]) -> None:
        self.handlers[fd] = handler
        self.epoll.register(fd, events)

    def modify(self, fd: int, events: int) -> None:
        self.epoll.modify(fd, events)

    def unregister(self, fd: int) -> None:
        if self.handlers.pop(fd, None) is not None:
            try:
                self.epoll.unregister(fd)
            except (OSError, ValueError):
                pass

    def call_at(self, deadline: float, callback: Callable[[Any, float], None], arg: Any = None) -> None:
        """Run ``callback(arg, deadline)`` at ``deadline`` (``time.monotonic()`` seconds).

        Timers due within ``EARLY_S`` of a wake-up run in that wake-up, so nearby deadlines share one.
        """
        heappush(self.timers, (deadline, next(self._seq), callback, arg))

    def reset_lateness(self) -> None:
        """Count lateness afresh, in the same list: the fixed-timing tick holds it (``Streaming._lateness``)."""
        self.lateness[:] = [0] * len(self.lateness)

    def record_lateness(self, seconds: float) -> None:
        """Count a send ``seconds`` after its deadline (early sends count as on time)."""
        i = int(seconds * 100_000)
        self.lateness[0 if i < 0 else (i if i < 10_000 else 10_000)] += 1

    def run(self) -> None:
        # Set first, then check: a stop() from a signal handler between the two lines still wins (a single
        # ``running = not stop_requested`` could be interrupted after the read and overwrite the stop).
        self.running = True
        if self._stop_requested:
            self.running = False
        timers = self.timers
        handlers = self.handlers
        poll = self.epoll.poll
        tfd = self._timerfd.fd
        monotonic = time.monotonic
        while self.running:
            if timers:
                first = timers[0][0]
                if first != self._armed:
                    self._timerfd.arm(first)
                    self._armed = first
            if not self.running:
                # a stop() from a signal handler since the loop's check armed the timer to wake at once, and the
                # lines above may have re-armed it for a far deadline: without this the stop waits for it
                break
            for fd, ev in poll():
                if fd == tfd:
                    self._armed = 0.0
                    continue
                handler = handlers.get(fd)
                if handler is not None:
                    handler(ev)
            if timers:
                horizon = monotonic() + EARLY_S
                while timers and timers[0][0] <= horizon:
                    deadline, _, callback, arg = heappop(timers)
                    callback(arg, deadline)
                    if not timers or timers[0][0] > horizon:
                        horizon = monotonic() + EARLY_S

    def stop(self) -> None:
        """Stop the loop; safe from a signal handler, also before :meth:`run` starts."""
        self._stop_requested = True
        self.running = False
        # wake the loop
        self.call_at(0.0, _noop)
        self._timerfd.arm(1e-6)
        self._armed = 1e-6

    def wake_on_signals(self) -> None:
        """Make every signal with a Python handler wake :meth:`run`'s poll (main thread only).

        Python runs a handler between bytecodes. A signal that arrives after the loop's last check but before
        ``epoll_wait`` starts (or that another thread takes) does not interrupt the wait, and the handler's
        stop() waits for the next request or timer: on an idle server, forever (seen: ``llmload sim
        --workers 2`` ignoring a SIGTERM sent right after "listening", about 1 run in 50 under load). With
        ``signal.set_wakeup_fd`` the C-level handler also writes a byte to a pipe this loop polls.
        """
        read_fd, write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        self._wakeup = (read_fd, write_fd, previous)
        self.register(read_fd, select.EPOLLIN, self._drain_wakeup)

    def _drain_wakeup(self, _events: int) -> None:
        """The wakeup pipe is readable: empty it; the handler itself runs at the loop's next bytecodes."""
        assert self._wakeup is not None
        try:
            while os.read(self._wakeup[0], 4096):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        if self._wakeup is not None:
            read_fd, write_fd, previous = self._wakeup
            self._wakeup = None
            self.unregister(read_fd)
            signal.set_wakeup_fd(previous)
            os.close(read_fd)
            os.close(write_fd)
        self.epoll.close()
        self._timerfd.close()
