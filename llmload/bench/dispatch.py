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
) -> DispatchResult:
    """Send ``samples[i]`` at ``start + offsets[i]``; returns when every request has finished."""
    result = DispatchResult()
    slots = BoundedSemaphore(max_concurrency) if max_concurrency else None
    group = Group()

    def one(sample: SampleRequest, intended: float) -> None:
        record = new_record(sample, intended)
        acquired = False
        try:
            if slots is not None:
                slots.acquire()
                acquired = True
            send(sample, intended, record)
        except GreenletExit:
            record.cut_off = True
            record.success = False
            record.error = "cut off: the run was stopped while this request was in flight"
            raise
        finally:
            result.records.append(record)
            if acquired:
                slots.release()

    start = perf_counter() + LEAD_S
    result.start = start
    for sample, offset in zip(samples, offsets, strict=True):
        if stop_event is not None and stop_event.is_set():
            break
        intended = start + float(offset)
        delay = intended - perf_counter()
        if delay > 0:
            gevent.sleep(delay)
        result.schedule_lags_s.append(max(0.0, perf_counter() - intended))
        group.spawn(one, sample, intended)
    if stop_event is not None:
        # wait for the in-flight requests, or cut them off when asked to stop
        while group and not stop_event.is_set():
            stop_event.wait(0.1)
        group.kill(block=True)
    else:
        group.join()
    result.end = perf_counter()
    return result
