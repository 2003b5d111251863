"""Watching a run while it goes: the server's own metrics (scraped from its ``/metrics``, off the streaming path)
and the saturation test on the backlog, for ``llmload bench`` and ``locust -f`` alike (docs/observability.md).

A :class:`RunObserver` samples every :data:`SAMPLE_S` seconds: requests in flight (a callable the way in gives it),
requests finished so far (:meth:`RunObserver.on_record`, a sink listener) and the server's waiting queue from the
latest scrape. With ``stop_on_saturation`` a saturated open loop is stopped through the run's stop event, and the
outcome says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter
from typing import Any
from urllib.parse import urlsplit

import gevent
from gevent.event import Event

from llmload.core.saturation import SaturationMonitor, SaturationRule, Verdict
from llmload.options import option_value

#: seconds between two samples of the backlog
SAMPLE_S = 0.5


@dataclass
class Observed:
    """What the observer saw, for the summary, the result JSON and the series file."""

    #: the scrapes (a :class:`~llmload.servermetrics.log.SnapshotLog` while scraped here)
    snapshots: Sequence[Any] = field(default_factory=list)
    server: dict[str, Any] | None = None
    saturation: Verdict | None = None
    stopped_on_saturation: bool = False
    scrape_url: str = ""
    #: the GPU telemetry's scrapes (:class:`~llmload.energy.summary.GpuScrape`), where it came from, and
    #: ``--energy-price-kwh``
    gpu_scrapes: Sequence[Any] = field(default_factory=list)
    gpu_sources: dict[str, Any] | None = None
    energy_price_kwh: float | None = None

    def energy(self, metrics: Any) -> dict[str, Any]:
        """The energy keys over the run (:func:`llmload.energy.summary.energy_keys`; {} without telemetry)."""
        if not self.gpu_scrapes or metrics is None:
            return {}
        from llmload.energy.summary import energy_keys

        return energy_keys(self.gpu_scrapes, output_tokens=metrics.total_output, completed=metrics.completed,
                           price_kwh=self.energy_price_kwh)

    def summary_text(self, metrics: Any = None) -> str:
        """The summary's Server metrics block, the GPU energy block (given the run's metrics) and the saturation
        verdict ('' when there is none of them)."""
        lines = []
        energy = self.energy(metrics)
        if energy:
            from llmload.energy.report import format_energy_block

            lines.append(format_energy_block(energy))
        if self.server is not None:
            from llmload.servermetrics.summarize import format_block

            block = format_block(self.server)
            if block:
                lines.append(block)
        verdict = self.saturation
        if verdict is not None and verdict.saturated:
            what = "requests in flight" if verdict.signal == "in_flight" else "the server's waiting queue"
            lines.append(f"WARNING: THE SERVER WAS SATURATED from {verdict.since_s:.0f} s on: {what} grew by "
                         f"{verdict.growth:.0f} while throughput stayed at {verdict.throughput_rps:.2f} req/s; "
                         "latencies after that measure the queue")
            if self.stopped_on_saturation:
                lines.append(f"{'Stopped on saturation:':<40} {'yes':<10}")
        return "\n".join(lines)

    def result_keys(self, metrics: Any = None) -> dict[str, Any]:
        """llmload's own result JSON keys: the energy keys (with GPU telemetry and the run's metrics; vLLM's
        ``gpu_energy_*`` names at the top, the per-GPU summary under ``gpu_metrics``), ``server_metrics`` (when
        scraped) and ``saturation`` (open loop)."""
        out: dict[str, Any] = {}
        energy = self.energy(metrics)
        if energy:
            gpus = energy.pop("gpus")
            out.update(energy)
            out["gpu_metrics"] = {**(self.gpu_sources or {}), "gpus": gpus}
        if self.server is not None:
            out["server_metrics"] = self.server
        if self.saturation is not None:
            out["saturation"] = {**self.saturation.to_dict(), "stopped_run": self.stopped_on_saturation}
        return out


def save_series(observed: Observed | None, records_path: Path, say: Callable[[str], None]) -> Path | None:
    """The scraped series next to the records file (``X.server_metrics.jsonl``), on the records' clock, for
    every way in (``llmload bench --save-result``, ``locust -f --llm-records``). A failure is one line; the
    records already written stay. Returns the path written, or None."""
    if observed is not None and observed.gpu_scrapes:
        from llmload.energy.report import save_gpu_series

        save_gpu_series(observed.gpu_scrapes, records_path, say)
    if observed is None or not observed.snapshots:
        return None
    from llmload.core.messages import clock_offset
    from llmload.servermetrics.log import SnapshotLog
    from llmload.servermetrics.store import series_path_for, write_series

    path = series_path_for(records_path)
    try:
        if isinstance(observed.snapshots, SnapshotLog):
            observed.snapshots.save(path)
        else:
            write_series(path, observed.snapshots, clock_offset())
    except OSError as exc:
        say(f"error: cannot write the server's metrics to {path}: {exc.strerror or exc}")
        return None
    say(f"wrote the server's metrics ({len(observed.snapshots)} scrapes) to {path}")
    return path


def same_origin(a: str, b: str) -> bool:
    """Whether two URLs name the same scheme, host and port: only then does the API key go along."""
    pa, pb = urlsplit(a), urlsplit(b)
    return (pa.scheme, pa.hostname, pa.port) == (pb.scheme, pb.hostname, pb.port)


def server_scraper(options: Any, base_url: str, api_key: str | None, say: Callable[[str], None]) -> Any | None:
    """A :class:`~llmload.servermetrics.Scraper` for the run, or None: off (``--no-server-metrics``), or the
    endpoint does not answer with metrics (a warning when it was named with ``--server-metrics-url``; the default
    ``<base-url>/metrics`` is tried quietly). Never fatal."""
    if getattr(options, "no_server_metrics", False) or not base_url:
        return None
    from llmload.common.urls import redact_url
    from llmload.servermetrics import Scraper, metrics_url, probe

    named = getattr(options, "server_metrics_url", "") or ""
    url = named or metrics_url(base_url)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key and same_origin(url, base_url) else None
    interval = float(option_value(options, "server_metrics_interval"))
    answer = probe(url, timeout=min(5.0, max(1.0, 2 * interval)), headers=headers)
    if answer is not True:
        if named:
            say(f"warning: --server-metrics-url {redact_url(url)}: {answer}; the run goes on without server metrics")
        else:
            say(f"No server metrics at {redact_url(url)} ({answer}); --server-metrics-url names another endpoint")
        return None
    say(f"Scraping the server's metrics at {redact_url(url)} every {interval:g} s")
    return Scraper(url, interval, headers=headers)


class RunObserver:
    """Scrapes the server and judges saturation while a run goes (either may be off)."""

    def __init__(self, scraper: Any | None, rule: SaturationRule | None, in_flight: Callable[[], int],
                 stop: Event | None = None, stop_on_saturation: bool = False,
                 log: Callable[[str], None] = lambda _m: None, telemetry: Any = None,
                 energy_price_kwh: float | None = None) -> None:
        self.scraper = scraper
        #: GPU telemetry (:class:`~llmload.energy.telemetry.GpuTelemetry`), scraped beside the server's metrics
        self.telemetry = telemetry
        self.energy_price_kwh = energy_price_kwh
        self.monitor = SaturationMonitor(rule) if rule is not None else None
        self.in_flight = in_flight
        self.stop_event = stop
        self.stop_on_saturation = stop_on_saturation
        self.log = log
        self.completed = 0
        #: completed requests' waits from intended send to first token: their sum and count (the queue test)
        self.wait_sum = 0.0
        self.wait_count = 0
        self.start = 0.0
        self.end = 0.0
        self.reported: Verdict | None = None
        self.stopped_on_saturation = False
        self._greenlet: gevent.Greenlet | None = None
        #: the way in's greenlet that ends the run when ``stop`` is set (``locust -f``), if it has one
        self.ender: gevent.Greenlet | None = None

    def on_record(self, record: Any) -> None:
        self.completed += 1
        first = getattr(record, "first_token", None)
        if first is not None:
            sent = getattr(record, "intended_send", None) or record.start
            self.wait_sum += first - sent
            self.wait_count += 1

    def begin(self) -> None:
        self.start = perf_counter()
        if self.monitor is not None:
            self.monitor.start = self.start
        if self.scraper is not None:
            self.scraper.start()
        if self.telemetry is not None:
            self.telemetry.start()
        if self.monitor is not None:
            self._greenlet = gevent.spawn(self._watch)

    def finish(self) -> Observed:
        """Stop watching (one last scrape) and say what was seen."""
        self.end = perf_counter()
        if self._greenlet is not None:
            self._greenlet.kill()
        observed = Observed(stopped_on_saturation=self.stopped_on_saturation, energy_price_kwh=self.energy_price_kwh)
        if self.telemetry is not None:
            self.telemetry.stop()
            observed.gpu_scrapes, observed.gpu_sources = self.telemetry.scrapes, self.telemetry.describe()
        if self.scraper is not None:
            from llmload.servermetrics.summarize import summarize

            self.scraper.stop()
            observed.snapshots = self.scraper.snapshots
            observed.scrape_url = getattr(self.scraper, "shown_url", "")
            observed.server = summarize(self.scraper.snapshots.slim(), self.start, self.end, failures=self.scraper.failures,
                                        first_error=self.scraper.first_error)
        if self.monitor is not None:
            observed.saturation = self.monitor.verdict()
        return observed

    def _waiting(self) -> float | None:
        if self.scraper is None or not self.scraper.snapshots:
            return None
        return self.scraper.snapshots[-1].series.get("waiting")

    def _watch(self) -> None:
        assert self.monitor is not None
        checks = 0
        while True:
            gevent.sleep(SAMPLE_S)
            self.monitor.add(perf_counter(), self.in_flight(), self.completed, self._waiting(), self.wait_sum,
                             self.wait_count)
            checks += 1
            if checks % 4 or self.reported is not None:
                continue
            verdict = self.monitor.verdict()
            if not verdict.saturated:
                continue
            self.reported = verdict
            what = "requests in flight" if verdict.signal == "in_flight" else "the server's waiting queue"
            self.log(f"the server looks saturated since {verdict.since_s:.0f} s into the run: {what} grew by "
                     f"{verdict.growth:.0f} while throughput stayed at {verdict.throughput_rps:.2f} requests/s")
            if self.stop_on_saturation and self.stop_event is not None:
                self.log("--stop-on-saturation: stopping the run")
                self.stopped_on_saturation = True
                self.stop_event.set()
                return
