"""What can go wrong on the wire, as a tree of exception types.

    TransportError            any transport failure
    ├── ConnectError          no connection could be opened: refused, unreachable, DNS, TLS handshake
    │   └── ConnectTimeout    opening it took longer than the connect timeout
    ├── ReadTimeout           no data for the read timeout
    ├── RequestTimeout        the whole request ran past its request timeout
    ├── ClosedBeforeResponse  closed or reset before the response head was complete
    ├── ClosedMidStream       closed or reset after the head, before the body ended
    ├── ProtocolError         malformed HTTP framing: status line, Content-Length, chunk sizes, oversized head
    ├── ListenerError         a live ``on_lines`` listener raised (llmload's own code path, not the wire)
    └── Cancelled             the client closed the connection on purpose (``--cancel-rate``): not a failure

Every class maps to one failure kind of :mod:`llmload.client.failures`; :data:`KIND_BY_TYPE` is the only place that
says which, and :attr:`TransportError.kind` reads it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmload.client.failures import (
    CANCELLED,
    CLIENT_ERROR,
    CONNECT,
    DISCONNECT,
    MALFORMED_HTTP,
    READ_TIMEOUT,
    REQUEST_TIMEOUT,
)

if TYPE_CHECKING:
    from llmload.client.transport.response import Response

__all__ = [
    "CANCELLED", "CLIENT_ERROR", "CONNECT", "DISCONNECT", "KIND_BY_TYPE", "MALFORMED_HTTP", "READ_TIMEOUT",
    "REQUEST_TIMEOUT",
    "Cancelled", "ClosedBeforeResponse", "ClosedMidStream", "ConnectError", "ConnectTimeout", "ListenerError",
    "ProtocolError", "ReadTimeout", "RequestTimeout", "TransportError", "cancelled", "kind_of", "read_timed_out",
    "request_timed_out",
]


class TransportError(Exception):
    """The connection failed or broke, or the server spoke something we cannot parse.

    ``response`` holds what arrived before the failure (status, headers, timestamped lines), or None.
    """

    def __init__(self, message: str, response: Response | None = None) -> None:
        super().__init__(message)
        self.response = response

    @property
    def kind(self) -> str:
        """The failure kind this error counts as (read-only: it follows from the type)."""
        return kind_of(type(self))


class ConnectError(TransportError):
    """No connection could be opened (refused, unreachable, name not resolved, TLS handshake failed)."""


class ConnectTimeout(ConnectError):
    """Opening the connection took longer than the connect timeout."""


class ReadTimeout(TransportError):
    """No data arrived for the read timeout (before the head or mid-stream)."""


class RequestTimeout(TransportError):
    """The whole request ran past its request timeout although data kept coming."""


class ClosedBeforeResponse(TransportError):
    """The connection was closed or reset before the response head was complete."""


class ClosedMidStream(TransportError):
    """The connection was closed or reset after the response head, before the body ended."""


class ProtocolError(TransportError):
    """Broken HTTP framing: status line, Content-Length, chunk sizes, a head over the size limit."""


class ListenerError(TransportError):
    """A live ``on_lines`` listener raised while the reactor read its stream (``__cause__``: what it raised)."""


class Cancelled(TransportError):
    """The client cancelled the request at its drawn moment and closed the connection (``response``: what had
    arrived by then)."""


#: the failure kind of each error type (a subclass not listed takes its nearest listed base's kind)
KIND_BY_TYPE: dict[type[TransportError], str] = {
    TransportError: DISCONNECT,
    ConnectError: CONNECT,
    ReadTimeout: READ_TIMEOUT,
    RequestTimeout: REQUEST_TIMEOUT,
    ClosedBeforeResponse: DISCONNECT,
    ClosedMidStream: DISCONNECT,
    ProtocolError: MALFORMED_HTTP,
    ListenerError: CLIENT_ERROR,
    Cancelled: CANCELLED,
}


def kind_of(cls: type[TransportError]) -> str:
    """The failure kind of an error type, from :data:`KIND_BY_TYPE` along its MRO."""
    for base in cls.__mro__:
        kind = KIND_BY_TYPE.get(base)
        if kind is not None:
            return kind
    raise TypeError(f"{cls.__name__} is not a TransportError")


def read_timed_out(timeout: float, resp: Response) -> ReadTimeout:
    return ReadTimeout(f"timed out: no data for {timeout:g} s after {len(resp.lines)} lines", resp)


def request_timed_out(resp: Response) -> RequestTimeout:
    lines = len(resp.lines)
    return RequestTimeout(f"timed out: the request took longer than its limit, after {lines} lines", resp)


def cancelled(resp: Response) -> Cancelled:
    return Cancelled(f"cancelled by the client after {len(resp.lines)} lines", resp)
