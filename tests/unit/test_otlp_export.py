"""The OTLP push of a finished run (llmload/exporter/otlp.py), against a receiver of our own on 127.0.0.1: what
the collector gets (GenAI semantic-convention names, units, attributes, values that are the records' own), and
that a collector which is down, refuses or does not answer costs one warning line, never an exception or a hang.
"""

from __future__ import annotations

import gzip
import logging
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from support import free_port

pytest.importorskip("opentelemetry.sdk.metrics", reason="the OTLP extra: pip install -e '.[otlp]'")
pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="the OTLP extra: pip install -e '.[otlp]'")
metrics_service = pytest.importorskip("opentelemetry.proto.collector.metrics.v1.metrics_service_pb2")

from llmload.client.records import RequestRecord  # noqa: E402
from llmload.exporter import otlp  # noqa: E402


@dataclass
class Receiver:
    """A collector's OTLP/HTTP endpoint: answers ``status`` (after ``hold`` is set, when ``hang``)."""

    status: int = 200
    hang: bool = False
    requests: list[Any] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    hold: threading.Event = field(default_factory=threading.Event)
    url: str = ""


def handler_for(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            encoding = self.headers.get("Content-Encoding", "")
            body = gzip.decompress(body) if encoding == "gzip" else zlib.decompress(body) if (
                encoding == "deflate") else body
            receiver.paths.append(self.path)
            receiver.requests.append(metrics_service.ExportMetricsServiceRequest.FromString(body))
            if receiver.hang:
                receiver.hold.wait(30)
            answer = metrics_service.ExportMetricsServiceResponse().SerializeToString()
            self.send_response(receiver.status)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture(autouse=True)
def _plain_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No OTEL_* setting of the machine's and no proxy between the push and 127.0.0.1."""
    import os

    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@pytest.fixture
def receive() -> Iterator[Callable[..., Receiver]]:
    """``receive(status=..., hang=...)``: a running receiver, stopped after the test."""
    servers: list[tuple[ThreadingHTTPServer, Receiver]] = []

    def start(**settings: Any) -> Receiver:
        receiver = Receiver(**settings)
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(receiver))
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        receiver.url = f"http://127.0.0.1:{server.server_address[1]}"
        servers.append((server, receiver))
        return receiver

    yield start
    for server, receiver in servers:
        receiver.hold.set()
        server.shutdown()
        server.server_close()


def chat(start: float, first: float | None, times: list[float], *, tokens: int, prompt: int, server_prompt: int | None,
         user_class: str = "Chat", **fields: Any) -> RequestRecord:
    return RequestRecord(backend="openai-chat", model="m", user_class=user_class, start=start, first_token=first,
                         chunk_times=times, chunk_tokens=[1] * len(times), output_tokens=tokens, prompt_len=prompt,
                         server_prompt_tokens=server_prompt, success=fields.pop("success", True), **fields)


def run_records() -> list[RequestRecord]:
    return [
        chat(100.0, 100.2, [100.2, 100.3, 100.4], tokens=3, prompt=10, server_prompt=12),
        chat(200.0, 200.5, [200.5, 200.75, 201.0, 201.5], tokens=4, prompt=16, server_prompt=None,
             user_class="Batch"),
        # broken off mid-stream: a duration (to its last event), marked with its failure kind
        chat(300.0, 300.1, [300.1, 300.25], tokens=2, prompt=10, server_prompt=None, success=False,
             failure_kind="disconnect", error="connection reset"),
        # refused before any event: counted, no duration to report
        chat(400.0, None, [], tokens=0, prompt=10, server_prompt=None, success=False, failure_kind="http_5xx",
             status_code=503),
        chat(500.0, None, [], tokens=0, prompt=10, server_prompt=None, success=False, cancelled=True,
             failure_kind="cancelled"),
    ]


def value(any_value: Any) -> Any:
    return getattr(any_value, any_value.WhichOneof("value"))


def attrs(point: Any) -> dict[str, Any]:
    return {kv.key: value(kv.value) for kv in point.attributes}


def received(receiver: Receiver) -> tuple[dict[str, Any], dict[str, Any]]:
    """The one request's resource attributes, and its metrics by name."""
    assert receiver.paths == ["/v1/metrics"]
    (resource_metrics,) = receiver.requests[0].resource_metrics
    (scope_metrics,) = resource_metrics.scope_metrics
    assert scope_metrics.scope.name == "llmload"
    return attrs(resource_metrics.resource), {m.name: m for m in scope_metrics.metrics}


def points(metric: Any, **where: Any) -> list[Any]:
    """The metric's points whose attributes include ``where`` (``error_type=None``: points without one)."""
    kind = metric.WhichOneof("data")
    found = []
    for point in getattr(metric, kind).data_points:
        have = attrs(point)
        wanted = {k.replace("__", "."): v for k, v in where.items()}
        if all(have.get(k) == v for k, v in wanted.items()):
            found.append(point)
    return found


def test_the_collector_gets_the_runs_genai_metrics(receive: Callable[..., Receiver]) -> None:
    receiver = receive()
    records = run_records()
    warning = otlp.push_run_metrics(receiver.url, iter(records), service_name="llmload-test",
                                    server_address="http://gpu-box:8000", run_attributes={"llmload.run": "r-1"})
    assert warning is None
    resource, metrics = received(receiver)
    assert resource["service.name"] == "llmload-test"
    assert {name: m.unit for name, m in metrics.items()} == {
        "gen_ai.client.operation.duration": "s", "gen_ai.client.operation.time_to_first_chunk": "s",
        "gen_ai.client.operation.time_per_output_chunk": "s", "llmload.client.time_per_output_token": "s",
        "gen_ai.client.token.usage": "{token}", "llmload.requests": "{request}", "llmload.tokens": "{token}"}

    duration = metrics["gen_ai.client.operation.duration"]
    (first,) = points(duration, llmload__user_class="Chat", error__type=None)
    assert attrs(first) == {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
                            "gen_ai.request.model": "m", "server.address": "gpu-box", "server.port": 8000,
                            "llmload.user_class": "Chat", "llmload.run": "r-1"}
    assert duration.histogram.aggregation_temporality == 2  # cumulative
    completed = [p for p in duration.histogram.data_points if "error.type" not in attrs(p)]
    e2e = [r.chunk_times[-1] - r.start for r in records if r.success]
    assert sum(p.count for p in completed) == len(e2e) == 2
    assert sum(p.sum for p in completed) == pytest.approx(sum(e2e), abs=1e-9)
    (broken,) = points(duration, error__type="disconnect")
    assert (broken.count, broken.sum) == (1, pytest.approx(0.25, abs=1e-9))
    assert list(first.explicit_bounds) == list(otlp.LATENCY_BOUNDS)
    assert sum(first.bucket_counts) == 1 and first.bucket_counts[6] == 1  # 0.4 s: in (0.32, 0.64]

    (ttft,) = points(metrics["gen_ai.client.operation.time_to_first_chunk"], llmload__user_class="Chat")
    assert (ttft.count, ttft.sum, ttft.bucket_counts[5]) == (1, pytest.approx(0.2, abs=1e-9), 1)  # (0.16, 0.32]
    (itl,) = points(metrics["gen_ai.client.operation.time_per_output_chunk"], llmload__user_class="Batch")
    assert (itl.count, itl.sum) == (3, pytest.approx(1.0, abs=1e-9))
    assert (itl.min, itl.max) == (pytest.approx(0.25, abs=1e-9), pytest.approx(0.5, abs=1e-9))
    (tpot,) = points(metrics["llmload.client.time_per_output_token"], llmload__user_class="Chat")
    assert tpot.sum == pytest.approx((0.4 - 0.2) / 2, abs=1e-9)

    usage = metrics["gen_ai.client.token.usage"]
    (chat_in,) = points(usage, llmload__user_class="Chat", gen_ai__token__type="input")
    (chat_out,) = points(usage, llmload__user_class="Chat", gen_ai__token__type="output")
    (batch_in,) = points(usage, llmload__user_class="Batch", gen_ai__token__type="input")
    assert (chat_in.sum, chat_out.sum, batch_in.sum) == (12, 3, 16)  # the server's count, else the dataset's
    assert (chat_in.bucket_counts[2], batch_in.bucket_counts[2]) == (1, 1)  # 16 is in (4, 16], as 12


def test_the_counters_say_every_outcome_and_the_failure_kinds(receive: Callable[..., Receiver]) -> None:
    receiver = receive()
    assert otlp.push_run_metrics(receiver.url, run_records()) is None
    _resource, metrics = received(receiver)
    requests = metrics["llmload.requests"]
    assert requests.sum.is_monotonic and requests.sum.aggregation_temporality == 2
    by_outcome: Counter[tuple[str, str | None]] = Counter()
    for point in requests.sum.data_points:
        by_outcome[attrs(point)["llmload.outcome"], attrs(point).get("error.type")] += point.as_int
    assert by_outcome == {("completed", None): 2, ("failed", "disconnect"): 1, ("failed", "http_5xx"): 1,
                          ("cancelled", None): 1}
    tokens = {(attrs(p)["llmload.user_class"], attrs(p)["gen_ai.token.type"]): p.as_int
              for p in metrics["llmload.tokens"].sum.data_points}
    assert tokens == {("Chat", "input"): 12, ("Chat", "output"): 3, ("Batch", "input"): 16, ("Batch", "output"): 4}


def test_a_collector_that_is_down_is_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    url = f"http://127.0.0.1:{free_port()}"
    began = time.monotonic()
    warning = otlp.push_run_metrics(url, run_records(), timeout_s=2.0)
    assert time.monotonic() - began < 15
    assert warning is not None and "\n" not in warning
    assert f"{url}/v1/metrics" in warning and "connection refused" in warning
    assert "results are unaffected" in warning
    # the SDK's own error lines were muted, and its loggers are back as they were
    assert not [r for r in caplog.records if r.name.startswith("opentelemetry") and r.levelno >= logging.WARNING]
    assert logging.getLogger("opentelemetry").level == logging.NOTSET


def test_a_collector_that_refuses_is_one_warning(receive: Callable[..., Receiver]) -> None:
    receiver = receive(status=500)
    warning = otlp.push_run_metrics(receiver.url, run_records())
    assert warning is not None and "HTTP 500" in warning and receiver.url in warning
    assert len(receiver.requests) == 1  # sent, and not retried: a 500 is not a transient error


def test_a_warning_never_shows_the_endpoints_password() -> None:
    port = free_port()
    warning = otlp.push_run_metrics(f"http://otel:s3cret-pw@127.0.0.1:{port}", run_records(), timeout_s=2.0)
    assert warning is not None and "s3cret-pw" not in warning
    assert f"http://otel:***@127.0.0.1:{port}/v1/metrics" in warning


def test_a_collector_that_does_not_answer_is_one_warning_within_the_timeout(
        receive: Callable[..., Receiver]) -> None:
    receiver = receive(hang=True)
    began = time.monotonic()
    warning = otlp.push_run_metrics(receiver.url, run_records(), timeout_s=1.0)
    assert time.monotonic() - began < 10
    assert warning is not None and "answer" in warning and receiver.url in warning


def test_without_the_sdk_the_push_is_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.metric_exporter", None)
    warning = otlp.push_run_metrics("http://127.0.0.1:9/", run_records())
    assert warning is not None and "llmload[otlp]" in warning and "http://127.0.0.1:9/v1/metrics" in warning


def test_names_and_addresses() -> None:
    assert [otlp.operation_of(b) for b in ("openai", "vllm", "openai-chat", "openai-embeddings", "my-chat")] == [
        "text_completion", "text_completion", "chat", "embeddings", "chat"]
    assert [otlp.provider_of(b) for b in ("vllm", "openai-chat", "anthropic-messages", "sglang")] == [
        "vllm", "openai", "anthropic", "sglang"]
    assert otlp.server_attributes("gpu-box:8001") == (("server.address", "gpu-box"), ("server.port", 8001))
    assert otlp.server_attributes("https://api.example.com/v1") == (
        ("server.address", "api.example.com"), ("server.port", 443))
    assert otlp.server_attributes("") == ()
