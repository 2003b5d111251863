"""A minimal HTTP/1.1 client for streaming responses, built for timestamp accuracy under load.

Why not geventhttpclient's ``readline``, or even one gevent ``recv`` per stream: each costs a hub switch and
Python work per event, and a batching server delivers a burst of events to every stream at once, so the
client's per-event work delays every later timestamp in the burst (docs/design.md, "Transport"). Here a :class:`Reactor` (one
per process, shared by every :class:`Pool`, is the intent) watches a single epoll set holding every stream's
socket; when gevent's loop reports it ready, a callback reads every ready socket, timestamps each read the
moment it returns, and undoes the framing with a few slice operations (:class:`ResponseParser`). Complete SSE
lines carry the timestamp of the read that completed them. JSON, token counts and everything else happen after
the stream, in the request's own greenlet.

Without epoll (not Linux) each request reads its own socket with the same parser.

    errors   the TransportError tree and the failure kind of each type
    response Response (status, headers, timestamped lines)
    readers  the one chooser of the reader: compiled (_cread.c) or its pure-Python twin (pyread)
    pyread   the Python reader: Decoder (framing), ReadLoop (one wake-up's reads), pick_events (lines -> events)
    parser   ResponseParser (the head; the framing is the reader's Decoder)
    reactor  Reactor (the read loop in gevent's loop, timeouts, read lag), Connection
    pool     Pool (keep-alive connections; maps socket errors to TransportError)
"""

from llmload.client.transport import pyread, readers
from llmload.client.transport.errors import (
    CANCELLED,
    CLIENT_ERROR,
    CONNECT,
    DISCONNECT,
    KIND_BY_TYPE,
    MALFORMED_HTTP,
    READ_TIMEOUT,
    REQUEST_TIMEOUT,
    Cancelled,
    ClosedBeforeResponse,
    ClosedMidStream,
    ConnectError,
    ConnectTimeout,
    ListenerError,
    ProtocolError,
    ReadTimeout,
    RequestTimeout,
    TransportError,
    kind_of,
    read_timed_out,
    request_timed_out,
)
from llmload.client.transport.parser import MAX_HEAD, OnLines, ResponseParser
from llmload.client.transport.pool import Pool
from llmload.client.transport.pyread import RECV_SIZE
from llmload.client.transport.reactor import (
    SO_TIMESTAMPNS,
    SWITCH_INTERVAL_S,
    WATCH_INTERVAL_S,
    Connection,
    Reactor,
)
from llmload.client.transport.response import Response

__all__ = [
    "CANCELLED", "CLIENT_ERROR", "CONNECT", "DISCONNECT", "KIND_BY_TYPE", "MALFORMED_HTTP", "MAX_HEAD", "READ_TIMEOUT",
    "RECV_SIZE", "REQUEST_TIMEOUT", "SO_TIMESTAMPNS", "SWITCH_INTERVAL_S", "WATCH_INTERVAL_S",
    "Cancelled", "ClosedBeforeResponse", "ClosedMidStream", "ConnectError", "ConnectTimeout", "Connection",
    "ListenerError", "OnLines", "Pool", "ProtocolError", "Reactor", "ReadTimeout", "RequestTimeout",
    "Response", "ResponseParser", "TransportError", "kind_of", "pyread", "read_timed_out", "readers",
    "request_timed_out",
]
