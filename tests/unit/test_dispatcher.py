"""The one dispatcher, in-process with a fake sender (a gevent sleep per request): send order and times, the
concurrency cap and its queue, closed-loop users, and that a stop accounts for every request exactly once."""

from __future__ import annotations

from collections.abc import Callable
from time import perf_counter

import gevent
import pytest
from gevent.event import Event

from llmload.client.records import RequestRecord
from llmload.core.dispatch import (
    RequestQueue,
    StopControl,
    closed_loop_step,
    run_closed_loop,
    run_live_open_loop,
    run_open_loop,
)
from llmload.core.schedule import LiveSchedule, Schedule, Scheduled, ScheduleSpec
from llmload.core.sink import RecordList
from llmload.datasets.base import SampleRequest


class FakeSender:
    """Stands in for an LLM user: each request 'streams' for ``seconds`` and succeeds."""

    def __init__(self, seconds: float = 0.05) -> None:
        self.seconds = seconds
        self.in_flight = 0
        self.most_in_flight = 0
        self.sent: list[str] = []
        self.not_sent_ids: list[str] = []
        #: seconds each request's events take to parse once its response has ended, and when each finished
        self.parse_s = 0.0
        self.parsed: list[tuple[str, float]] = []

    def not_sent(self, record: RequestRecord) -> None:
        self.not_sent_ids.append(record.request_id)

    def new_record(self, request: Scheduled, intended_send: float | None = None) -> RequestRecord:
        return RequestRecord(request_id=request.request_id, intended_send=intended_send)

    def send(self, request: Scheduled, intended_send: float | None = None,
             record: RequestRecord | None = None,
             on_response_end: Callable[[], None] | None = None) -> RequestRecord:
        assert record is not None
        record.start = perf_counter()
        self.sent.append(request.request_id)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            gevent.sleep(self.seconds)
        except gevent.GreenletExit:
            record.cut_off = True
            record.failure_kind = "cut_off"
            raise
        finally:
            self.in_flight -= 1
        record.chunk_times.append(perf_counter())
        if on_response_end is not None:
            on_response_end()
        if self.parse_s:
            gevent.sleep(self.parse_s)  # what a reader does with the events once the response has ended
            self.parsed.append((request.request_id, perf_counter()))
        record.first_token = record.chunk_times[0]
        record.success = True
        return record


def schedule(n: int, rate: float = float("inf")) -> Schedule:
    samples = [SampleRequest(prompt="x", prompt_len=1, expected_output_len=1, request_id=f"q{i}")
               for i in range(n)]
    return Schedule.build(ScheduleSpec(request_rate=rate, constant_rate=rate != float("inf")), samples)


def test_open_loop_sends_every_request_once_at_its_time() -> None:
    sender, sink = FakeSender(0.01), RecordList()
    plan = schedule(10, rate=50.0)  # 20 ms apart
    tally = run_open_loop(plan, lambda _r: sender, sink)
    assert sorted(r.request_id for r in sink.records) == sorted(e.request_id for e in plan)
    assert tally.dispatched == 10 and all(r.success for r in sink.records)
    intended = sorted(r.intended_send for r in sink.records)
    assert intended[-1] - intended[0] == pytest.approx(9 / 50.0, abs=1e-9)
    assert all(lag >= 0 for lag in tally.schedule_lags_s)
    # released no earlier than due (and, on any machine, well within a second of it)
    assert all(0 <= r.dispatched_at - r.intended_send < 1.0 for r in sink.records)


def test_concurrency_cap_queues_and_is_never_exceeded() -> None:
    sender, sink = FakeSender(0.05), RecordList()
    run_open_loop(schedule(12), lambda _r: sender, sink, max_concurrency=3)
    assert sender.most_in_flight == 3
    assert len(sink) == 12 and all(r.success for r in sink.records)


def test_a_slot_is_free_once_the_response_ends_not_once_it_is_parsed() -> None:
    """Closed loop at --max-concurrency 1: the second request goes as soon as the first response has ended,
    while the first one's events are still being parsed (the issue's successor gap)."""
    sender, sink = FakeSender(0.05), RecordList()
    sender.parse_s = 1.0
    run_open_loop(schedule(2), lambda _r: sender, sink, max_concurrency=1)
    first, second = sorted(sink.records, key=lambda r: r.start)
    parsed = dict(sender.parsed)
    assert second.start >= first.chunk_times[-1]  # never two in flight
    assert second.start < parsed[first.request_id] - 0.5  # 1 s of parsing did not hold it back
    assert sender.most_in_flight == 1


def test_stop_accounts_for_every_request() -> None:
    """Stopped mid-run with a cap: in flight and queued requests are cut off, later ones not sent."""
    sender, sink = FakeSender(5.0), RecordList()
    control = StopControl()
    plan = schedule(40, rate=20.0)
    gevent.spawn_later(0.5, control.stop.set)
    tally = run_open_loop(plan, lambda _r: sender, sink, max_concurrency=2, control=control)
    cut = [r for r in sink.records if r.cut_off]
    not_sent = len(plan) - tally.dispatched
    assert len(sink) == tally.dispatched  # one record per released request, none lost
    assert len(cut) == len(sink)  # 5 s requests: none finished
    assert 0 < tally.dispatched < 40 and not_sent > 0
    assert sum(r.success for r in sink.records) + len(cut) + not_sent == len(plan)
    waiting = [r for r in cut if r.start == 0.0]
    assert len(waiting) == tally.dispatched - 2  # two held a slot; the rest were queued


def test_stop_timeout_lets_requests_finish_and_cut_ends_it_early() -> None:
    sender, sink = FakeSender(0.3), RecordList()
    control = StopControl(stop_timeout=10.0)
    gevent.spawn_later(0.05, control.stop.set)
    run_open_loop(schedule(3), lambda _r: sender, sink, control=control)
    assert all(r.success for r in sink.records) and len(sink) == 3

    sender, sink = FakeSender(30.0), RecordList()
    control = StopControl(stop_timeout=60.0)
    gevent.spawn_later(0.05, control.stop.set)
    gevent.spawn_later(0.2, control.cut.set)
    started = perf_counter()
    run_open_loop(schedule(3), lambda _r: sender, sink, control=control)
    assert perf_counter() - started < 20.0  # cut, not the 60 s stop timeout or the 30 s requests
    assert all(r.cut_off for r in sink.records)


def test_skip_drops_requests_and_on_dispatch_sees_the_rest() -> None:
    sender, sink = FakeSender(0.0), RecordList()
    seen: list[int] = []
    run_open_loop(schedule(6), lambda _r: sender, sink, skip=lambda r: r.index % 2 == 1,
                  on_dispatch=lambda r: seen.append(r.index))
    assert seen == [0, 2, 4] and sorted(r.request_id for r in sink.records) == ["q0", "q2", "q4"]


def test_closed_loop_users_take_each_request_once() -> None:
    sender, sink = FakeSender(0.02), RecordList()
    plan = schedule(15)
    tally = run_closed_loop(RequestQueue(plan.entries), lambda _u: sender, 4, lambda: 0.0, sink)
    assert sorted(r.request_id for r in sink.records) == sorted(e.request_id for e in plan)
    assert sender.most_in_flight == 4 and tally.dispatched == 15
    assert all(r.intended_send is None for r in sink.records)


def test_closed_loop_stop_cuts_off_in_flight_and_leaves_the_rest_unsent() -> None:
    sender, sink = FakeSender(5.0), RecordList()
    control = StopControl()
    queue = RequestQueue(schedule(10).entries)
    gevent.spawn_later(0.3, control.stop.set)
    run_closed_loop(queue, lambda _u: sender, 3, lambda: 0.0, sink, control=control)
    assert len(sink) == 3 and all(r.cut_off for r in sink.records)
    assert queue.taken == 3 and len(queue) - queue.taken == 7


def test_closed_loop_step_on_an_empty_queue() -> None:
    assert closed_loop_step(RequestQueue([]), FakeSender(), RecordList()) is False


def test_live_open_loop_follows_rate_changes_and_stops() -> None:
    samples = [SampleRequest(prompt="x", prompt_len=1, expected_output_len=1, request_id=f"q{i}") for i in range(3)]
    live = LiveSchedule(samples, rate=5.0, seed=4)
    sender, sink = FakeSender(0.0), RecordList()
    control, changed = StopControl(), Event()

    def steer() -> None:
        gevent.sleep(0.5)
        live.set_rate(200.0, 0.6)
        changed.set()
        gevent.sleep(1.0)
        control.stop.set()

    gevent.spawn(steer)
    tally = run_live_open_loop(live, lambda _r: sender, sink, changed=changed, control=control)
    assert tally.dispatched == len(sink) and len(sink) > 50  # ~200/s for about a second after the change
    assert len({r.request_id for r in sink.records}) == len(sink)


def test_live_open_loop_sends_only_this_workers_share() -> None:
    samples = [SampleRequest(prompt="x", prompt_len=1, expected_output_len=1) for _ in range(3)]
    ids: list[set[str]] = []
    for k in range(2):
        live = LiveSchedule(samples, rate=100.0, seed=4)
        sender, sink = FakeSender(0.0), RecordList()
        control = StopControl()
        gevent.spawn_later(0.5, control.stop.set)
        run_live_open_loop(live, lambda _r, s=sender: s, sink, changed=Event(),
                           mine=lambda i, k=k: i % 2 == k, control=control)
        ids.append({r.request_id for r in sink.records})
    assert ids[0] and ids[1] and not ids[0] & ids[1]


def test_a_stop_cuts_off_the_queue_at_once_and_lets_in_flight_requests_finish() -> None:
    """--stop-timeout is for requests in flight; those still waiting for a slot never reached the server and
    are cut off when the stop comes."""
    sender, sink = FakeSender(0.5), RecordList()
    control = StopControl(stop_timeout=30.0)
    gevent.spawn_later(0.1, control.stop.set)
    started = perf_counter()
    run_open_loop(schedule(10), lambda _r: sender, sink, max_concurrency=2, control=control)
    assert perf_counter() - started < 10.0  # 0.5 s requests, not 30 s, and not the whole queue
    assert sorted(r.success for r in sink.records) == [False] * 8 + [True] * 2
    assert len(sender.sent) == 2 and all(r.cut_off and r.start == 0.0 for r in sink.records if not r.success)
    # the sender hears of each request cut off in the queue (LLMUser fires request_complete for it)
    assert sorted(sender.not_sent_ids) == sorted(r.request_id for r in sink.records if not r.success)
