"""Protects the ``server`` key of ``/llm/stats`` (issue 12): built from the snapshots a run's scraper already holds
(a fake observer and run around real :class:`Snapshot` objects), bounded, stable from one poll to the next, null
when nothing is scraped, and the last test's after a stop."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from llmload.core.observe import Observed
from llmload.core.saturation import Verdict
from llmload.servermetrics.snapshot import Snapshot
from llmload.webui.server import LLMTab
from llmload.webui.server_series import SERIES_POINTS, SERIES_WINDOW_S, series_points, server_payload

ORIGIN = 1000.0


def snap(t: float, running: float, waiting: float, kv: float | None = 0.25, **more: float) -> Snapshot:
    series = {"running": running, "waiting": waiting, **more}
    if kv is not None:
        series["kv_cache_usage"] = kv
    return Snapshot(t=t, wall=1.7e9 + t, engine="vllm", series=series,
                    histograms={"ttft_seconds": [(0.1, 1.0), (float("inf"), 2.0)]},
                    raw={'vllm:num_requests_running{model_name="m"}': running})


def live_run(snapshots: list[Snapshot], failures: dict[str, int] | None = None, reported: Verdict | None = None,
             scraper: bool = True) -> Any:
    """A stand-in for :class:`~llmload.plugin.run.LocustRun` during a test: only what the payload reads."""
    scr = SimpleNamespace(snapshots=snapshots, failures=Counter(failures or {}),
                          shown_url="http://user:***@server:8000/metrics") if scraper else None
    return SimpleNamespace(observer=SimpleNamespace(scraper=scr, reported=reported), observed=None)


def test_nothing_scraped_is_null() -> None:
    assert server_payload(None, ORIGIN) is None
    assert server_payload(SimpleNamespace(observer=None, observed=None), ORIGIN) is None
    assert server_payload(live_run([], scraper=False), ORIGIN) is None  # --no-server-metrics, or no endpoint
    off = Observed()  # the last test had no scraper
    assert server_payload(SimpleNamespace(observer=None, observed=off), ORIGIN) is None


def test_live_payload_from_the_scraper() -> None:
    snaps = [snap(ORIGIN + 1.0, 1, 0, 0.1), snap(ORIGIN + 2.0, 4, 2, 0.5),
             snap(ORIGIN + 3.0, 8, 5, 0.75, preemptions_total=3, ttft_seconds_sum=1.5, ttft_seconds_count=4)]
    verdict = Verdict(saturated=True, since_s=12.5, signal="waiting", growth=9.0, throughput_rps=3.0)
    run = live_run(snaps, {"timeout": 2, "http_error": 0}, verdict)
    out = server_payload(run, ORIGIN, now=ORIGIN + 3.5)
    assert out == {
        "engine": "vllm",
        "url": "http://user:***@server:8000/metrics",
        "scrapes": 3,
        "failures": {"timeout": 2},
        # the common series as scraped; histogram sums and counts are not among them
        "latest": {"running": 8, "waiting": 5, "kv_cache_usage": 0.75, "preemptions_total": 3},
        "latest_age_s": 0.5,
        "saturated": {"since_s": 12.5, "signal": "waiting"},
        "series": [[1.0, 1.0, 0.0, 0.1], [2.0, 4.0, 2.0, 0.5], [3.0, 8.0, 5.0, 0.75]],
    }
    orjson.dumps(out)  # what the route sends
    assert "series" not in server_payload(run, ORIGIN, series=False, now=ORIGIN + 3.5)


def test_first_scrape_pending_and_gauges_missing() -> None:
    pending = server_payload(live_run([], {"connect": 1}), ORIGIN, now=ORIGIN + 1)
    assert pending is not None
    assert pending["scrapes"] == 0 and pending["latest"] == {} and pending["series"] == []
    assert pending["engine"] is None and pending["latest_age_s"] is None and pending["failures"] == {"connect": 1}
    no_kv = server_payload(live_run([snap(ORIGIN + 1, 2, 1, kv=None)]), ORIGIN, now=ORIGIN + 2)
    assert no_kv["series"] == [[1.0, 2.0, 1.0, None]] and "kv_cache_usage" not in no_kv["latest"]
    assert no_kv["saturated"] is None  # not reported (yet)
    quiet = Verdict(saturated=False)
    assert server_payload(live_run([], reported=quiet), ORIGIN)["saturated"] is None


def test_series_is_bounded_in_time_and_points() -> None:
    # 20 minutes scraped every 0.5 s: the series covers the last 10 minutes in at most SERIES_POINTS points
    snaps = [snap(ORIGIN + 0.5 * i, i % 7, i % 3) for i in range(2400)]
    now = snaps[-1].t
    points = series_points(snaps, ORIGIN, now)
    assert len(points) <= SERIES_POINTS
    assert points[-1][0] == pytest.approx(now - ORIGIN)  # always the latest scrape
    assert points[0][0] >= now - ORIGIN - SERIES_WINDOW_S
    assert points[0][0] <= now - ORIGIN - SERIES_WINDOW_S + 2.0  # and the whole window
    times = [p[0] for p in points]
    assert times == sorted(times) and len(set(times)) == len(times)
    # one scrape later, the points shown before are still there (not a new sample of the same data)
    snaps.append(snap(now + 0.5, 1, 1))
    later = series_points(snaps, ORIGIN, now + 0.5)
    assert len(later) <= SERIES_POINTS
    assert set(map(tuple, points[1:-1])) <= set(map(tuple, later))
    assert series_points([], ORIGIN, now) == []


def test_after_the_stop_the_last_tests_scrapes() -> None:
    snaps = [snap(ORIGIN + 1, 3, 1), snap(ORIGIN + 2, 6, 4, 0.9)]
    observed = Observed(snapshots=snaps, server={"scrapes": 2, "failures": {"garbage": 1}},
                        saturation=Verdict(saturated=True, since_s=4.0, signal="in_flight"),
                        scrape_url="http://server:8000/metrics")
    out = server_payload(SimpleNamespace(observer=None, observed=observed), ORIGIN, now=ORIGIN + 10)
    assert out["scrapes"] == 2 and out["url"] == "http://server:8000/metrics"
    assert out["failures"] == {"garbage": 1} and out["latest"]["waiting"] == 4
    assert out["saturated"] == {"since_s": 4.0, "signal": "in_flight"}
    assert out["series"][-1] == [2.0, 6.0, 4.0, 0.9]


def test_the_tab_snapshot_carries_it() -> None:
    """``LLMTab.snapshot`` (what ``/llm/stats`` returns) has the key, on the clock of the tab's own series. (A local
    tab: asking whether the runner is a master would import locust, which monkey-patches this process.)"""

    class LocalTab(LLMTab):
        distributed = False  # type: ignore[assignment]

    snaps = [snap(0.0, 2, 1)]
    run = live_run(snaps)
    env = SimpleNamespace(runner=SimpleNamespace(state="running", user_count=1, target_user_count=1),
                          parsed_options=SimpleNamespace(arrival="closed", request_rate=0.0, backend="openai"),
                          host="http://server:8000", llmload=run)
    tab = LocalTab(env, [])
    snaps[0].t = tab.stats.test_start + 0.5
    data = tab.snapshot(10.0)
    assert data["server"]["scrapes"] == 1 and data["server"]["series"] == [[0.5, 2.0, 1.0, 0.25]]
    assert "series" not in tab.snapshot(10.0, series=False)["server"]
    env.llmload = SimpleNamespace(observer=None, observed=None)
    assert tab.snapshot(10.0)["server"] is None
