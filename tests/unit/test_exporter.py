"""llmload's live metrics (llmload.exporter): synthetic records in, the exposition text parsed back by
prometheus_client out; buckets as Prometheus counts them; serving /metrics in gevent's loop; binding errors."""

from __future__ import annotations

import argparse
import math
import socket

import gevent
import numpy as np
import prometheus_client
import pytest
from gevent import socket as gsocket
from prometheus_client.parser import text_string_to_metric_families

from llmload.client.failures import CUT_OFF, HTTP_5XX, KINDS, READ_TIMEOUT
from llmload.client.records import RequestRecord
from llmload.common.errors import ConfigError
from llmload.exporter import IN_FLIGHT, METRIC_NAMES, LiveExporter, bind, sample_names
from llmload.exporter.collector import BucketCounts
from llmload.exporter.metrics import FAMILIES, OUTCOMES
from llmload.exporter.wiring import RunExporter, bind_from_options


def completed(start: float, gaps: list[float], *, cls: str = "", prompt: int = 10, lag: float | None = None,
              tokens: int | None = None) -> RequestRecord:
    """A completed request: first token ``gaps[0]`` after ``start``, then one event per later gap."""
    times = list(np.cumsum([start, *gaps])[1:])
    record = RequestRecord(start=start, first_token=times[0], chunk_times=times, chunk_tokens=[1] * len(times),
                           output_tokens=tokens if tokens is not None else len(times), success=True,
                           prompt_len=prompt, user_class=cls)
    if lag is not None:
        record.intended_send = start - 0.5
        record.dispatched_at = record.intended_send + lag
    return record


def failed(kind: str, *, cls: str = "") -> RequestRecord:
    return RequestRecord(start=1.0, failure_kind=kind, error="x", user_class=cls, prompt_len=99, output_tokens=7,
                         cut_off=kind == CUT_OFF)


def test_a_cancelled_request_is_its_own_outcome_and_no_error() -> None:
    exporter = LiveExporter()
    record = failed("cancelled")
    record.cancelled = True
    for r in (record, failed(HTTP_5XX)):
        exporter.observe(r)
    s = scrape(exporter)
    assert value(s, "llmload_requests_total", outcome="cancelled", user_class="") == 1
    assert value(s, "llmload_requests_total", outcome="failed", user_class="") == 1
    assert sum(s["llmload_errors_total"].values()) == 1
    assert all(dict(labels)["kind"] != "cancelled" for labels in s["llmload_errors_total"])


def scrape(exporter: LiveExporter) -> dict[str, dict[tuple, float]]:
    """sample name -> {sorted label items: value}, from the text format."""
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(exporter.exposition().decode()):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def value(samples: dict, name: str, **labels: str) -> float:
    return samples[name][tuple(sorted(labels.items()))]


RECORDS = [
    completed(10.0, [0.05, 0.01, 0.02, 0.03], lag=0.002),
    completed(20.0, [0.2, 0.01], prompt=30, lag=0.0),
    completed(32.0, [0.25], prompt=5),  # one token: no TPOT, no ITL
    failed(HTTP_5XX),
    failed(HTTP_5XX),
    failed(READ_TIMEOUT),
    failed(CUT_OFF),
]


def test_counts_and_sums_match_the_records() -> None:
    exporter = LiveExporter()
    for r in RECORDS:
        exporter.observe(r)
    s = scrape(exporter)
    assert value(s, "llmload_requests_total", outcome="completed", user_class="") == 3
    assert value(s, "llmload_requests_total", outcome="failed", user_class="") == 3
    assert value(s, "llmload_requests_total", outcome="cut_off", user_class="") == 1
    assert value(s, "llmload_errors_total", kind=HTTP_5XX, user_class="") == 2
    assert value(s, "llmload_errors_total", kind=READ_TIMEOUT, user_class="") == 1
    assert value(s, "llmload_errors_total", kind=CUT_OFF, user_class="") == 1
    # failed and cut-off requests count no tokens (as the result JSON)
    assert value(s, "llmload_output_tokens_total", user_class="") == 4 + 2 + 1
    assert value(s, "llmload_input_tokens_total", user_class="") == 10 + 30 + 5
    done = RECORDS[:3]
    assert value(s, "llmload_ttft_seconds_count", user_class="") == 3
    assert value(s, "llmload_ttft_seconds_sum", user_class="") == pytest.approx(sum(r.ttft for r in done))
    itls = [x for r in done for x in r.itls]
    assert value(s, "llmload_itl_seconds_count", user_class="") == len(itls) == 4
    assert value(s, "llmload_itl_seconds_sum", user_class="") == pytest.approx(sum(itls))
    assert value(s, "llmload_tpot_seconds_count", user_class="") == 2
    assert value(s, "llmload_tpot_seconds_sum", user_class="") == pytest.approx(0.06 / 3 + 0.01 / 1)
    assert value(s, "llmload_e2e_latency_seconds_count", user_class="") == 3
    assert value(s, "llmload_e2e_latency_seconds_sum", user_class="") == pytest.approx(sum(r.e2el for r in done))
    assert value(s, "llmload_schedule_lag_seconds_count", user_class="") == 2
    assert value(s, "llmload_schedule_lag_seconds_sum", user_class="") == pytest.approx(0.002)
    # every series of the class exists from the start, at 0 until it happens
    assert value(s, "llmload_errors_total", kind="connect", user_class="") == 0
    assert {dict(labels)["kind"] for labels in s["llmload_errors_total"]} == set(KINDS) - {"cancelled"}  # no error
    assert IN_FLIGHT not in s  # unknown until told


def test_a_histogram_s_buckets_are_cumulative_and_end_at_the_count() -> None:
    exporter = LiveExporter()
    for r in RECORDS:
        exporter.observe(r)
    buckets = scrape(exporter)["llmload_ttft_seconds_bucket"]
    by_le = {float(dict(k)["le"]): v for k, v in buckets.items()}
    assert by_le[0.04] == 0 and by_le[0.06] == 1 and by_le[0.2] == 2 and by_le[0.3] == 3
    assert by_le[math.inf] == 3
    values = [by_le[le] for le in sorted(by_le)]
    assert values == sorted(values)


def test_schedule_lag_can_be_left_out() -> None:
    exporter = LiveExporter(schedule_lag=False)
    exporter.observe(RECORDS[0])
    assert value(scrape(exporter), "llmload_schedule_lag_seconds_count", user_class="") == 0


@pytest.mark.parametrize("bulk", [False, True])
def test_buckets_agree_with_prometheus_client_s_histogram(bulk: bool) -> None:
    bounds = FAMILIES["itl"][3]
    rng = np.random.default_rng(7)
    values = np.concatenate([rng.exponential(0.02, 500), np.asarray(bounds)])  # bounds themselves: le is <=
    mine = BucketCounts(bounds)
    if bulk:
        mine.observe_many(values)
    else:
        for v in values:
            mine.observe(float(v))
    registry = prometheus_client.CollectorRegistry()
    reference = prometheus_client.Histogram("ref", "ref", buckets=bounds, registry=registry)
    for v in values:
        reference.observe(float(v))
    ref = {s.labels["le"]: s.value for s in registry.collect().__next__().samples if s.name == "ref_bucket"}
    assert dict(mine.cumulative()) == ref
    assert mine.count == len(values) and mine.sum == pytest.approx(float(values.sum()))


def test_several_classes_label_every_series() -> None:
    exporter = LiveExporter(["Chat", "Summary"])
    exporter.observe(completed(1.0, [0.1, 0.01], cls="Chat"))
    exporter.observe(completed(2.0, [0.4, 0.01, 0.01], cls="Summary"))
    exporter.observe(failed(HTTP_5XX, cls="Summary"))
    s = scrape(exporter)
    assert value(s, "llmload_requests_total", outcome="completed", user_class="Chat") == 1
    assert value(s, "llmload_requests_total", outcome="failed", user_class="Chat") == 0
    assert value(s, "llmload_requests_total", outcome="failed", user_class="Summary") == 1
    assert value(s, "llmload_ttft_seconds_sum", user_class="Summary") == pytest.approx(0.4)
    assert value(s, "llmload_output_tokens_total", user_class="Chat") == 2
    assert {dict(k)["user_class"] for k in s["llmload_requests_total"]} == {"Chat", "Summary"}


def test_one_class_is_no_label_and_a_class_not_announced_still_counts() -> None:
    single = LiveExporter(["OnlyOne"])
    single.observe(completed(1.0, [0.1], cls="OnlyOne"))
    assert value(scrape(single), "llmload_requests_total", outcome="completed", user_class="") == 1
    several = LiveExporter(["A", "B"])
    several.observe(completed(1.0, [0.1], cls="C"))
    s = scrape(several)
    assert value(s, "llmload_requests_total", outcome="completed", user_class="C") == 1
    assert value(s, "llmload_requests_total", outcome="cut_off", user_class="C") == 0


def test_in_flight_is_a_gauge_read_at_each_scrape() -> None:
    exporter = LiveExporter()
    exporter.set_in_flight(3)
    assert scrape(exporter)[IN_FLIGHT][()] == 3
    state = {"n": 5}
    exporter.in_flight_from(lambda: state["n"])
    state["n"] = 7
    assert scrape(exporter)[IN_FLIGHT][()] == 7
    exporter.set_in_flight(None)
    assert IN_FLIGHT not in scrape(exporter)


def test_names_follow_prometheus_conventions_and_the_global_registry_is_untouched() -> None:
    before = set(prometheus_client.REGISTRY._names_to_collectors)
    exporter = LiveExporter()
    exporter.set_in_flight(0)
    assert set(prometheus_client.REGISTRY._names_to_collectors) == before
    assert all(n.startswith("llmload_") for n in METRIC_NAMES)
    for name, _help, _labels, buckets in FAMILIES.values():
        assert name.endswith("_seconds") if buckets is not None else name.endswith("_total"), name
    parsed = {s.name for f in text_string_to_metric_families(exporter.exposition().decode()) for s in f.samples}
    assert parsed <= sample_names()
    assert "_created" not in exporter.exposition().decode()
    assert {f.name for f in text_string_to_metric_families(exporter.exposition().decode())} >= {
        "llmload_requests", "llmload_ttft_seconds", IN_FLIGHT}
    assert set(OUTCOMES) == {"completed", "failed", "cancelled", "cut_off"}


# -- serving ---------------------------------------------------------------------------------------------------


def http_get(port: int, path: str = "/metrics") -> tuple[int, str]:
    """GET over gevent's socket (the server answers from the same loop)."""
    with gsocket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    if b"transfer-encoding: chunked" in head.lower():
        body = _unchunk(body)
    return int(head.split()[1]), body.decode()


def _unchunk(body: bytes) -> bytes:
    out = b""
    while body:
        size, _, rest = body.partition(b"\r\n")
        n = int(size, 16)
        if n == 0:
            break
        out, body = out + rest[:n], rest[n + 2:]
    return out


def test_serves_metrics_in_gevent_s_loop_and_stops() -> None:
    exporter = LiveExporter()
    exporter.observe(RECORDS[0])
    exporter.set_in_flight(2)
    url = exporter.start("127.0.0.1", 0)
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    try:
        status, text = gevent.spawn(http_get, port).get(timeout=20)
        assert status == 200
        families = {f.name: f for f in text_string_to_metric_families(text)}
        assert families[IN_FLIGHT].samples[0].value == 2
        assert exporter.scrapes == 1
        assert gevent.spawn(http_get, port, "/other").get(timeout=20)[0] == 404
        assert exporter.scrapes == 1
    finally:
        exporter.stop()
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=5):
        pass


def test_a_busy_port_is_a_one_line_usage_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError) as info:
            bind("127.0.0.1", port)
    assert info.value.exit_code == 2
    assert f"--prometheus-port {port}" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(ConfigError):
        bind("no-such-host.invalid", 0)


def test_linger_needs_a_port_and_no_port_is_off() -> None:
    assert bind_from_options(argparse.Namespace(prometheus_port=None, prometheus_linger=0.0)) is None
    with pytest.raises(ConfigError, match="--prometheus-linger needs --prometheus-port"):
        bind_from_options(argparse.Namespace(prometheus_port=None, prometheus_linger=5.0))
    endpoint = bind_from_options(argparse.Namespace(prometheus_port=0, prometheus_host="127.0.0.1",
                                                    prometheus_linger=0.0))
    assert endpoint is not None and endpoint.port > 0
    endpoint.listener.close()


def test_linger_ends_with_the_next_scrape() -> None:
    exporter = LiveExporter()
    url = exporter.start("127.0.0.1", 0)
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    said: list[str] = []
    live = RunExporter(exporter, linger_s=600.0, say=said.append)
    finishing = gevent.spawn(live.finish)
    gevent.sleep(0)  # it announces the linger, then waits
    assert said and "stays up until scraped once more" in said[0]
    assert not finishing.dead
    assert gevent.spawn(http_get, port).get(timeout=20)[0] == 200
    finishing.get(timeout=20)  # returned because of the scrape, long before 600 s
    assert live.exporter is None


def test_off_is_a_no_op() -> None:
    live = RunExporter(None)
    listener = print
    assert live.chain(listener) is listener
    live.finish()


def test_a_run_over_several_models_labels_every_series_with_its_model() -> None:
    exporter = LiveExporter(models=("a", "b"))
    ra, rb = completed(10.0, [0.05, 0.01]), completed(11.0, [0.07, 0.02])
    ra.model, rb.model = "a", "b"
    bad = failed(HTTP_5XX)
    bad.model = "b"
    for r in (ra, rb, bad):
        exporter.observe(r)
    s = scrape(exporter)
    assert value(s, "llmload_requests_total", outcome="completed", user_class="", model="a") == 1
    assert value(s, "llmload_requests_total", outcome="completed", user_class="", model="b") == 1
    assert value(s, "llmload_errors_total", kind=HTTP_5XX, user_class="", model="b") == 1
    assert value(s, "llmload_ttft_seconds_count", user_class="", model="a") == 1
    # one model (the usual run): no model label at all, as before
    single = LiveExporter(models=("a",))
    single.observe(ra)
    assert value(scrape(single), "llmload_requests_total", outcome="completed", user_class="") == 1
