"""Failure kinds: the pure classifier, kinds of old records, and the counts the metrics and the result JSON carry."""

from __future__ import annotations

import socket

import pytest

from llmload.client import failures, transport
from llmload.client.backends import get_backend
from llmload.client.failures import (
    KINDS,
    event_failure,
    http_kind,
    infer_kind,
    is_json_answer,
    kind_of,
)
from llmload.client.records import RequestRecord
from llmload.client.transport import Pool
from llmload.metrics import compute_metrics, failure_counts


def test_kinds_are_the_documented_ones():
    assert set(KINDS) == {
        "http_5xx", "http_429", "http_4xx", "connect", "read_timeout", "request_timeout", "disconnect",
        "malformed_event", "malformed_http", "error_event", "not_streamed", "empty_stream", "cut_off",
        "client_error", "cancelled",
    }
    assert len(KINDS) == len(set(KINDS))
    assert set(KINDS) >= failures.TRANSPORT_KINDS


@pytest.mark.parametrize(("status", "kind"), [
    (429, "http_429"), (500, "http_5xx"), (503, "http_5xx"), (599, "http_5xx"), (400, "http_4xx"),
    (404, "http_4xx"), (422, "http_4xx"), (301, "http_4xx"),
])
def test_http_kind(status, kind):
    assert http_kind(status) == kind


ERROR_KINDS = [
    (transport.ConnectError, "connect"), (transport.ConnectTimeout, "connect"),
    (transport.ReadTimeout, "read_timeout"), (transport.RequestTimeout, "request_timeout"),
    (transport.ClosedBeforeResponse, "disconnect"), (transport.ClosedMidStream, "disconnect"),
    (transport.ProtocolError, "malformed_http"), (transport.ListenerError, "client_error"),
    (transport.TransportError, "disconnect"), (transport.Cancelled, "cancelled"),
]


@pytest.mark.parametrize(("cls", "kind"), ERROR_KINDS)
def test_transport_kind_comes_from_the_type(cls, kind):
    # the message is ignored: only the type decides
    exc = cls("connection refused: timed out, malformed status line")
    assert exc.kind == kind
    assert isinstance(exc, transport.TransportError)
    with pytest.raises(AttributeError):
        exc.kind = "connect"


def test_every_transport_kind_has_a_type():
    assert {kind for _, kind in ERROR_KINDS} == failures.TRANSPORT_KINDS


def test_a_refused_connection_is_connect_with_the_real_pool():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pool = Pool(f"http://127.0.0.1:{port}", connect_timeout=2.0, read_timeout=2.0)
    with pytest.raises(transport.ConnectError) as info:
        pool.request("POST", "/v1/completions", {}, b"{}")
    assert info.value.kind == "connect"
    assert isinstance(info.value.__cause__, ConnectionRefusedError)
    pool.close()


def test_malformed_events_group_whatever_the_request_id():
    messages = set()
    for rid in ("cmpl-1a-1", "cmpl-2b-22222"):
        payload = b'{"id":"' + rid.encode() + b'","choices":[{"index":0,"text":"'
        ev = get_backend("vllm").parse_event(payload, None)
        assert ev.error is not None and rid in ev.error  # the backend's message quotes the payload
        kind, message = event_failure(payload, ev.error)
        assert kind == "malformed_event" and rid not in message
        messages.add(message)
    assert len(messages) == 1


def test_odd_shaped_events_keep_the_reason_but_not_the_payload():
    out = set()
    for rid in ("chatcmpl-7f3a-1", "chatcmpl-99zz-123"):
        payload = b'{"id":"' + rid.encode() + b'","choices":"not a list"}'
        ev = get_backend("openai-chat").parse_event(payload, get_backend("openai-chat").new_state())
        assert ev.error is not None and rid in ev.error
        kind, message = event_failure(payload, ev.error)
        assert kind == "malformed_event" and message.startswith("malformed stream event") and rid not in message
        out.add(message)
    assert len(out) == 1
    assert event_failure(b"[1, 2]", "whatever") == ("malformed_event", "malformed stream event: not a JSON object")


@pytest.mark.parametrize("payload", [b'{"error": "CUDA out of memory"}', b'{"error": {"message": "boom"}}',
                                     b'{"object": "error", "message": "bad"}'])
def test_error_objects_are_error_events_with_the_server_message(payload):
    ev = get_backend("vllm").parse_event(payload, None)
    assert ev.error
    assert event_failure(payload, ev.error) == ("error_event", ev.error)


@pytest.mark.parametrize(("content_type", "json"), [
    ("application/json", True), ("application/json; charset=utf-8", True), ("Application/JSON", True),
    ("text/event-stream", False), ("text/event-stream; charset=utf-8", False), ("application/x-ndjson", False),
    ("", False),
])
def test_json_answers(content_type, json):
    assert is_json_answer(content_type) is json


@pytest.mark.parametrize(("fields", "kind"), [
    ({"cut_off": True, "error": "cut off: the run ended"}, "cut_off"),
    ({"success": True}, ""),
    ({"status_code": 429, "error": "HTTP 429: slow down"}, "http_429"),
    ({"error": "HTTP 503: {}"}, "http_5xx"),
    ({"error": "connection refused by 127.0.0.1:1"}, "connect"),
    ({"error": "request failed: timed out after 600 s without data"}, "read_timeout"),
    ({"error": "malformed stream event: unexpected end of data: b'{'"}, "malformed_event"),
    ({"error": "stream ended without any content"}, "empty_stream"),
    ({"error": "stream broken after 3 events: HTTPError: connection closed mid-stream after 5 lines"}, "disconnect"),
    ({"error": "KeyError: 'text'"}, "client_error"),
    ({"error": "CUDA out of memory"}, "error_event"),
])
def test_kinds_of_records_written_before_kinds_existed(fields, kind):
    record = RequestRecord(**fields)
    assert infer_kind(record) == kind
    assert kind_of(record) == kind


def test_a_record_s_own_kind_wins():
    record = RequestRecord(error="HTTP 500: x", status_code=500, failure_kind="error_event")
    assert kind_of(record) == "error_event"
    assert kind_of(RequestRecord(success=True, failure_kind="")) == ""
    # the field survives the trip through a records file / the master-worker channel
    assert RequestRecord.from_dict(record.to_dict()).failure_kind == "error_event"


def _ok(start: float) -> RequestRecord:
    return RequestRecord(start=start, first_token=start + 0.1, chunk_times=[start + 0.1, start + 0.2],
                         chunk_tokens=[1, 1], output_tokens=2, success=True, prompt_len=5)


def _failed(kind: str, error: str, **kw) -> RequestRecord:
    # a failure that had received tokens, with absurd times: none of them may reach a latency list
    return RequestRecord(start=0.0, first_token=50.0, chunk_times=[50.0, 90.0], chunk_tokens=[1, 1],
                         output_tokens=2, error=error, failure_kind=kind, prompt_len=5, **kw)


def test_counts_by_kind_add_up_and_failures_stay_out_of_latencies():
    records = [
        _ok(0.0), _ok(1.0), _ok(2.0),
        _failed("disconnect", "stream broken after 1 events: a"),
        _failed("disconnect", "stream broken after 7 events: b"),
        _failed("http_5xx", "HTTP 500: x", status_code=500),
        _failed("malformed_event", "malformed stream event: not valid JSON"),
        _failed("cut_off", "cut off: the run ended", cut_off=True),
        RequestRecord(start=0.0, error="HTTP 429: slow down", status_code=429),  # an old record: no kind
    ]
    m = compute_metrics(records, 10.0, selected_metrics=["ttft", "tpot", "itl", "e2el"])
    assert (m.completed, m.failed, m.cut_off) == (3, 5, 1)
    assert m.sent == m.completed + m.failed + m.cut_off == len(records)
    assert m.failures_by_kind == {"disconnect": 2, "cut_off": 1, "http_429": 1, "http_5xx": 1,
                                  "malformed_event": 1}
    assert list(m.failures_by_kind) == ["disconnect", "cut_off", "http_429", "http_5xx", "malformed_event"]
    assert sum(m.failures_by_kind.values()) == m.failed + m.cut_off
    assert m.failure_examples["disconnect"] == "stream broken after 1 events: a"  # the first one seen
    assert m.failure_examples["http_429"] == "HTTP 429: slow down"
    # latencies are the three good requests' only: 100 ms TTFT, 200 ms E2E, one 100 ms ITL each
    assert m.ttft.count == 3 and m.ttft.max_ms == pytest.approx(100)
    assert m.e2el.max_ms == pytest.approx(200)
    assert m.itl.count == 3 and m.itl.max_ms == pytest.approx(100)
    assert m.tpot.max_ms == pytest.approx(100)
    assert m.total_output == 6

    d = m.to_result_dict()
    assert d["sent"] == len(records)
    assert d["failures_by_kind"] == m.failures_by_kind
    assert d["failure_examples"]["malformed_event"] == "malformed stream event: not valid JSON"
    keys = list(d)
    # llmload's own keys come after every vLLM key
    assert keys.index("failures_by_kind") > max(keys.index(k) for k in ("p99_itl_ms", "p99_e2el_ms", "completed"))


def test_no_failures_no_kinds():
    m = compute_metrics([_ok(0.0)], 1.0)
    assert m.failures_by_kind == {} and m.sent == 1
    assert m.to_result_dict()["failures_by_kind"] == {}
    assert failure_counts([]) == ({}, {})
