"""The Reactor is an explicit object: pools share one or own one, and its read lag feeds the client-health check.

Real sockets on 127.0.0.1 (the server thread of wire_server).
"""

from __future__ import annotations

import gc
import socket
import threading
import weakref

import pytest
from wire_server import CHUNKED_HEAD, EVENT, chunk, read_request

from llmload.client.transport import Pool, Reactor
from llmload.core.health import HealthMonitor

#: every case on both readers, the compiled one and its Python twin (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("reader")

HEALTH_KEYS = {"cpu_percent_mean", "cpu_percent_max", "loop_lag_p50_ms", "loop_lag_p99_ms", "loop_lag_max_ms",
               "schedule_lag_p99_ms", "late_sends", "sends", "read_lag_p99_ms", "reader", "bottleneck", "reason"}
#: what a reactor's stall clock adds (llmload.client.transport.stalls)
STALL_KEYS = {"stall_p50_ms", "stall_p99_ms", "stall_max_ms", "stalls_over_5ms", "longest_stalls"}


def streams(conn: socket.socket, stop: threading.Event) -> None:
    """Answer requests on one keep-alive connection with a three-event stream, until the client closes."""
    while read_request(conn):
        conn.sendall(CHUNKED_HEAD + chunk(EVENT) * 3 + b"0\r\n\r\n")


def test_pools_share_an_explicit_reactor(serve) -> None:
    server = serve(streams, streams)
    reactor = Reactor()
    a = Pool(server.url, read_timeout=5.0, reactor=reactor)
    b = Pool(server.url, read_timeout=5.0, reactor=reactor)
    try:
        assert a.reactor is reactor and b.reactor is reactor
        for pool in (a, b):  # one after the other: the server serves one connection at a time
            assert [line for _, line in pool.request("POST", "/", {}, b"{}").lines] == [b"data: x"] * 3
            pool.close()
    finally:
        a.close()
        b.close()
    assert reactor.ep is not None  # closing a pool leaves a shared reactor alone
    assert not reactor.waiting
    reactor.close()


def test_a_pool_without_a_reactor_owns_one(serve) -> None:
    server = serve(streams, streams)  # close() ends the first connection: the second request opens another
    pool = Pool(server.url, read_timeout=5.0)
    other = Pool(server.url)
    assert isinstance(pool.reactor, Reactor) and pool.reactor is not other.reactor
    try:
        assert pool.request("POST", "/", {}, b"{}").status == 200
        pool.close()  # releases its reactor's epoll set; the pool stays usable
        assert pool.reactor.ep is None
        assert pool.request("POST", "/", {}, b"{}").status == 200
    finally:
        pool.close()
        other.close()


def test_an_unused_reactor_is_collected(serve) -> None:
    server = serve(streams)
    pool = Pool(server.url, read_timeout=5.0)
    assert pool.request("POST", "/", {}, b"{}").status == 200
    ref = weakref.ref(pool.reactor)
    pool._idle.clear()  # drop the pool without close(): its reactor must not live on in gevent's loop
    del pool
    gc.collect()
    assert ref() is None


def test_read_lag_is_per_reactor_and_resets(serve) -> None:
    server = serve(streams)
    reactor = Reactor()
    assert reactor.read_lag_percentile(99) is None  # nothing read yet
    pool = Pool(server.url, read_timeout=5.0, reactor=reactor)
    try:
        for _ in range(3):
            pool.request("POST", "/", {}, b"{}")
    finally:
        pool.close()
    lag = reactor.read_lag_percentile(99)
    # None only where the kernel gives no receive timestamps
    assert lag is None or 0.0 <= lag <= 1000.0
    assert Reactor().read_lag_percentile(99) is None
    reactor.reset_read_lag()
    assert reactor.read_lag_percentile(99) is None
    reactor.close()


def test_read_lag_percentile_from_the_histogram() -> None:
    reactor = Reactor()
    reactor.read_lag[0] = 90
    reactor.read_lag[50] = 10  # 5.0 ms
    assert reactor.read_lag_percentile(50) == 0.0
    assert reactor.read_lag_percentile(99) == 5.0


def test_health_monitor_reads_the_lag_of_its_reactor(reader: str) -> None:
    reactor = Reactor()
    health = HealthMonitor(reactor=reactor)
    reactor.read_lag[20] = 5
    health.start()  # a run starts from an empty histogram
    assert reactor.read_lag_percentile(99) is None
    reactor.read_lag[20] = 5  # 2.0 ms
    health.stop()
    report = health.report()
    assert set(report) == HEALTH_KEYS | STALL_KEYS
    assert report["read_lag_p99_ms"] == 2.0
    assert report["reader"] == reader  # the reader that ran, as LLMLOAD_READER chose it


def test_health_monitor_without_a_reactor_does_not_know_the_read_lag() -> None:
    health = HealthMonitor()
    health.start()
    health.stop()
    report = health.report()
    assert set(report) == HEALTH_KEYS
    assert report["read_lag_p99_ms"] is None
    assert report["reader"] is None
