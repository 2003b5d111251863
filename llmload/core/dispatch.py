"""The one dispatcher: open loop (each request sent at its scheduled time, in its own greenlet) and closed loop
(users that send, wait for the answer, think, repeat), the concurrency cap and its queue, and stop/cut-off
accounting — for ``llmload bench``, its workers and the Locust plugin alike (docs/design.md, "Dispatcher").

Send times are fixed in advance (no coordinated omission). With ``max_concurrency`` a request first waits for a
free slot; that wait is its queue time (``start - intended_send``). The gap between the intended send time and the
moment the dispatcher released the request is its *schedule lag*: it grows only when the client falls behind.

Accounting: every request of a run ends up in exactly one of completed, failed, cut off (in flight or queued when
the run stopped: a record with ``failure_kind == "cut_off"``) or not sent (never released: no record).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from time import perf_counter
from typing import Protocol

import gevent
from gevent import GreenletExit
from gevent.event import Event
from gevent.lock import BoundedSemaphore
from gevent.pool import Group

from llmload.client.failures import CUT_OFF
from llmload.client.records import RequestRecord
from llmload.core.conversation import deliver
from llmload.core.schedule import LiveSchedule, Scheduled
from llmload.core.sink import RecordSink

#: the first send happens this long after dispatch starts, so set-up work does not count as lag
LEAD_S = 0.02
#: requests released at once (all due) between two turns for the rest of the loop
BURST_SLICE = 32
NOT_SENT_MESSAGE = "cut off: the run was stopped before this request was sent"


class Sender(Protocol):
    """What sends one request (an :class:`~llmload.client.users.LLMUser`). It may also have ``not_sent(record)``,
    called for a request the run's end caught while it waited for a slot (its ``send`` never ran)."""

    def new_record(self, request: Scheduled, intended_send: float | None = None) -> RequestRecord: ...

    def send(self, request: Scheduled, intended_send: float | None = None,
             record: RequestRecord | None = None,
             on_response_end: Callable[[], None] | None = None) -> RequestRecord: ...


@dataclass
class StopControl:
    """How a run stops: ``stop`` ends dispatching and gives requests in flight ``stop_timeout`` seconds;
    ``cut`` (a second Ctrl-C, a forced stop) cuts them off at once."""

    stop: Event = field(default_factory=Event)
    cut: Event = field(default_factory=Event)
    stop_timeout: float = 0.0


@dataclass
class Tally:
    """What one dispatcher did: requests released, their schedule lags, and when it ran."""

    dispatched: int = 0
    #: one a request released (8 bytes each: a soak's millions stay small)
    schedule_lags_s: array[float] = field(default_factory=lambda: array("d"))
    start: float = 0.0
    end: float = 0.0

    @property
    def duration(self) -> float:
        return self.end - self.start


def mark_cut_off(record: RequestRecord) -> None:
    """A request the run's end caught before its send began (waiting for a slot, or for a user)."""
    if not record.cut_off:
        record.cut_off = True
        record.success = False
        record.failure_kind = CUT_OFF
        record.error = NOT_SENT_MESSAGE


class _Slots:
    """The concurrency cap: a request holds a slot from before its send until its response has ended (its
    events are parsed after that, while the next request already goes: the closed loop has no gap for the
    client's own work); a conversation from its first turn to its last. Requests still waiting for a slot when
    the run stops are cut off at once (:meth:`cut_waiting`): a stop ends sending, and they never reached the
    server."""

    def __init__(self, limit: int | None) -> None:
        self._sem = BoundedSemaphore(limit) if limit else None
        self._waiting: set[gevent.Greenlet] = set()

    def run(self, sender: Sender, request: Scheduled, record: RequestRecord, sink: RecordSink, stop: Event,
            on_turn: Callable[[RequestRecord], None] | None = None) -> None:
        """Wait for a slot, then send the request (or replay the conversation) while holding it: a
        conversation holds its slot from its first turn to its last, think times included."""
        acquired = False
        try:
            if self._sem is not None:
                me = gevent.getcurrent()
                self._waiting.add(me)
                try:
                    self._sem.acquire()
                finally:
                    self._waiting.discard(me)
                acquired = True
        except GreenletExit:
            # killed while waiting for a slot, before send() began
            mark_cut_off(record)
            not_sent = getattr(sender, "not_sent", None)
            if not_sent is not None:
                not_sent(record)
            sink.add(record)
            raise
        sem = self._sem if acquired else None
        held = sem is not None

        def release() -> None:
            nonlocal held
            if held:
                held = False
                sem.release()  # type: ignore[union-attr]

        try:
            deliver(sender, request, record, sink, stop, on_turn, release if held else None)
        finally:
            release()

    def cut_waiting(self) -> None:
        """Cut off every request still queued for a slot."""
        gevent.killall(list(self._waiting), block=True)


def run_open_loop(
    requests: Iterable[Scheduled],
    sender_for: Callable[[Scheduled], Sender],
    sink: RecordSink,
    *,
    max_concurrency: int | None = None,
    control: StopControl | None = None,
    start_at: float | None = None,
    skip: Callable[[Scheduled], bool] | None = None,
    on_dispatch: Callable[[Scheduled], None] | None = None,
) -> Tally:
    """Send each request at ``start + request.offset``; returns when every released request has ended.

    ``start_at`` is the perf_counter time of offset 0 (default: now + ``LEAD_S``). ``skip(request)``, asked when it
    is due, drops it (a distributed master moved it elsewhere). Once ``control.stop`` is set nothing more is
    released and :func:`drain` ends what is in flight.
    """
    loop = _OpenLoop(sender_for, sink, max_concurrency, control, start_at)
    due_at_once = 0
    for request in requests:
        intended = loop.start + request.offset
        delay = intended - perf_counter()
        if delay > 0:
            due_at_once = 0
            if loop.control.stop.wait(delay):
                break
        else:
            due_at_once += 1
            if not due_at_once % BURST_SLICE:
                gevent.sleep(0)  # a burst (rate inf, a late schedule) lets the loop read between its slices
            if loop.control.stop.is_set():
                break
        if skip is not None and skip(request):
            continue
        loop.release(request, intended, on_dispatch)
    return loop.finish()


class _OpenLoop:
    """What both open loops share: the cap, the group of request greenlets, the tally, the start time."""

    def __init__(self, sender_for: Callable[[Scheduled], Sender], sink: RecordSink, max_concurrency: int | None,
                 control: StopControl | None, start_at: float | None) -> None:
        self.sender_for = sender_for
        self.sink = sink
        self.control = control or StopControl()
        self.slots = _Slots(max_concurrency)
        self.group = Group()
        self.start = perf_counter() + LEAD_S if start_at is None else start_at
        self.tally = Tally(start=self.start)

    def release(self, request: Scheduled, intended: float,
                on_dispatch: Callable[[Scheduled], None] | None = None) -> None:
        """Send ``request`` now, in its own greenlet (after a slot, with a cap)."""
        sender = self.sender_for(request)
        record = sender.new_record(request, intended)
        record.dispatched_at = perf_counter()
        self._count_lag(record)
        self.tally.dispatched += 1
        if on_dispatch is not None:
            on_dispatch(request)
        self.group.spawn(self.slots.run, sender, request, record, self.sink, self.control.stop, self._later_turn)

    def _later_turn(self, record: RequestRecord) -> None:
        """A conversation's next turn was released: it counts as dispatched, with its own schedule lag."""
        self.tally.dispatched += 1
        self._count_lag(record)

    def _count_lag(self, record: RequestRecord) -> None:
        """The record's schedule lag (its one definition: ``metrics.definitions.schedule_lag_s``) is the
        client's, when it has one."""
        lag = record.schedule_lag
        if lag is not None:
            self.tally.schedule_lags_s.append(lag)

    def finish(self) -> Tally:
        drain(self.group, self.control, self.slots.cut_waiting)
        self.tally.end = perf_counter()
        return self.tally


def run_live_open_loop(
    schedule: LiveSchedule,
    sender_for: Callable[[Scheduled], Sender],
    sink: RecordSink,
    *,
    changed: Event,
    mine: Callable[[int], bool] = lambda _i: True,
    max_concurrency: int | None = None,
    control: StopControl | None = None,
    start_at: float | None = None,
) -> Tally:
    """The open loop on a steerable :class:`LiveSchedule` until stopped; ``changed`` is set (and cleared here)
    when its rate changed, so the request being waited for is re-timed. ``mine(index)``: this process sends it."""
    loop = _OpenLoop(sender_for, sink, max_concurrency, control, start_at)
    while not loop.control.stop.is_set():
        changed.clear()
        offset = schedule.next_offset()
        delay = 1.0 if offset is None else loop.start + offset - perf_counter()
        if delay > 0:
            gevent.wait([loop.control.stop, changed], timeout=min(delay, 1.0), count=1)
            continue
        assert offset is not None
        request = schedule.take(offset)
        if mine(request.index):
            loop.release(request, loop.start + offset)
    return loop.finish()


class RequestQueue:
    """The closed loop's requests, taken in order by whichever user is free next."""

    def __init__(self, requests: Sequence[Scheduled]) -> None:
        self._requests = list(requests)
        self._next = 0

    def take(self) -> Scheduled | None:
        if self._next >= len(self._requests):
            return None
        request = self._requests[self._next]
        self._next += 1
        return request

    @property
    def taken(self) -> int:
        return self._next

    def __len__(self) -> int:
        return len(self._requests)


class RequestFeed:
    """The open loop's requests when they come in parts (a long distributed run's share, sent as their time
    comes: :mod:`llmload.core.parts`): iterating gives each part's requests in order, then waits for the
    next part, until a part says none follow or ``stop`` is set. A part is dropped once read."""

    def __init__(self, first: Sequence[Scheduled], stop: Event) -> None:
        self._parts: list[Sequence[Scheduled]] = [first]
        self._more = True
        self._arrived = Event()
        self._stop = stop

    def add(self, part: Sequence[Scheduled], more: bool) -> None:
        """The next part; ``more``: others follow it."""
        self._parts.append(part)
        self._more = more
        self._arrived.set()

    def __iter__(self) -> Iterator[Scheduled]:
        while True:
            while self._parts:
                yield from self._parts.pop(0)
            if not self._more or self._stop.is_set():
                return
            self._arrived.clear()
            if not self._parts:
                gevent.wait([self._arrived, self._stop], count=1)


class CyclingQueue(RequestQueue):
    """The web UI's closed loop: after the last request start again, ids suffixed ``#k`` for the k-th lap."""

    def take(self) -> Scheduled | None:
        if not self._requests:
            return None
        lap, n = divmod(self._next, len(self._requests))
        base = self._requests[n]
        self._next += 1
        if lap == 0:
            return base
        return Scheduled(self._next - 1, 0.0, base.sample, f"{base.request_id}#{lap}", base.user_class)


def closed_loop_step(queue: RequestQueue, sender: Sender, sink: RecordSink,
                     on_dispatch: Callable[[Scheduled], None] | None = None, stop: Event | None = None,
                     on_turn: Callable[[RequestRecord], None] | None = None) -> bool:
    """One user's turn: take the next request and stream it, or replay the next conversation (False: the queue
    is empty). A kill while the request is in flight or about to go out records it as cut off."""
    request = queue.take()
    if request is None:
        return False
    if on_dispatch is not None:
        on_dispatch(request)
    record = sender.new_record(request, None)
    try:
        deliver(sender, request, record, sink, stop or Event(), on_turn)
    except GreenletExit:
        if not record.cut_off and not record.success and not record.error:
            mark_cut_off(record)  # killed before send() began: deliver put it in the sink as it was
        raise
    return True


def run_closed_loop(
    queue: RequestQueue,
    sender_for: Callable[[int], Sender],
    users: int,
    think: Callable[[], float],
    sink: RecordSink,
    *,
    control: StopControl | None = None,
    on_dispatch: Callable[[Scheduled], None] | None = None,
) -> Tally:
    """``users`` loops that each take the next request, stream it, then pause ``think()`` seconds."""
    control = control or StopControl()
    tally = Tally(start=perf_counter())
    later_turns = [0]

    def count_turn(_record: RequestRecord) -> None:
        later_turns[0] += 1

    def loop(user: int) -> None:
        sender = sender_for(user)
        while not control.stop.is_set() and closed_loop_step(queue, sender, sink, on_dispatch, control.stop,
                                                              count_turn):
            pause = think()
            if pause > 0 and queue.taken < len(queue):
                control.stop.wait(pause)

    group = Group()
    for user in range(users):
        group.spawn(loop, user)
    drain(group, control)
    tally.dispatched = queue.taken + later_turns[0]
    tally.end = perf_counter()
    return tally


def drain(group: Group, control: StopControl, on_stop: Callable[[], None] | None = None) -> None:
    """Wait for ``group`` to finish; once ``control.stop`` is set (and ``on_stop`` has run) give it
    ``control.stop_timeout`` seconds (less if ``control.cut`` is set meanwhile), then kill what is left (those
    requests are cut off)."""
    while group and not control.stop.is_set():
        control.stop.wait(0.1)
    if group and on_stop is not None:
        on_stop()
    deadline = perf_counter() + control.stop_timeout
    while group and not control.cut.is_set():
        left = deadline - perf_counter()
        if left <= 0:
            break
        group.join(timeout=min(left, 0.1))
    group.kill(block=True)
