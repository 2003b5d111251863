"""One scrape of a server's metrics, as kept in memory and in the series file."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass, field

from llmload.servermetrics.engines import common_series, detect_engine
from llmload.servermetrics.parse import Sample, sample_key

#: most raw samples one snapshot keeps (a server with per-handler or per-path series can have thousands)
RAW_LIMIT = 2000

Histograms = dict[str, list[tuple[float, float]]]


@dataclass(slots=True)
class Snapshot:
    """What one scrape saw.

    ``t`` is ``time.perf_counter()`` when the response arrived: the clock of ``RequestRecord`` times, so a
    scrape and the requests in flight then line up. ``series`` holds the common names of
    :mod:`llmload.servermetrics.engines` (a histogram ``h`` as ``h_sum`` and ``h_count``) and ``histograms``
    its buckets ``[(le, cumulative count), ...]``. ``raw`` has every sample as ``'name{k="v",...}'`` -> value,
    except histogram buckets (the mapped ones are in ``histograms``) and ``_created`` timestamps, at most
    :data:`RAW_LIMIT` (``raw_dropped`` says how many more there were)."""

    t: float
    wall: float
    engine: str | None
    series: dict[str, float] = field(default_factory=dict)
    histograms: Histograms = field(default_factory=dict)
    raw: dict[str, float] = field(default_factory=dict)
    raw_dropped: int = 0


def raw_samples(samples: Iterable[Sample], limit: int = RAW_LIMIT) -> tuple[dict[str, float], int]:
    """``(raw, dropped)``: the samples :class:`Snapshot` keeps raw, keys interned (shared by every scrape)."""
    raw: dict[str, float] = {}
    dropped = 0
    for s in samples:
        if s.name.endswith(("_bucket", "_created")):
            continue
        if len(raw) >= limit:
            dropped += 1
            continue
        raw[sys.intern(sample_key(s.name, s.labels))] = s.value
    return raw, dropped


def build_snapshot(samples: list[Sample], t: float, wall: float, engine: str | None = None) -> Snapshot:
    """The snapshot of one scrape's samples; ``engine`` is detected from the names when not given."""
    if engine is None:
        engine = detect_engine(samples)
    series, histograms = common_series(samples, engine)
    raw, dropped = raw_samples(samples)
    return Snapshot(t, wall, engine, series, histograms, raw, dropped)
