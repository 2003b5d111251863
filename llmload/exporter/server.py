"""Serve a registry's ``/metrics`` inside gevent's loop.

prometheus_client's ``start_http_server`` answers from a thread of its own; in llmload's processes Locust has
monkey-patched threading onto gevent, and a scrape must not hold the loop that timestamps tokens any longer than
rendering the text takes. gevent's ``WSGIServer`` runs each scrape as a greenlet in the same loop as the run.
Binding is a step of its own (:func:`bind`) so a busy port is a usage error before the run's first request.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, make_wsgi_app

from llmload.common.errors import ConfigError

#: what ``/`` and ``/metrics`` answer; any other path is 404
METRICS_PATHS = ("/metrics", "/")


@dataclass
class Endpoint:
    """A listening socket for ``/metrics`` and where it listens (the port the kernel chose for port 0)."""

    listener: socket.socket
    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"


def bind(host: str, port: int, flag: str = "--prometheus-port") -> Endpoint:
    """Listen on ``host:port`` now; ConfigError (exit 2) with one line when that is not possible."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except OSError as exc:
        raise ConfigError(f"{flag} {port}: cannot listen on {host!r}: {exc.strerror or exc}") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(64)
        sock.setblocking(False)  # gevent's server accepts when the loop says it is readable, never blocking it
    except OSError as exc:
        sock.close()
        raise ConfigError(f"{flag} {port}: cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return Endpoint(sock, host, sock.getsockname()[1])


class MetricsServer:
    """``registry``'s exposition on ``endpoint``: ``/metrics`` (and ``/``), counting the scrapes answered."""

    def __init__(self, endpoint: Endpoint, registry: CollectorRegistry) -> None:
        from gevent.pywsgi import WSGIServer

        self.endpoint = endpoint
        self.scrapes = 0
        self._metrics = make_wsgi_app(registry)
        self._server = WSGIServer(endpoint.listener, self._app, log=None)

    @property
    def url(self) -> str:
        return self.endpoint.url

    def _app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO", "/") not in METRICS_PATHS:
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"llmload serves /metrics\n"]
        body = self._metrics(environ, start_response)
        self.scrapes += 1
        return body

    def start(self) -> None:
        self._server.start()

    def stop(self) -> None:
        """Stop answering and close the socket (a scrape being answered gets a second to finish)."""
        self._server.stop(timeout=1.0)
        self.endpoint.listener.close()
