"""Open-loop dispatch: each request is sent at its scheduled time in its own greenlet.

Send times are fixed in advance (no coordinated omission). With ``max_concurrency`` a request first waits
for a free slot; that wait is its queue time (``start - intended_send``). The gap between the intended send
time and the moment the dispatcher actually released the request is its *schedule lag*: it grows only when
the client itself falls behind.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from time import perf_counter

import gevent
from gevent import GreenletExit
from gevent.event import Event
from gevent.lock import BoundedSemaphore
from gevent.pool import Group

from llmload.datasets.base import SampleRequest
from llmload.failures import CUT_OFF
from llmload.records import RequestRecord

#: the first send happens this long after dispatch starts, so set-up work does not count as lag
LEAD_S = 0.02


@dataclass
class DispatchResult:
    records: list[RequestRecord] = field(default_factory=list)
    schedule_lags_s: list[float] = field(default_factory=list)
    start: float = 0.0
    end: float = 0.0

    @property
    def duration(self) -> float:
        return self.end - self.start


def run_open_loop(
    new_record: Callable[[SampleRequest, float | None], RequestRecord],
    send: Callable[[SampleRequest, float | None, RequestRecord], RequestRecord],
    samples: Sequence[SampleRequest],
    offsets: Sequence[float],
    *,
    max_concurrency: int | None = None,
    stop_event: Event | None = None,
    start_at: float | None = None,
    on_dispatch: Callable[[int], None] | None = None,
    on_record: Callable[[RequestRecord], None] | None = None,
    stop_timeout: float = 0.0,
    skip: Callable[[int], bool] | None = None,
    cut_event: Event | None = None,
    keep_records: bool = True,
) -> DispatchResult:
    """Send ``samples[i]`` at ``start + offsets[i]``; returns when every request has finished.

    ``skip(i)``, asked when request ``i`` is due, drops it (a distributed master moved it elsewhere).

    ``start_at`` is the perf_counter time of offset 0 (default: now + ``LEAD_S``). ``on_dispatch(i)`` runs as
    request ``i`` is released, ``on_record(record)`` as it ends. When ``stop_event`` is set, dispatching stops,
    requests in flight get ``stop_timeout`` seconds to finish (until ``cut_event`` is set), and the rest are cut
    off (recorded as such). ``keep_records=False`` leaves ``result.records`` empty (a worker ships each record
    through ``on_record`` and need not hold a second copy for the whole run).
    """
    result = DispatchResult()
    slots = BoundedSemaphore(max_concurrency) if max_concurrency else None
    group = Group()

    def one(sample: SampleRequest, intended: float, record: RequestRecord) -> None:
        acquired = False
        try:
            if slots is not None:
                slots.acquire()
                acquired = True
            send(sample, intended, record)
        except GreenletExit:
            if not record.cut_off:  # killed while waiting for a slot, before send() began
                record.cut_off = True
                record.success = False
                record.failure_kind = CUT_OFF
                record.error = "cut off: the run was stopped before this request was sent"
            raise
        finally:
            if keep_records:
                record.compact()
                result.records.append(record)
            if on_record is not None:
                on_record(record)
            if acquired:
                slots.release()

    start = perf_counter() + LEAD_S if start_at is None else start_at
    result.start = start
    for i, (sample, offset) in enumerate(zip(samples, offsets, strict=True)):
        intended = start + float(offset)
        delay = intended - perf_counter()
        if stop_event is not None:
            if stop_event.wait(delay) if delay > 0 else stop_event.is_set():
                break
        elif delay > 0:
            gevent.sleep(delay)
        if skip is not None and skip(i):
            continue
        record = new_record(sample, intended)
        record.dispatched_at = perf_counter()
        result.schedule_lags_s.append(max(0.0, record.dispatched_at - intended))
        if on_dispatch is not None:
            on_dispatch(i)
        group.spawn(one, sample, intended, record)
    if stop_event is not None:
        drain(group, stop_event, stop_timeout, cut_event)
    else:
        group.join()
    result.end = perf_counter()
    return result


def run_closed_loop(
    new_record: Callable[[SampleRequest, float | None], RequestRecord],
    send: Callable[[SampleRequest, float | None, RequestRecord], RequestRecord],
    samples: Sequence[SampleRequest],
    users: int,
    think: Callable[[], float],
    *,
    stop_event: Event | None = None,
    stop_timeout: float = 0.0,
    cut_event: Event | None = None,
) -> DispatchResult:
    """``users`` loops that each take the next sample, stream it, then pause ``think()`` seconds."""
    result = DispatchResult()
    queue = list(reversed(samples))
    stop = stop_event or Event()

    def loop() -> None:
        while queue and not stop.is_set():
            sample = queue.pop()
            record = new_record(sample, None)
            try:
                send(sample, None, record)
            except GreenletExit:
                if not record.cut_off:
                    record.cut_off = True
                    record.success = False
                    record.failure_kind = CUT_OFF
                    record.error = "cut off: the run was stopped before this request was sent"
                raise
            finally:
                record.compact()
                result.records.append(record)
            pause = think()
            if pause > 0 and queue:
                stop.wait(pause)

    result.start = perf_counter()
    group = Group()
    for _ in range(users):
        group.spawn(loop)
    drain(group, stop, stop_timeout, cut_event)
    result.end = perf_counter()
    return result


def drain(group: Group, stop_event: Event, stop_timeout: float, cut_event: Event | None = None) -> None:
    """Wait for ``group`` to finish; once ``stop_event`` is set, give it ``stop_timeout`` seconds (less if
    ``cut_event`` is set meanwhile: a second Ctrl-C), then kill what is left (those requests are cut off)."""
    while group and not stop_event.is_set():
        stop_event.wait(0.1)
    deadline = perf_counter() + stop_timeout
    while group and not (cut_event is not None and cut_event.is_set()):
        left = deadline - perf_counter()
        if left <= 0:
            break
        group.join(timeout=min(left, 0.1))
    group.kill(block=True)
