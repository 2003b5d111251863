"""Scrape the server's Prometheus metrics during a run and say what they show.

    parse       parse_exposition(text) -> [Sample]; ExpositionError (prometheus_client's parser underneath)
    engines     detect_engine(samples), common_series(samples, engine): vLLM / SGLang / TGI names -> common ones
    snapshot    Snapshot (one scrape), build_snapshot
    fetch       fetch(url, timeout) on gevent sockets, failure kinds, metrics_url(base_url)
    scraper     Scraper(url, interval_s, timeout_s, headers): start() / stop(); probe(url, timeout)
    store       write_series / read_series (JSON lines next to the records), series_path_for(records_path)
    summarize   summarize(snapshots, start, end) -> dict; format_block(summary) -> the printed block

The modules that need gevent (``fetch``, ``scraper``) load on first use of their names, so that reading a
series file (``llmload report``) does not import gevent.
"""

from __future__ import annotations

from typing import Any

from llmload.servermetrics.engines import (
    COMMON_HISTOGRAMS,
    COMMON_SERIES,
    ENGINES,
    common_series,
    detect_engine,
)
from llmload.servermetrics.parse import ExpositionError, Sample, parse_exposition, sample_key
from llmload.servermetrics.snapshot import Snapshot, build_snapshot
from llmload.servermetrics.store import read_series, series_path_for, write_series
from llmload.servermetrics.summarize import format_block, summarize

_LAZY = {
    "Scraper": "scraper",
    "probe": "scraper",
    "fetch": "fetch",
    "metrics_url": "fetch",
    "ScrapeError": "fetch",
    "FAILURE_KINDS": "fetch",
}

__all__ = [
    "COMMON_HISTOGRAMS", "COMMON_SERIES", "ENGINES", "FAILURE_KINDS", "ExpositionError", "Sample", "ScrapeError",
    "Scraper", "Snapshot", "build_snapshot", "common_series", "detect_engine", "fetch", "format_block",
    "metrics_url", "parse_exposition", "probe", "read_series", "sample_key", "series_path_for", "summarize",
    "write_series",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
