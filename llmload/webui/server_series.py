"""The ``server`` key of ``GET /llm/stats``: what the run's scraper has seen of the server's own ``/metrics``
(:class:`llmload.core.observe.RunObserver`, ``locust -f``'s master or local runner), for the tab's Server panel.

It only reads snapshots the scraper already parsed (the request path never parses or fetches), and sends a
bounded series: the last :data:`SERIES_WINDOW_S` seconds, thinned to at most :data:`SERIES_POINTS` points. The
points kept are those whose index in the scrape list is a multiple of the stride, so that a point, once shown,
stays the same from one poll to the next. While a test runs the live observer answers; after it stopped, what
the last test saw (``run.observed``), as the rest of the tab keeps showing the stopped test.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence
from time import perf_counter
from typing import Any

from llmload.servermetrics.engines import COMMON_SERIES
from llmload.servermetrics.snapshot import Snapshot

#: seconds of scrapes the series covers (the last ones)
SERIES_WINDOW_S = 600.0
#: most points the series holds (scrapes faster than one a second are thinned)
SERIES_POINTS = 600
#: the gauges of a series point, after its time
POINT_KEYS = ("running", "waiting", "kv_cache_usage")


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(float(value), digits)


def series_points(snapshots: Sequence[Snapshot], origin: float, now: float,
                  window_s: float = SERIES_WINDOW_S, limit: int = SERIES_POINTS) -> list[list[float | None]]:
    """``[[seconds since origin, running, waiting, kv_cache_usage], ...]`` over the scrapes of the last
    ``window_s`` seconds before ``now`` (``None`` where the server does not export a gauge), at most ``limit``
    of them (and always the latest). ``snapshots`` are in time order, as the scraper appends them."""
    if not snapshots:
        return []
    first = bisect_left(snapshots, now - window_s, key=lambda s: s.t)
    stride = max(1, -(-(len(snapshots) - first) // max(1, limit - 1)))
    start = -(-first // stride) * stride  # the first multiple of the stride in the window
    picked = list(range(start, len(snapshots), stride))
    if not picked or picked[-1] != len(snapshots) - 1:
        picked.append(len(snapshots) - 1)
    out: list[list[float | None]] = []
    for i in picked[-limit:]:
        snap = snapshots[i]
        out.append([round(snap.t - origin, 3), *(_round(snap.series.get(k)) for k in POINT_KEYS)])
    return out


def latest_values(snapshot: Snapshot | None) -> dict[str, float]:
    """The common gauges and counters of one scrape (histogram sums and counts left out)."""
    if snapshot is None:
        return {}
    return {k: snapshot.series[k] for k in COMMON_SERIES if k in snapshot.series}


def _saturated(verdict: Any) -> dict[str, Any] | None:
    if verdict is None or not getattr(verdict, "saturated", False):
        return None
    return {"since_s": _round(verdict.since_s, 3), "signal": verdict.signal}


def _source(run: Any) -> tuple[Sequence[Snapshot], Mapping[str, int], str, Any] | None:
    """``(snapshots, failures, shown url, saturation verdict)`` of the test running, else of the last one; None
    when neither scraped the server."""
    observer = getattr(run, "observer", None)
    if observer is not None:
        scraper = getattr(observer, "scraper", None)
        if scraper is None:
            return None
        return scraper.snapshots, scraper.failures, scraper.shown_url, observer.reported
    observed = getattr(run, "observed", None)
    if observed is None or not (observed.snapshots or observed.scrape_url):
        return None
    failures = (observed.server or {}).get("failures") or {}
    return observed.snapshots, failures, observed.scrape_url, observed.saturation


def server_payload(run: Any, origin: float, *, series: bool = True, now: float | None = None
                   ) -> dict[str, Any] | None:
    """The ``server`` key for ``run`` (a :class:`~llmload.plugin.run.LocustRun`, or None), times in seconds
    since ``origin`` (the tab's test start, the clock of its own series); None when nothing is scraped.
    ``series=False`` leaves the series out (``/llm/stats?series=0``)."""
    found = _source(run) if run is not None else None
    if found is None:
        return None
    snapshots, failures, url, verdict = found
    latest = snapshots[-1] if snapshots else None
    now = perf_counter() if now is None else now
    out: dict[str, Any] = {
        "engine": latest.engine if latest is not None else None,
        "url": url,
        "scrapes": len(snapshots),
        "failures": {k: int(n) for k, n in sorted(failures.items()) if n},
        "latest": latest_values(latest),
        "latest_age_s": _round(now - latest.t, 3) if latest is not None else None,
        "saturated": _saturated(verdict),
    }
    if series:
        out["series"] = series_points(snapshots, origin, now)
    return out
