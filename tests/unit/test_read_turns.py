"""Reads never wait behind the client's own work (issue 33): the mechanism, seen without timing tolerances.

A batch of streams ending together used to be parsed by as many greenlets, each woken by ``gevent.idle()`` in the
same loop iteration, while the streams that took their slots were being read: the loop did not poll for 10-30 ms,
and 1-2 % of reads merged two chunks (p99 ITL 20-30 ms for a true 10). Real sockets on 127.0.0.1 (wire_server),
a real Reactor and gevent loop; the bounds below count events and loop iterations, not milliseconds.
"""

from __future__ import annotations

import queue
import socket
import threading
from time import perf_counter

import gevent
import pytest
from wire_server import CHUNKED_HEAD, PATIENCE_S, chunk, read_request

from llmload.client.backends import get_backend
from llmload.client.reader import PARSE_SLICE, StreamReader
from llmload.client.records import RequestRecord
from llmload.client.transport import Pool, Reactor
from llmload.client.transport.stalls import StallClock

#: every case on both readers, the compiled one and its Python twin (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("reader")

EVENT = b'data: {"choices":[{"text":"t"}]}'
#: the finished stream's event during whose parsing the other stream's next chunk arrives
ARRIVES_AT = 2 * PARSE_SLICE + 5


def _until(condition, what: str) -> None:
    deadline = perf_counter() + PATIENCE_S
    while not condition():
        assert perf_counter() < deadline, f"gave up waiting for {what}"
        gevent.sleep(0.005)


def test_a_ready_socket_is_read_within_one_slice_of_a_finished_streams_parse(serve) -> None:
    handed: queue.Queue[socket.socket] = queue.Queue()

    def stream_held_open(conn: socket.socket, stop: threading.Event) -> None:
        read_request(conn)
        conn.sendall(CHUNKED_HEAD + chunk(EVENT + b"\n\n"))
        handed.put(conn)
        stop.wait(PATIENCE_S)  # the test writes the rest of this stream itself

    server = serve(stream_held_open)
    reactor = Reactor()
    reactor.read_every_s = 0.0  # every yield reads: the bound is counted in events, whatever the machine's speed
    pool = Pool(server.url, read_timeout=PATIENCE_S, reactor=reactor)
    finished = RequestRecord(success=True)  # the stream that ended; its events are parsed below
    parsed_when_read: list[int] = []  # how far that parse was each time the live stream's lines were read

    def live_stream_read(_resp, _first: int) -> None:
        parsed_when_read.append(len(finished.chunk_times))

    live = gevent.spawn(pool.request, "POST", "/v1/completions", {}, b"{}", live_stream_read)
    _until(lambda: parsed_when_read, "the live stream's first event")  # gevent runs the request meanwhile
    # the server's thread hands the socket over just after sending: the client may have read that event first
    conn = handed.get(timeout=PATIENCE_S)

    vllm = get_backend("vllm")

    class NextChunkArrivesMidParse(type(vllm)):
        """The real vLLM dialect; while it parses event ARRIVES_AT of the finished stream, the server sends the live
        stream's next chunk (loopback: in the client's socket buffer when sendall returns)."""

        calls = 0

        def parse_event(self, payload, state):
            if self.calls == ARRIVES_AT:
                conn.sendall(chunk(EVENT + b"\n\n"))
            self.calls += 1
            return super().parse_event(payload, state)

    lines = [(float(i), EVENT) for i in range(8 * PARSE_SLICE)]
    reader = StreamReader(finished, True, NextChunkArrivesMidParse(), reactor=reactor)
    reader.consume(lines, 0, live=False)
    assert len(finished.chunk_times) == len(lines)
    # read after it arrived and before the parse had gone one slice further
    assert len(parsed_when_read) == 2, parsed_when_read
    assert ARRIVES_AT < parsed_when_read[1] <= ARRIVES_AT + PARSE_SLICE, parsed_when_read

    conn.sendall(b"0\r\n\r\n")
    assert len(live.get(timeout=PATIENCE_S).lines) == 2
    pool.close()
    reactor.close()


def test_idle_turns_go_to_one_waiter_per_loop_iteration() -> None:
    """``gevent.idle()`` wakes every waiter in the same iteration; work waiting for idle moments (a batch of
    finished streams' parsing) must take them one at a time, so the loop polls between any two."""
    reactor = Reactor()
    iteration = [0]
    counter = gevent.get_hub().loop.check()  # runs once after every poll
    counter.start(lambda: iteration.__setitem__(0, iteration[0] + 1))
    turns: list[int] = []

    def wait_for_a_turn() -> None:
        reactor.idle_turn(max_wait_s=PATIENCE_S)
        turns.append(iteration[0])

    try:
        gevent.joinall([gevent.spawn(wait_for_a_turn) for _ in range(20)], timeout=PATIENCE_S)
    finally:
        counter.stop()
    assert len(turns) == 20
    assert len(set(turns)) == 20, turns


def test_the_stall_clock_names_what_kept_the_loop_from_its_sockets() -> None:
    clock = StallClock()
    clock.start(gevent.get_hub().loop)
    clock.attribute(True)

    def hog() -> None:
        began = perf_counter()
        while perf_counter() - began < 0.03:  # 30 ms of work without giving the loop back
            pass

    try:
        gevent.sleep(0.001)  # a whole loop iteration with the clock's watchers (started mid-iteration above)
        gevent.spawn(hog).join()
        gevent.sleep(0.01)  # the loop polls again: the stall has ended
    finally:
        clock.attribute(False)
        clock.stop()
    summary = clock.summary()
    longest = summary["longest_stalls"][0]
    assert longest["ms"] >= 30.0 and summary["stall_max_ms"] == longest["ms"]
    assert longest["greenlets"][0]["what"].endswith("hog@done"), longest
    assert longest["greenlets"][0]["ms"] >= 30.0
    assert summary["stalls_over_5ms"] >= 1
