"""Fixtures of the unit tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from wire_server import Handler, Server


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
