"""Fixtures of the unit tests."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator

import pytest
from wire_server import Handler, Server


@pytest.fixture(autouse=True)
def _fresh_gevent_clock() -> None:
    """gevent's timers count from the loop's cached time, which stands still while the hub is idle between
    tests (by however long the tests before took in this worker): a test's ``spawn_later(0.5, ...)`` would fire
    at once. Bring the loop's time up to date before each test that has gevent loaded (never monkey-patched)."""
    if "gevent" in sys.modules:
        import gevent

        gevent.get_hub().loop.update_now()


@pytest.fixture
def serve() -> Iterator[Callable[..., Server]]:
    """``serve(handler, ...)``: a :class:`wire_server.Server` for the test, stopped after it."""
    servers: list[Server] = []

    def start(*handlers: Handler) -> Server:
        servers.append(Server(*handlers))
        return servers[-1]

    yield start
    for server in servers:
        server.close()
