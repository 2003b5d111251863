"""Protects the LLM tab's Server panel (issue 12): during a ``locust -f`` test against a real ``llmload sim`` (which
serves ``/metrics``) ``/llm/stats`` carries the scraped series under ``server`` and the panel in headless Chromium
shows them; with ``--no-server-metrics`` the key is null and the panel hidden; a saturated run shows its banner."""

from __future__ import annotations

import pytest
import test_webui
from test_webui import CHROMIUM, CHROMIUM_ARGS, browser, locust_args, script
from test_webui_turns import ORIGIN, payload, serve

from llmload.client.records import RequestRecord
from llmload.webui.live import LiveStats

start_web = test_webui.start_web  # the fixture
#: the batching engine (default profile) with two sequences at once: of four users' requests it runs 2, queues 2
SIM = ("--max-num-seqs", "2")
SWARM = {"user_count": "4", "spawn_rate": "4"}


def shown(page, *ids: str) -> dict[str, str]:
    """The ``data-value`` of the tab's elements (``""`` when the tab shows none)."""
    return page.evaluate("ids => Object.fromEntries(ids.map(id => [id, document.getElementById(id).dataset.value]))",
                         list(ids))


def scraped(d: dict) -> bool:
    server = d.get("server")
    return (server is not None and server["scrapes"] >= 3 and d["run"]["completed"] >= 1
            and isinstance(server["latest"].get("running"), int | float))


@pytest.mark.slow
def test_server_panel_shows_the_scraped_series(start_sim, start_web) -> None:
    sync_playwright = browser()
    sim = start_sim(*SIM)
    web = start_web(script("locust"), *locust_args(sim.url))
    resp = web.http.post("/swarm", data={**SWARM, "host": sim.url})
    assert resp.json()["success"], resp.text
    live = web.wait_for("three scrapes of the server", scraped, timeout=40)
    server = live["server"]
    assert server["engine"] == "vllm" and server["url"] == sim.url + "/metrics"
    assert server["failures"] == {} and 0 <= server["latest"]["running"] <= 2
    assert 0.0 <= server["latest"]["kv_cache_usage"] <= 1.0
    series = web.stats(series=1)["server"]["series"]
    assert len(series) >= 3 and all(len(p) == 4 for p in series)
    times = [p[0] for p in series]
    # seconds since the test start, on the clock of the tab's own series and elapsed_s
    assert times == sorted(times) and times[0] > -1.0 and times[-1] <= web.stats()["elapsed_s"] + 1.0
    web.wait_for("the server to run requests", lambda d: d["server"]["latest"]["running"] > 0, timeout=20)
    assert any(p[2] > 0 for p in web.stats(series=1)["server"]["series"]), "the queue never showed"
    with sync_playwright() as pw:
        chrome = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = chrome.new_page(viewport={"width": 1400, "height": 1300})
            page.goto(web.url + "/")
            page.get_by_role("tab", name="LLM").click()
            page.wait_for_function("() => document.getElementById('llm-server-scrapes').dataset.value >= 3",
                                   timeout=20000)
            assert page.is_visible("#llm-server") and page.is_visible("#llm-chart-server")
            assert not page.is_visible("#llm-server-saturated")  # a closed loop is never judged saturated
            # what the panel shows is what the page last fetched from /llm/stats (read in one go, so neither moves
            # in between), and that is the route's answer of a scrape or two ago: the page polls and the scraper
            # scrapes once a second each, so comparing the panel with a fresh route call can stay one apart
            ids = ["llm-server-running", "llm-server-waiting", "llm-server-scrapes"]
            got = page.evaluate("ids => ({shown: Object.fromEntries(ids.map(id => [id, "
                                "document.getElementById(id).dataset.value])), server: window.llmloadTab.last().server})",
                                ids)
            route = web.stats()["server"]
            data = got["server"]
            want = dict(zip(ids, (data["latest"]["running"], data["latest"]["waiting"], data["scrapes"]), strict=True))
            assert all(got["shown"][k] != "" and float(got["shown"][k]) == float(v) for k, v in want.items()), got
            assert route["scrapes"] - 3 <= data["scrapes"] <= route["scrapes"], (data["scrapes"], route["scrapes"])
            assert page.text_content("#llm-server-running") == str(round(data["latest"]["running"]))
            assert sim.url + "/metrics" in page.text_content("#llm-server-note")
            assert page.evaluate("() => window.llmloadTab.last().server.series.length") >= 3
        finally:
            chrome.close()
    web.http.post("/stop")
    stopped = web.wait_for("the test to stop", lambda d: d["state"] == "stopped")
    # the stopped test's scrapes stay on show, as the rest of the tab
    assert stopped["server"] is not None and stopped["server"]["scrapes"] >= server["scrapes"]


@pytest.mark.slow
def test_no_server_metrics_hides_the_panel(start_sim, start_web) -> None:
    sync_playwright = browser()
    sim = start_sim(*SIM)
    web = start_web(script("locust"), *locust_args(sim.url, "--no-server-metrics"))
    resp = web.http.post("/swarm", data={**SWARM, "host": sim.url})
    assert resp.json()["success"], resp.text
    live = web.wait_for("requests", lambda d: d["state"] == "running" and d["run"]["completed"] >= 3, timeout=40)
    assert live["server"] is None and web.stats(series=1)["server"] is None
    with sync_playwright() as pw:
        chrome = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = chrome.new_page(viewport={"width": 1400, "height": 1300})
            page.goto(web.url + "/")
            page.get_by_role("tab", name="LLM").click()
            page.wait_for_function("() => Number(document.getElementById('llm-r-completed').dataset.value) > 0",
                                   timeout=20000)
            page.wait_for_timeout(1200)  # another poll
            assert not page.is_visible("#llm-server")
            assert page.evaluate("() => window.llmloadTab.last().server") is None
        finally:
            chrome.close()
    web.http.post("/stop")
    web.wait_for("the test to stop", lambda d: d["state"] == "stopped")


@pytest.mark.slow
def test_saturated_banner_and_kv_percent() -> None:
    """The panel from a fixed ``/llm/stats`` body (no Locust): KV usage in %, failures summed, the banner."""
    sync_playwright = browser()
    now = [10.0]
    stats = LiveStats([], clock=lambda: now[0])
    now[0] = 12.0
    stats.source.append(RequestRecord(start=10.0, first_token=10.1, chunk_times=[10.1, 10.2], chunk_tokens=[1, 1],
                                      output_tokens=2, success=True, prompt_len=10))
    body = payload(stats)
    body["server"] = {"engine": "sglang", "url": "http://server:30000/metrics", "scrapes": 42,
                      "failures": {"timeout": 2, "connect": 1},
                      "latest": {"running": 7, "waiting": 13, "kv_cache_usage": 0.875}, "latest_age_s": 0.4,
                      "saturated": {"since_s": 18.2, "signal": "waiting"},
                      "series": [[float(t), 7.0, float(t), 0.5] for t in range(14)]}
    with sync_playwright() as pw:
        chrome = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = chrome.new_page()
            serve(page, body)
            page.goto(f"{ORIGIN}/llm/")
            page.wait_for_function("() => document.getElementById('llm-server-scrapes').dataset.value === '42'",
                                   timeout=15000)
            assert page.is_visible("#llm-server") and page.is_visible("#llm-server-saturated")
            banner = page.text_content("#llm-server-saturated")
            assert "saturated since 18 s" in banner and "waiting queue" in banner
            assert page.text_content("#llm-server-running") == "7"
            assert page.text_content("#llm-server-waiting") == "13"
            assert page.text_content("#llm-server-kv") == "87.5"
            assert page.text_content("#llm-server-failures") == "3"
            note = page.text_content("#llm-server-note")
            assert "sglang at http://server:30000/metrics" in note and "timeout 2" in note
            # the chart drew its lines (some pixel of the canvas is not blank)
            assert page.evaluate("() => { const c = document.getElementById('llm-chart-server');"
                                 " const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
                                 " return d.some(v => v !== 0); }")
        finally:
            chrome.close()
