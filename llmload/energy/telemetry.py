"""GPU telemetry while a run goes: DCGM exporter pages scraped on the server-metrics clock, and local GPUs read
through NVML (``pynvml``, the ``nvidia-ml-py`` package: ``pip install 'llmload[nvml]'``).

Nothing here is ever fatal: a telemetry URL that does not answer, or answers without DCGM series, is one warning
line at the start and is then left out; a scrape that fails later is counted (``gpu_metrics.failures``), not said.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from time import perf_counter, time
from typing import Any
from urllib.parse import urlsplit

import gevent
import gevent.event

from llmload.energy.dcgm import GpuReading, gpu_readings, has_energy
from llmload.energy.summary import GpuScrape
from llmload.servermetrics.fetch import ScrapeError, fetch
from llmload.servermetrics.parse import ExpositionError
from llmload.servermetrics.scraper import Scraper, parse_cooperatively

#: ``--gpu-metrics-url auto`` tries this (dcgm-exporter's default port)
AUTO_URL = "http://localhost:9400/metrics"
#: the simulator's DCGM page, under its base URL
SIM_PATH = "/dcgm/metrics"


class DcgmScraper(Scraper):
    """Scrapes one DCGM exporter page on a schedule; ``scrapes`` holds each scrape's GPU readings."""

    def __init__(self, url: str, interval_s: float = 1.0) -> None:
        super().__init__(url, interval_s)
        self.scrapes: list[GpuScrape] = []
        self._host = urlsplit(url).hostname or ""

    def _run(self) -> None:
        """Scrape at once (the energy interval starts with the run), then half an interval out of step with the
        server's scraper: two scrapes parsed in the same moment hold the event loop twice as long, and the reads
        of the streams wait behind them."""
        self.scrape_once()
        if self._stopping.wait(self.interval_s / 2):
            if self._final:
                self.scrape_once()
            return
        super()._run()

    def scrape_once(self) -> Any:
        try:
            page = fetch(self._url, self.timeout_s, self.headers)
            readings = gpu_readings(parse_cooperatively(page.text), self._host)
        except ScrapeError as exc:
            self._failed(exc.kind, str(exc))
            return None
        except ExpositionError as exc:
            self._failed("garbage", f"{self.shown_url}: {exc}")
            return None
        scrape = GpuScrape(page.t, page.wall, readings)
        self.scrapes.append(scrape)
        return scrape


def probe_dcgm(url: str, timeout: float = 3.0) -> str | None:
    """None when ``url`` answers with GPU power or energy series, else why not (one line)."""
    try:
        page = fetch(url, timeout, None)
        readings = gpu_readings(parse_cooperatively(page.text))
    except (ScrapeError, ExpositionError) as exc:
        return str(exc)
    return None if has_energy(readings) else f"{url}: no DCGM power or energy series on the page"


class NvmlSampler:
    """Reads local GPUs through NVML every ``interval_s`` seconds on a greenlet (each read is a few µs of C)."""

    def __init__(self, nvml: Any, gpu_ids: Sequence[int], interval_s: float = 1.0) -> None:
        self._nvml = nvml
        self._handles = [(i, nvml.nvmlDeviceGetHandleByIndex(i)) for i in gpu_ids]
        self.interval_s = interval_s
        self.scrapes: list[GpuScrape] = []
        self.failures: dict[str, int] = {}
        self.shown_url = "nvml:" + ",".join(str(i) for i, _ in self._handles)
        self._host = socket.gethostname()
        self._stop = gevent.event.Event()
        self._greenlet: gevent.Greenlet | None = None

    def _read(self, index: int, handle: Any) -> GpuReading:
        nvml = self._nvml
        values: dict[str, float] = {"power_w": nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0}
        for name, read in (("energy_mj", lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(handle)),
                           ("util_pct", lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu),
                           ("temp_c", lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))):
            try:
                values[name] = float(read())
            except nvml.NVMLError:  # not every GPU has every counter (total energy: Volta and later)
                pass
        try:
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            values["fb_used_mib"], values["fb_free_mib"] = memory.used / 2**20, memory.free / 2**20
        except nvml.NVMLError:
            pass
        return GpuReading(self._host, str(index), str(nvml.nvmlDeviceGetName(handle)), values)

    def scrape_once(self) -> None:
        try:
            gpus = {r.key: r for r in (self._read(i, h) for i, h in self._handles)}
        except self._nvml.NVMLError as exc:
            self.failures[type(exc).__name__] = self.failures.get(type(exc).__name__, 0) + 1
            return
        self.scrapes.append(GpuScrape(perf_counter(), time(), gpus))

    def start(self) -> None:
        self._greenlet = gevent.spawn(self._run)

    def _run(self) -> None:
        self.scrape_once()
        while not self._stop.wait(self.interval_s):
            self.scrape_once()

    def stop(self) -> None:
        self._stop.set()
        if self._greenlet is not None:
            self._greenlet.join(timeout=2.0)
        self.scrape_once()


def open_nvml(gpu_ids: Sequence[int], interval_s: float, say: Callable[[str], None]) -> NvmlSampler | None:
    """An NVML sampler for ``gpu_ids``, or None after one line saying why not (no pynvml, no GPU, a bad id)."""
    try:
        import pynvml
    except ImportError:
        say("--energy-gpu-ids: pynvml is not installed (pip install 'llmload[nvml]'); the run goes on without "
            "local GPU energy")
        return None
    try:
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        missing = [i for i in gpu_ids if i >= count]
        if missing:
            say(f"--energy-gpu-ids: no GPU {missing[0]} here ({count} found); the run goes on without local GPU "
                "energy")
            return None
        return NvmlSampler(pynvml, gpu_ids, interval_s)
    except pynvml.NVMLError as exc:
        say(f"--energy-gpu-ids: NVML is not available ({exc}); the run goes on without local GPU energy")
        return None


class GpuTelemetry:
    """Every telemetry source of one run, started and stopped together."""

    def __init__(self, sources: Sequence[Any]) -> None:
        self.sources = list(sources)

    def start(self) -> None:
        for source in self.sources:
            source.start()

    def stop(self) -> None:
        for source in self.sources:
            source.stop()

    @property
    def scrapes(self) -> list[GpuScrape]:
        return sorted((s for source in self.sources for s in source.scrapes), key=lambda s: s.t)

    def describe(self) -> dict[str, Any]:
        """Where the readings came from, and the scrapes that failed, by kind."""
        failures: dict[str, int] = {}
        for source in self.sources:
            for kind, n in dict(source.failures).items():
                failures[kind] = failures.get(kind, 0) + n
        return {"sources": [s.shown_url for s in self.sources], "scrapes": len(self.scrapes), "failures": failures}
