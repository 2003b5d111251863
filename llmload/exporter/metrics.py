"""llmload's own live metrics, for Prometheus: what the client measured, as it happens.

One :class:`LiveExporter` per run, on a registry of its own (never prometheus_client's global one). The record
listeners hand it every finished record once (:meth:`LiveExporter.observe`); the per-request values are those of
:mod:`llmload.metrics.definitions`, so a scrape at the end of a run agrees with the result JSON (a backend whose
output tokens are re-tokenized after the run is the one exception: live, they are its event count). Names, labels
and what Grafana computes from them: docs/observability.md, "llmload's own metrics".
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from llmload.client.failures import CANCELLED, KINDS, kind_of
from llmload.exporter.collector import Family, snapshot
from llmload.metrics.definitions import (
    e2el_s,
    is_completed,
    itl_array,
    output_tokens,
    schedule_lag_s,
    server_input_tokens,
    tpot_s,
    ttft_s,
)

if TYPE_CHECKING:
    from llmload.client.records import RequestRecord
    from llmload.exporter.server import Endpoint, MetricsServer

#: upper bounds, seconds. TTFT: a fast prefill (ms) up to a queue of minutes, as vLLM's own spread
TTFT_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0, 160.0)
#: ITL and TPOT: most decodes take 5-100 ms a token; stalls of seconds must still show
TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15,
                 0.2, 0.3, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0)
#: E2E latency: a short answer in a fraction of a second to long generations of many minutes
E2E_BUCKETS = (0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0,
               120.0, 240.0, 480.0, 960.0)
#: schedule lag: healthy is well under a millisecond; tens of ms mean the client is the bottleneck
LAG_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

#: the outcomes of ``llmload_requests_total`` (they add up to the requests sent, as in the result JSON)
OUTCOMES = ("completed", "failed", "cancelled", "cut_off")
CLASS = "user_class"
#: the label of the model or LoRA adapter a request named, on every series of a run that names several
MODEL = "model"

#: key -> (family name, help, extra labels, buckets or None for a counter)
FAMILIES: dict[str, tuple[str, str, tuple[str, ...], tuple[float, ...] | None]] = {
    "requests": ("llmload_requests_total", "Requests that ended, by outcome (completed, failed, cancelled, cut_off).",
                 ("outcome",), None),
    "errors": ("llmload_errors_total", "Requests that did not complete, by failure kind (docs/reliability.md).",
               ("kind",), None),
    "output_tokens": ("llmload_output_tokens_total", "Output tokens of completed requests.", (), None),
    "input_tokens": ("llmload_input_tokens_total", "Prompt tokens of completed requests (the server's "
                     "usage.prompt_tokens where reported, else the dataset's: the result's total_input_tokens).",
                     (), None),
    "ttft": ("llmload_ttft_seconds", "Time to first token of completed requests.", (), TTFT_BUCKETS),
    "itl": ("llmload_itl_seconds", "Inter-token latency: every gap between counted events of completed requests.",
            (), TOKEN_BUCKETS),
    "tpot": ("llmload_tpot_seconds", "Time per output token after the first, of completed requests with 2+ tokens.",
             (), TOKEN_BUCKETS),
    "e2el": ("llmload_e2e_latency_seconds", "End-to-end latency of completed requests.", (), E2E_BUCKETS),
    "schedule_lag": ("llmload_schedule_lag_seconds",
                     "How late the client released each open-loop request after its scheduled time.", (),
                     LAG_BUCKETS),
}
IN_FLIGHT = "llmload_requests_in_flight"
#: every metric family name llmload exports (a counter's samples add ``_total``, a histogram's ``_bucket`` ...)
METRIC_NAMES = (*(spec[0] for spec in FAMILIES.values()), IN_FLIGHT)


def sample_names() -> frozenset[str]:
    """Every series name a scrape can show (what a PromQL expression may reference)."""
    names = {IN_FLIGHT}
    for name, _help, _labels, buckets in FAMILIES.values():
        if buckets is None:
            names.add(name)
        else:
            names.update(f"{name}{suffix}" for suffix in ("_bucket", "_sum", "_count"))
    return frozenset(names)


class LiveExporter:
    """The live metrics of one run. ``classes``: the run's user class names; with two or more, every series
    carries ``user_class`` (else it is ``""``, which Prometheus stores as no label). ``models``: the names its
    requests choose from (``--model a,b``, ``--lora-modules``); with two or more, every series also carries
    ``model``. ``schedule_lag`` false: the schedule has every request due at once (``--request-rate inf``), where
    lag is spawning time, not client lag.

    Called from the run's greenlets; the lock also keeps a scrape from a real thread consistent."""

    def __init__(self, classes: Sequence[str] = (), *, models: Sequence[str] = (), schedule_lag: bool = True) -> None:
        self.by_class = len(set(classes)) > 1
        self.by_model = len(set(models)) > 1
        self.schedule_lag = schedule_lag
        self.registry = CollectorRegistry(auto_describe=False)
        self._lock = threading.Lock()
        parts = (CLASS, MODEL) if self.by_model else (CLASS,)
        self._families = {key: Family(name, help_text, (*parts, *labels), buckets)
                          for key, (name, help_text, labels, buckets) in FAMILIES.items()}
        self._in_flight: Callable[[], float | None] = lambda: None
        self._server: MetricsServer | None = None
        for name in sorted(set(classes)) if self.by_class else ("",):
            for model in sorted(set(models)) if self.by_model else ("",):
                self._touch_part(self._part(name, model))
        self.registry.register(self)

    def _part(self, user_class: str, model: str) -> tuple[str, ...]:
        """The label values that say whose a series is: the class, and the model when the run names several."""
        return (user_class, model) if self.by_model else (user_class,)

    def _touch_part(self, part: tuple[str, ...]) -> None:
        """Every series of a class (and model) at zero, so the first increase of each is seen by ``rate()``."""
        families = self._families
        for outcome in OUTCOMES:
            families["requests"].touch((*part, outcome))
        for kind in KINDS:
            if kind != CANCELLED:
                families["errors"].touch((*part, kind))
        for key, family in families.items():
            if key not in ("requests", "errors"):
                family.touch(part)

    # -- feeding it ----------------------------------------------------------------------------------------

    def observe(self, record: RequestRecord) -> None:
        """Count one finished record (a record listener: called once per request)."""
        part = self._part(record.user_class if self.by_class else "", record.model)
        completed = is_completed(record)
        outcome = ("completed" if completed else "cut_off" if record.cut_off
                   else "cancelled" if record.cancelled else "failed")
        lag = schedule_lag_s(record) if self.schedule_lag else None
        f = self._families
        with self._lock:
            if (*part, outcome) not in f["requests"].series:
                self._touch_part(part)
            f["requests"].inc((*part, outcome))
            if lag is not None:
                f["schedule_lag"].histogram(part).observe(lag)
            if not completed:
                if outcome != "cancelled":  # a cancel is no failure (--cancel-rate)
                    f["errors"].inc((*part, kind_of(record)))
                return
            f["output_tokens"].inc(part, output_tokens(record))
            f["input_tokens"].inc(part, server_input_tokens(record))
            for key, value in (("ttft", ttft_s(record)), ("tpot", tpot_s(record)), ("e2el", e2el_s(record))):
                if value is not None:
                    f[key].histogram(part).observe(value)
            f["itl"].histogram(part).observe_many(itl_array(record))

    def set_in_flight(self, count: float | None) -> None:
        """Requests in flight now (None: unknown, the gauge is left out)."""
        self._in_flight = lambda: count

    def in_flight_from(self, read: Callable[[], float | None]) -> None:
        """Read the in-flight count at each scrape (None: unknown, left out)."""
        self._in_flight = read

    # -- reading it ----------------------------------------------------------------------------------------

    def collect(self) -> Iterator[Any]:
        """The registry's collector protocol: a consistent snapshot of every family."""
        with self._lock:
            families = snapshot(self._families.values())
        yield from families
        count = self._in_flight()
        if count is not None:
            yield GaugeMetricFamily(IN_FLIGHT, "Requests sent and not yet answered.", value=float(count))

    def exposition(self) -> bytes:
        """The text format a scrape gets."""
        return generate_latest(self.registry)

    # -- serving it ----------------------------------------------------------------------------------------

    @property
    def scrapes(self) -> int:
        """Scrapes answered so far (0 when not serving)."""
        return self._server.scrapes if self._server is not None else 0

    @property
    def url(self) -> str:
        return self._server.url if self._server is not None else ""

    def start(self, host: str, port: int) -> str:
        """Serve ``/metrics`` on ``host:port`` (0: a free port) in gevent's loop; returns the URL.
        :class:`~llmload.common.errors.ConfigError` when it cannot listen there."""
        from llmload.exporter.server import bind

        return self.serve(bind(host, port))

    def serve(self, endpoint: Endpoint) -> str:
        """Serve ``/metrics`` on a socket :func:`~llmload.exporter.server.bind` already holds."""
        from llmload.exporter.server import MetricsServer

        self.stop()
        self._server = MetricsServer(endpoint, self.registry)
        self._server.start()
        return self._server.url

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
