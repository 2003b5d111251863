"""One finished run's metrics, pushed to an OpenTelemetry collector over OTLP/HTTP (protobuf).

Teams that run an OpenTelemetry pipeline rather than a Prometheus that scrapes llmload get the run's numbers
under the OpenTelemetry GenAI semantic conventions (v1.41.0, ``docs/gen-ai/gen-ai-metrics.md``; development
status), beside what their own GenAI clients report, plus llmload's request and token counters (the ones
``--prometheus-port`` serves live). Names, attributes and the mapping to the Prometheus export:
docs/observability.md, "OpenTelemetry (OTLP)".

Why the points are aggregated here and not through the SDK's instruments: ``Histogram.record`` costs ~10 µs a
value (measured, SDK 1.45), and a run's inter-token latencies run to millions, which would hold the end of a run
for minutes. The values are filed with numpy into :class:`~llmload.exporter.collector.BucketCounts` (the
Prometheus export's histograms, same bucket rule as OpenTelemetry's: a value equal to a bound counts in that
bound's bucket) and handed to the SDK's own ``OTLPMetricExporter`` as the SDK's ``MetricsData``: its resource,
encoding, headers (``OTEL_EXPORTER_OTLP_METRICS_HEADERS``), compression and retries are the SDK's.

The push is one synchronous export whose result says whether the collector took the data; a refusal, a collector
that is down or one that does not answer becomes one warning line, never an exception, within ``timeout_s``.
The OpenTelemetry packages are the optional extra ``otlp``, imported only when a push is made.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from importlib import metadata
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from llmload.client.failures import CANCELLED, kind_of
from llmload.common.urls import redact_url
from llmload.exporter.collector import BucketCounts
from llmload.exporter.metrics import TOKEN_BUCKETS
from llmload.metrics.definitions import (
    e2el_s,
    is_completed,
    itl_array,
    output_tokens,
    server_input_tokens,
    tpot_s,
    ttft_s,
)

# -- names (semantic conventions v1.41.0, GenAI client metrics) -----------------------------------------------

DURATION = "gen_ai.client.operation.duration"
TIME_TO_FIRST_CHUNK = "gen_ai.client.operation.time_to_first_chunk"
TIME_PER_OUTPUT_CHUNK = "gen_ai.client.operation.time_per_output_chunk"
TOKEN_USAGE = "gen_ai.client.token.usage"
#: llmload's own: TPOT as llmload defines it, per request (the spec's per-request TPOT is a server metric)
TPOT = "llmload.client.time_per_output_token"
REQUESTS = "llmload.requests"
TOKENS = "llmload.tokens"

OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
TOKEN_TYPE = "gen_ai.token.type"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
ERROR_TYPE = "error.type"
USER_CLASS = "llmload.user_class"
OUTCOME = "llmload.outcome"

#: the spec's advisory boundaries for the duration and both chunk timings (seconds)
LATENCY_BOUNDS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
#: the spec's advisory boundaries for token usage
TOKEN_BOUNDS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)

#: name -> (unit, description, bucket bounds; None for a monotonic counter), in the order they are sent
METRICS: Mapping[str, tuple[str, str, tuple[float, ...] | None]] = MappingProxyType({
    DURATION: ("s", "GenAI operation duration: llmload's E2E latency (to the last counted event).",
               LATENCY_BOUNDS),
    TIME_TO_FIRST_CHUNK: ("s", "Time to first token (llmload's TTFT) of completed streamed requests.",
                          LATENCY_BOUNDS),
    TIME_PER_OUTPUT_CHUNK: ("s", "Every inter-token latency (ITL) of completed streamed requests.",
                            LATENCY_BOUNDS),
    TPOT: ("s", "Time per output token after the first, of completed requests with 2+ tokens.", TOKEN_BUCKETS),
    TOKEN_USAGE: ("{token}", "Input and output tokens of each completed request.", TOKEN_BOUNDS),
    REQUESTS: ("{request}", "Requests that ended, by outcome (completed, failed, cancelled, cut_off).", None),
    TOKENS: ("{token}", "Input and output tokens of completed requests.", None),
})

#: llmload backend -> ``gen_ai.operation.name`` (a custom value where none of the spec's fits: rerank)
OPERATIONS: Mapping[str, str] = MappingProxyType({
    "openai": "text_completion", "vllm": "text_completion", "modular": "text_completion",
    "sglang": "text_completion", "tgi": "text_completion", "tensorrt-llm": "text_completion",
    "openai-chat": "chat", "modular-chat": "chat", "openai-responses": "chat", "anthropic-messages": "chat",
    "openai-embeddings": "embeddings", "openai-embeddings-chat": "embeddings", "vllm-pooling": "embeddings",
    "vllm-rerank": "rerank",
})
#: the operations whose answers stream: only they have chunk timings (the spec: not for other calls)
STREAMED = frozenset({"chat", "text_completion"})
#: backend name prefix -> ``gen_ai.provider.name``: the API's flavour, as the spec asks (an OpenAI-compatible
#: server is ``openai``; ``server.address`` says which one it was)
PROVIDERS = (("anthropic", "anthropic"), ("vllm", "vllm"), ("sglang", "sglang"), ("tgi", "tgi"),
             ("tensorrt", "tensorrt_llm"), ("modular", "modular"), ("openai", "openai"))

SDK_LOGGER = "opentelemetry"
WARNING_TAIL = "the run's results are unaffected"

Attributes = tuple[tuple[str, Any], ...]


def operation_of(backend: str) -> str:
    """The ``gen_ai.operation.name`` of a backend; an unknown (plugin) backend by its name's hint."""
    known = OPERATIONS.get(backend)
    if known is not None:
        return known
    return "chat" if "chat" in backend else "embeddings" if "embed" in backend else "text_completion"


def provider_of(backend: str) -> str:
    """The ``gen_ai.provider.name`` of a backend (its own name when llmload knows no better)."""
    return next((provider for prefix, provider in PROVIDERS if backend.startswith(prefix)), backend or "unknown")


def server_attributes(address: str) -> Attributes:
    """``server.address`` and ``server.port`` of ``host[:port]`` or a URL (its scheme's port when it names
    none); nothing for an empty address."""
    if not address:
        return ()
    parts = urlsplit(address if "://" in address else f"//{address}")
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None and parts.scheme in ("http", "https"):
        port = 443 if parts.scheme == "https" else 80
    host = parts.hostname or address
    return ((SERVER_ADDRESS, host),) + (((SERVER_PORT, port),) if port else ())


class Series:
    """One histogram point: :class:`BucketCounts` (the Prometheus export's) plus the min and max OTLP carries."""

    __slots__ = ("buckets", "high", "low")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.buckets = BucketCounts(bounds)
        self.low = math.inf
        self.high = -math.inf

    def observe(self, value: float) -> None:
        self.buckets.observe(value)
        self.low = min(self.low, value)
        self.high = max(self.high, value)

    def observe_many(self, values: np.ndarray) -> None:
        if len(values):
            self.buckets.observe_many(values)
            self.low = min(self.low, float(values.min()))
            self.high = max(self.high, float(values.max()))


class RunTotals:
    """Every point of a run's metrics, keyed by metric name and attribute set, filled a record at a time (one
    pass over the records, which may be a generator)."""

    def __init__(self, server: Attributes = (), extra: Mapping[str, str] | None = None) -> None:
        self.server = server
        self.extra: Attributes = tuple((extra or {}).items())
        self.histograms: dict[tuple[str, Attributes], Series] = {}
        self.counters: dict[tuple[str, Attributes], int] = {}
        self._bases: dict[tuple[str, str, str], Attributes] = {}

    def base(self, record: Any) -> Attributes:
        """The attributes every point of this record carries (cached: a run has a few combinations)."""
        key = (record.backend, record.model, record.user_class)
        found = self._bases.get(key)
        if found is None:
            backend, model, user_class = key
            found = ((OPERATION, operation_of(backend)), (PROVIDER, provider_of(backend)),
                     *(((REQUEST_MODEL, model),) if model else ()), *self.server,
                     *(((USER_CLASS, user_class),) if user_class else ()))
            # the run's attributes come last and win over a computed one of the same name
            found = tuple({**dict(found), **dict(self.extra)}.items())
            self._bases[key] = found
        return found

    def series(self, name: str, attributes: Attributes) -> Series:
        found = self.histograms.get((name, attributes))
        if found is None:
            bounds = METRICS[name][2]
            assert bounds is not None, name
            found = self.histograms[(name, attributes)] = Series(bounds)
        return found

    def count(self, name: str, attributes: Attributes, amount: int = 1) -> None:
        self.counters[(name, attributes)] = self.counters.get((name, attributes), 0) + amount

    def add(self, record: Any) -> None:
        """File one finished record: its outcome, and for a completed one its tokens and timings (the values of
        :mod:`llmload.metrics.definitions`, as the Prometheus export's)."""
        base = self.base(record)
        completed = is_completed(record)
        kind = "" if completed else kind_of(record)
        outcome = ("completed" if completed else "cut_off" if record.cut_off
                   else "cancelled" if kind == CANCELLED else "failed")
        failure: Attributes = ((ERROR_TYPE, kind),) if kind and kind != CANCELLED else ()
        self.count(REQUESTS, (*base, (OUTCOME, outcome), *failure))
        e2e = e2el_s(record)
        if e2e is not None and outcome != "cancelled":  # a failure with no event has no measured duration
            self.series(DURATION, (*base, *failure)).observe(e2e)
        if not completed:
            return
        operation = dict(base)[OPERATION]
        for token_type, amount in (("input", server_input_tokens(record)), ("output", output_tokens(record))):
            typed = (*base, (TOKEN_TYPE, token_type))
            self.count(TOKENS, typed, amount)
            if token_type == "input" or operation in STREAMED:
                self.series(TOKEN_USAGE, typed).observe(amount)
        if operation not in STREAMED:
            return
        for name, value in ((TIME_TO_FIRST_CHUNK, ttft_s(record)), (TPOT, tpot_s(record))):
            if value is not None:
                self.series(name, base).observe(value)
        self.series(TIME_PER_OUTPUT_CHUNK, base).observe_many(itl_array(record))


def metrics_data(totals: RunTotals, service_name: str, start_ns: int, now_ns: int) -> Any:
    """The SDK's ``MetricsData`` of the run: cumulative points from ``start_ns`` (the push's start; the records'
    clocks are ``perf_counter``, not wall time) to ``now_ns``, under a resource of their own."""
    from opentelemetry.sdk.metrics.export import (
        AggregationTemporality,
        Histogram,
        HistogramDataPoint,
        Metric,
        MetricsData,
        NumberDataPoint,
        ResourceMetrics,
        ScopeMetrics,
        Sum,
    )
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    cumulative = AggregationTemporality.CUMULATIVE
    metrics = []
    for name, (unit, description, bounds) in METRICS.items():
        if bounds is None:
            numbers = [NumberDataPoint(dict(attrs), start_ns, now_ns, value)
                       for (metric, attrs), value in totals.counters.items() if metric == name]
            data: Any = Sum(numbers, cumulative, is_monotonic=True) if numbers else None
        else:
            points = [HistogramDataPoint(dict(attrs), start_ns, now_ns, s.buckets.count, s.buckets.sum,
                                         s.buckets.counts.tolist(), s.buckets.bounds, s.low, s.high)
                      for (metric, attrs), s in totals.histograms.items() if metric == name and s.buckets.count]
            data = Histogram(points, cumulative) if points else None
        if data is not None:
            metrics.append(Metric(name, description, unit, data))
    scope = InstrumentationScope("llmload", _version())
    resource = Resource.create({"service.name": service_name})
    return MetricsData([ResourceMetrics(resource, [ScopeMetrics(scope, metrics, "")], "")])


def _version() -> str | None:
    """llmload's version for the instrumentation scope (None: run from a tree that is not installed)."""
    with suppress(metadata.PackageNotFoundError):
        return metadata.version("llmload")
    return None


# -- the push ---------------------------------------------------------------------------------------------


def push_run_metrics(endpoint: str, records: Iterable[Any], *, service_name: str = "llmload",
                     server_address: str = "", run_attributes: Mapping[str, str] | None = None,
                     timeout_s: float = 10.0) -> str | None:
    """Push the run's metrics; returns None when the collector took them, else a one-line warning (never raises
    for network/collector errors).

    ``endpoint``: the collector's OTLP/HTTP base URL (``http://collector:4318``); the data goes to
    ``<endpoint>/v1/metrics`` (an endpoint that already ends so is used as it is). ``server_address``: the
    measured server (``host:port`` or its base URL), for ``server.address``/``server.port``.
    ``run_attributes``: added to every point. The push gives up after ``timeout_s`` (the SDK's retries of a
    refused connection or a 429/502/503/504 included)."""
    start_ns = time.time_ns()
    url = endpoint.rstrip("/")
    url = url if url.endswith("/v1/metrics") else f"{url}/v1/metrics"
    shown = redact_url(url)
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.sdk.metrics.export import MetricExportResult
    except ImportError as error:
        return (f"OTLP push to {shown}: the OpenTelemetry SDK is not installed ({error.name or error}; "
                f"pip install 'llmload[otlp]'); {WARNING_TAIL}")
    totals = RunTotals(server_attributes(server_address), run_attributes)
    for record in records:
        totals.add(record)
    session = _watched_session()
    try:
        exporter = OTLPMetricExporter(endpoint=url, timeout=timeout_s, session=session)
        data = metrics_data(totals, service_name, start_ns, time.time_ns())
    except Exception as error:  # a bad environment setting (headers, certificates) must not end the run
        return f"OTLP push to {shown}: {_one_line(error)}; {WARNING_TAIL}"
    done, result = _export_within(lambda: exporter.export(data, timeout_millis=timeout_s * 1000.0), timeout_s)
    exporter.shutdown()  # closes its connections, and stops the retries of an export given up on
    if done and result == MetricExportResult.SUCCESS:
        return None
    if not done:
        why = f"no answer within {timeout_s:g} s" + (f" ({session.failure})" if session.failure else "")
    else:
        why = _one_line(result) if isinstance(result, BaseException) else session.failure or "export failed"
    return f"OTLP push to {shown}: {why}; {WARNING_TAIL}"


def _export_within(export: Callable[[], Any], timeout_s: float) -> tuple[bool, Any]:
    """Run ``export`` with the SDK's logs muted, in a thread of its own, waiting at most ``timeout_s``: the
    exporter keeps to its timeout, but a name lookup or a connect can outlast it, and the end of a run must not
    hang on a collector. Returns (finished, its result or the exception it raised)."""
    outcome: list[Any] = []

    def work() -> None:
        with quiet_sdk_logs():  # the muting ends with the export, even one given up on
            try:
                outcome.append(export())
            except Exception as error:  # the SDK catches its own; this is a last resort
                outcome.append(error)

    thread = threading.Thread(target=work, name="llmload-otlp-push", daemon=True)
    thread.start()
    thread.join(timeout_s)
    return (bool(outcome), outcome[0] if outcome else None)


@contextmanager
def quiet_sdk_logs() -> Iterator[None]:
    """Mute the OpenTelemetry loggers for the push, restoring their levels after: the SDK logs every failed try
    (and its retries) as errors, and the user should see the one warning line the push returns."""
    manager = logging.Logger.manager
    loggers = [logging.getLogger(SDK_LOGGER)] + [
        logger for name, logger in list(manager.loggerDict.items())
        if name.startswith(f"{SDK_LOGGER}.") and isinstance(logger, logging.Logger) and logger.level]
    saved = [(logger, logger.level) for logger in loggers]
    for logger, _level in saved:
        logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for logger, level in saved:
            logger.setLevel(level)


def _watched_session() -> Any:
    """A ``requests`` session (the exporter's public ``session`` argument) that remembers why the last POST
    failed: the exporter's result says only that it did."""
    import requests

    class WatchedSession(requests.Session):
        failure = ""

        def request(self, method: str, url: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                response = super().request(method, url, *args, **kwargs)
            except requests.Timeout:
                self.failure = "the collector did not answer in time"
                raise
            except requests.RequestException as error:
                self.failure = _connect_failure(error)
                raise
            if response.status_code >= 400:
                self.failure = f"the collector answered HTTP {response.status_code} {response.reason or ''}".strip()
            return response

    return WatchedSession()


def _connect_failure(error: BaseException) -> str:
    """A short reason for a failed connection ("connection refused" rather than urllib3's nested repr)."""
    text = str(error).lower()
    if "refused" in text:
        return "connection refused"
    if "name or service not known" in text or "nodename nor servname" in text or "failed to resolve" in text:
        return "host not found"
    return _one_line(error)


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    text = text if len(text) <= 200 else f"{text[:197]}..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__

