"""Failure kinds: one stable label per failed request, so failures group and count.

Every request that did not complete gets exactly one kind in :attr:`RequestRecord.failure_kind` (empty when it
succeeded). The summary, the result JSON (``failures_by_kind``) and the records carry them; docs/reliability.md
says what causes each one. The helpers here are pure: they look at what the client saw (status, headers, the
exception, the offending payload) and return a kind, so the Locust users, the bench dispatcher and reports of
old records all classify the same way.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

#: the server answered 500-599
HTTP_5XX = "http_5xx"
#: the server answered 429 Too Many Requests (usually with ``Retry-After``)
HTTP_429 = "http_429"
#: the server answered another non-200 status (400-499 but 429, and the odd 1xx/2xx/3xx)
HTTP_4XX = "http_4xx"
#: no connection could be opened (refused, unreachable, name not resolved, connect timeout)
CONNECT = "connect"
#: the server sent nothing for the read timeout (before the headers or mid-stream)
READ_TIMEOUT = "read_timeout"
#: the whole request ran past its request timeout although data kept coming
REQUEST_TIMEOUT = "request_timeout"
#: the connection was closed or reset before the response was complete
DISCONNECT = "disconnect"
#: a stream event that is not valid JSON, not a JSON object, or an object of an unexpected shape
MALFORMED_EVENT = "malformed_event"
#: the HTTP framing was broken (status line, Content-Length, chunk sizes, oversized headers)
MALFORMED_HTTP = "malformed_http"
#: an error object inside a 200 answer (``data: {"error": ...}``, as transformers serve sends)
ERROR_EVENT = "error_event"
#: a streaming request was answered with one JSON body instead of an event stream
NOT_STREAMED = "not_streamed"
#: the stream ended cleanly but carried no content (no token counted)
EMPTY_STREAM = "empty_stream"
#: the run was stopped while the request was in flight or still waiting to be sent
CUT_OFF = "cut_off"
#: an exception in llmload's own code path (a bug, or a hook listener that raised)
CLIENT_ERROR = "client_error"
#: not a failure: the client closed the connection on purpose (``--cancel-rate``); counted apart from the kinds
CANCELLED = "cancelled"

#: every kind, in the order the docs list them
KINDS = (
    HTTP_5XX, HTTP_429, HTTP_4XX, CONNECT, READ_TIMEOUT, REQUEST_TIMEOUT, DISCONNECT, MALFORMED_EVENT,
    MALFORMED_HTTP, ERROR_EVENT, NOT_STREAMED, EMPTY_STREAM, CUT_OFF, CLIENT_ERROR, CANCELLED,
)
#: what :attr:`llmload.client.transport.TransportError.kind` may say
TRANSPORT_KINDS = frozenset((CONNECT, READ_TIMEOUT, REQUEST_TIMEOUT, DISCONNECT, MALFORMED_HTTP, CLIENT_ERROR,
                             CANCELLED))

#: the message of a non-streamed answer to a streaming request
NOT_STREAMED_MESSAGE = ("the server answered a streaming request with one JSON body, not an event stream: "
                        "no TTFT or ITL can be measured (is the endpoint or a proxy ignoring \"stream\"?)")
EMPTY_STREAM_MESSAGE = "stream ended without any content"


def http_kind(status: int) -> str:
    """The kind of a non-200 answer: ``http_429``, ``http_5xx`` (500 and up) or ``http_4xx`` (everything else)."""
    if status == 429:
        return HTTP_429
    if status >= 500:
        return HTTP_5XX
    return HTTP_4XX


_EXCEPTION = re.compile(r"[A-Z]\w*(Error|Exception): ")
#: how old records said a framing error (:func:`infer_kind` has only the recorded message)
_MALFORMED_HTTP_WORDS = ("malformed status line", "malformed chunk", "bad content-length", "headers larger")


def _error_in(data: dict) -> bool:
    """An error object, in the shapes :func:`llmload.client.backends.base.error_message` reads."""
    return data.get("error") is not None or data.get("object") == "error"


def event_failure(payload: bytes, message: str) -> tuple[str, str]:
    """``(kind, message)`` for a stream payload the backend refused with ``message``.

    ``error_event`` when the payload is a JSON object carrying an error (the server's message is kept), else
    ``malformed_event`` with a message that holds no part of the payload (ids differ per request and would
    keep identical failures from grouping).
    """
    try:
        data = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return MALFORMED_EVENT, "malformed stream event: not valid JSON"
    if not isinstance(data, dict):
        return MALFORMED_EVENT, "malformed stream event: not a JSON object"
    if _error_in(data):
        return ERROR_EVENT, message
    for quote in ("'", '"'):
        cut = message.find(f": b{quote}")
        if cut > 0:
            message = message[:cut]
    return MALFORMED_EVENT, message or "malformed stream event: unexpected shape"


def is_json_answer(content_type: str) -> bool:
    """Whether a Content-Type says one JSON document (``application/json``), not an event stream or NDJSON."""
    return content_type.split(";", 1)[0].strip().lower() == "application/json"


def infer_kind(record: Any) -> str:
    """The kind of a record written before failure kinds existed (or by an older worker), from its fields."""
    if record.cut_off:
        return CUT_OFF
    if record.success:
        return ""
    if record.status_code and record.status_code != 200:
        return http_kind(record.status_code)
    message = (record.error or "").lower()
    if message.startswith("http "):
        try:
            return http_kind(int(message[5:8]))
        except ValueError:
            pass
    for words, kind in (
        (("connection refused", "connectionrefused", "name or service not known"), CONNECT),
        (("request took longer",), REQUEST_TIMEOUT),
        (("timed out",), READ_TIMEOUT),
        (("malformed stream event",), MALFORMED_EVENT),
        (_MALFORMED_HTTP_WORDS, MALFORMED_HTTP),
        (("without any content",), EMPTY_STREAM),
        (("not an event stream",), NOT_STREAMED),
        (("closed", "reset", "broken", "brokenpipe"), DISCONNECT),
    ):
        if any(w in message for w in words):
            return kind
    # "KeyError: ..." is how an exception in llmload's own code path was recorded; else a server's message
    return CLIENT_ERROR if _EXCEPTION.match(record.error or "") else ERROR_EVENT


def kind_of(record: Any) -> str:
    """A record's failure kind: its own ``failure_kind``, else inferred; ``""`` for a completed request."""
    if record.cut_off:
        return CUT_OFF
    if getattr(record, "cancelled", False):
        return CANCELLED
    if record.success:
        return ""
    return getattr(record, "failure_kind", "") or infer_kind(record)
