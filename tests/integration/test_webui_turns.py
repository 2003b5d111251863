"""Protects the LLM tab's per-turn table (issue 11): tab.js draws one row per turn of ``run.turns`` from
``GET /llm/stats`` (served here from :class:`LiveStats` over hand-built records, no Locust), and hides the table
for a test of single requests."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import pytest

from llmload.client.records import RequestRecord
from llmload.webui.live import LATENCIES, LiveStats

pytestmark = pytest.mark.slow
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
ORIGIN = "http://llmload.test"


def turn_records(t0: float) -> list[RequestRecord]:
    """Two conversations of 2 turns. Turn 1: TTFT 100 and 300 ms, TPOT 10 ms; turn 2: TTFT 50 ms (one failed),
    40 of 200 prompt tokens cached."""
    def one(start: float, ttft: float, turn: int, conv: str, ok: bool = True, cached: int | None = None):
        chunks = [t0 + start + ttft + 0.01 * k for k in range(3)] if ok else []
        return RequestRecord(start=t0 + start, first_token=chunks[0] if chunks else None, chunk_times=chunks,
                             chunk_tokens=[1] * len(chunks), output_tokens=len(chunks), success=ok,
                             error="" if ok else "HTTP 500", failure_kind="" if ok else "http_5xx", prompt_len=100,
                             server_prompt_tokens=200 if cached is not None else None, cached_tokens=cached,
                             conversation_id=conv, turn=turn, conversation_turns=2)
    return [one(0.0, 0.1, 1, "a"), one(0.1, 0.3, 1, "b"), one(0.5, 0.05, 2, "a", cached=40),
            one(0.6, 0.05, 2, "b", ok=False)]


def payload(stats: LiveStats) -> dict[str, Any]:
    """What ``/llm/stats`` returns, with the tab's facts filled in by hand."""
    stats.ingest()
    assert stats.records
    return {"state": "running", "distributed": False, "workers": 0, "users": 2, "target_users": 2,
            "arrival": "closed", "request_rate": 0.0, "in_flight": 0, "elapsed_s": 2.0, "slos_ms": {},
            "latencies": LATENCIES, "window": stats.window(10.0), "run": stats.run(), "errors": dict(stats.errors),
            "series": []}


def serve(page, body: dict[str, Any]) -> None:
    static = resources.files("llmload.webui").joinpath("static")
    files = {"/llm/": ("text/html", static.joinpath("page.html").read_text().replace("{{BASE}}", ORIGIN)),
             "/llm/static/tab.js": ("application/javascript", static.joinpath("tab.js").read_text()),
             "/llm/static/tab.css": ("text/css", static.joinpath("tab.css").read_text())}

    def handle(route) -> None:
        path = route.request.url[len(ORIGIN):].split("?")[0]
        if path == "/llm/stats":
            route.fulfill(status=200, content_type="application/json", body=json.dumps(body))
        elif path in files:
            route.fulfill(status=200, content_type=files[path][0], body=files[path][1])
        else:
            route.fulfill(status=404, body="")

    page.route(f"{ORIGIN}/**", handle)


def shown_turns(page) -> list[list[str]]:
    return page.evaluate("() => [...document.querySelectorAll('#llm-turns-body tr')]"
                         ".map(tr => [...tr.children].map(td => td.textContent))")


@pytest.mark.needs("chromium")
def test_tab_draws_the_turn_table() -> None:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (pip install playwright)")
    from pathlib import Path

    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)")
    now = [10.0]  # the test starts at 10 s; its records end by 11.4 s; the tab asks at 12 s
    multi = LiveStats([], clock=lambda: now[0])
    multi.source.extend(turn_records(10.0))
    plain = LiveStats([], clock=lambda: now[0])
    now[0] = 12.0
    plain.source.append(RequestRecord(start=10.0, first_token=10.1, chunk_times=[10.1, 10.2], chunk_tokens=[1, 1],
                                      output_tokens=2, success=True, prompt_len=10))
    with sync_playwright() as pw:
        chrome = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = chrome.new_page()
            serve(page, payload(multi))
            page.goto(f"{ORIGIN}/llm/")
            page.wait_for_function("() => document.querySelectorAll('#llm-turns-body tr').length === 2",
                                   timeout=15000)
            assert page.is_visible("#llm-turns")
            # turn 1: 2 requests, TTFT p50 = (100 + 300) / 2 ms, TPOT 10 ms, no cache report;
            # turn 2: 2 requests, 1 completed, TTFT 50 ms, 40 / 200 = 20 % cached
            assert shown_turns(page) == [["1", "2", "2", "200.0", "10.00", "–"],
                                         ["2", "2", "1", "50.0", "10.00", "20.0"]]
            assert float(page.get_attribute("#llm-turn-2-cached_fraction", "data-value")) == pytest.approx(20.0)

            page = chrome.new_page()
            serve(page, payload(plain))
            page.goto(f"{ORIGIN}/llm/")
            page.wait_for_function("() => document.getElementById('llm-r-completed').dataset.value === '1'",
                                   timeout=15000)
            assert not page.is_visible("#llm-turns") and shown_turns(page) == []
        finally:
            chrome.close()
