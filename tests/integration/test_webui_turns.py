"""Protects the LLM tab's per-turn table (issue 11) and its per-class/per-model table (issue 23): tab.js draws one
row per turn of ``run.turns`` and one per entry of ``run.by_class``/``run.by_model`` from ``GET /llm/stats``
(served here from :class:`LiveStats` over hand-built records, no Locust), hides each for a test without them, and
posts per-model SLOs as ``--goodput`` items."""

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
    assert stats.test_records()
    return {"state": "running", "distributed": False, "workers": 0, "users": 2, "target_users": 2,
            "arrival": "closed", "request_rate": 0.0, "in_flight": 0, "elapsed_s": 2.0, "slos_ms": {},
            "latencies": LATENCIES, "window": stats.window(10.0), "run": stats.run(), "errors": dict(stats.errors),
            "series": []}


def serve(page, body: dict[str, Any], posted: list[dict[str, Any]] | None = None) -> None:
    static = resources.files("llmload.webui").joinpath("static")
    files = {"/llm/": ("text/html", static.joinpath("page.html").read_text().replace("{{BASE}}", ORIGIN)),
             "/llm/static/tab.js": ("application/javascript", static.joinpath("tab.js").read_text()),
             "/llm/static/tab.css": ("text/css", static.joinpath("tab.css").read_text())}

    def handle(route) -> None:
        path = route.request.url[len(ORIGIN):].split("?")[0]
        if path == "/llm/stats":
            route.fulfill(status=200, content_type="application/json", body=json.dumps(body))
        elif path == "/llm/slo" and posted is not None:
            posted.append(json.loads(route.request.post_data))
            route.fulfill(status=200, content_type="application/json", body=json.dumps({"slos_ms": {}}))
        elif path in files:
            route.fulfill(status=200, content_type=files[path][0], body=files[path][1])
        else:
            route.fulfill(status=404, body="")

    page.route(f"{ORIGIN}/**", handle)


def playwright_or_skip():
    """Playwright's sync API with Debian's Chromium, or a skip saying which is missing."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (pip install playwright)")
    from pathlib import Path

    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)")
    return sync_playwright


def shown(page, body: str) -> list[list[str]]:
    """The cells of each row of the table body ``body`` (an element id), as the page shows them."""
    return page.evaluate(f"() => [...document.querySelectorAll('#{body} tr')]"
                         ".map(tr => [...tr.children].map(td => td.textContent))")


def shown_turns(page) -> list[list[str]]:
    return shown(page, "llm-turns-body")


@pytest.mark.needs("chromium")
def test_tab_draws_the_turn_table() -> None:
    sync_playwright = playwright_or_skip()
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
            # the sessions table (issue 36): conversations are sessions; a's two turns completed, b's second failed
            assert page.is_visible("#llm-sessions")
            assert shown(page, "llm-sessions-body") == [["all", "2", "1", "4", "3", "–", "–", "20.0"]]

            page = chrome.new_page()
            serve(page, payload(plain))
            page.goto(f"{ORIGIN}/llm/")
            page.wait_for_function("() => document.getElementById('llm-r-completed').dataset.value === '1'",
                                   timeout=15000)
            assert not page.is_visible("#llm-turns") and shown_turns(page) == []
            assert not page.is_visible("#llm-sessions") and shown(page, "llm-sessions-body") == []
        finally:
            chrome.close()


def model_records(t0: float) -> list[RequestRecord]:
    """Two adapters: "a" gets TTFT 100 and 300 ms, "b" one request of TTFT 50 ms and one failure."""
    def one(start: float, ttft: float, model: str, ok: bool = True) -> RequestRecord:
        chunks = [t0 + start + ttft + 0.01 * k for k in range(3)] if ok else []
        return RequestRecord(start=t0 + start, first_token=chunks[0] if chunks else None, chunk_times=chunks,
                             chunk_tokens=[1] * len(chunks), output_tokens=len(chunks), success=ok,
                             error="" if ok else "HTTP 500", failure_kind="" if ok else "http_5xx", prompt_len=10,
                             model=model)
    return [one(0.0, 0.1, "a"), one(0.1, 0.3, "a"), one(0.2, 0.05, "b"), one(0.3, 0.0, "b", ok=False)]


def shown_parts(page) -> dict[str, dict[str, str]]:
    return page.evaluate("() => Object.fromEntries([...document.querySelectorAll('#llm-parts-body tr')].map(tr =>"
                         " [tr.dataset.by + ':' + tr.dataset.name, Object.fromEntries([...tr.querySelectorAll("
                         "'td[data-key]')].map(td => [td.dataset.key, td.dataset.value]))]))")


@pytest.mark.needs("chromium")
def test_tab_draws_the_model_table_and_posts_model_slos() -> None:
    sync_playwright = playwright_or_skip()
    now = [10.0]
    stats = LiveStats([], clock=lambda: now[0])
    stats.source.extend(model_records(10.0))
    now[0] = 12.0
    body = payload(stats)
    body["slos_ms"] = {"ttft": 500.0, "model=b": {"ttft": 20.0}}
    posted: list[dict[str, Any]] = []
    with sync_playwright() as pw:
        chrome = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = chrome.new_page()
            serve(page, body, posted)
            page.goto(f"{ORIGIN}/llm/")
            page.wait_for_function("() => document.querySelectorAll('#llm-parts-body tr').length === 2",
                                   timeout=15000)
            assert page.is_visible("#llm-parts")
            parts = shown_parts(page)
            assert set(parts) == {"model:a", "model:b"}
            assert (parts["model:a"]["requests"], parts["model:a"]["completed"]) == ("2", "2")
            assert float(parts["model:a"]["ttft_ms.p50"]) == pytest.approx(200.0)
            assert (parts["model:b"]["completed"], parts["model:b"]["failed"]) == ("1", "1")
            # the SLOs the run holds come back into the form, and the download link carries them all
            assert page.input_value("#llm-slo-more") == "model=b:ttft:20"
            href = page.get_attribute("#llm-download-result", "href")
            assert "slo_ttft=500" in href and "slo_model%3Db%3Attft=20" in href
            page.fill("#llm-slo-more", "model=a:ttft:150 model=b:e2el:900")
            page.click("#llm-slo-set")
            page.wait_for_function("() => document.getElementById('llm-slo-msg').textContent === 'applied'",
                                   timeout=15000)
            assert posted[-1]["items"] == "model=a:ttft:150 model=b:e2el:900"
            from llmload.webui.live import parse_slos
            assert parse_slos(posted[-1]) == {"ttft": 500.0, "model=a": {"ttft": 150.0}, "model=b": {"e2el": 900.0}}
        finally:
            chrome.close()


def pooling_records(t0: float) -> list[RequestRecord]:
    """A RAG mix: "Embed" pooling requests (no first token; E2E 40 and 60 ms, 4 inputs of 50 tokens each) and
    "Chat" streams (TTFT 100 ms)."""
    def embed(start: float, e2e: float) -> RequestRecord:
        return RequestRecord(start=t0 + start, chunk_times=[t0 + start + e2e], chunk_tokens=[0], success=True,
                             output_tokens_source="usage", prompt_len=200, server_prompt_tokens=200,
                             input_sequences=4, user_class="Embed", backend="openai-embeddings")

    def chat(start: float) -> RequestRecord:
        chunks = [t0 + start + 0.1 + 0.01 * k for k in range(3)]
        return RequestRecord(start=t0 + start, first_token=chunks[0], chunk_times=chunks, chunk_tokens=[1] * 3,
                             output_tokens=3, success=True, prompt_len=10, user_class="Chat")
    return [embed(0.0, 0.04), embed(0.1, 0.06), chat(0.2)]


@pytest.mark.needs("chromium")
def test_tab_shows_e2e_and_input_throughput_for_pooling_classes() -> None:
    sync_playwright = playwright_or_skip()
    now = [10.0]
    stats = LiveStats([], clock=lambda: now[0])
    stats.source.extend(pooling_records(10.0))
    now[0] = 12.0
    body = payload(stats)
    with sync_playwright() as pw:
        chrome = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = chrome.new_page()
            serve(page, body)
            page.goto(f"{ORIGIN}/llm/")
            page.wait_for_function("() => document.querySelectorAll('#llm-parts-body tr').length === 2",
                                   timeout=15000)
            parts = shown_parts(page)
            embed, chat = parts["class:Embed"], parts["class:Chat"]
            assert float(embed["e2el_ms.p50"]) == pytest.approx(50.0)
            assert float(embed["e2el_ms.p99"]) == pytest.approx(59.8)
            assert float(embed["input_tokens_per_s"]) > 0 and float(embed["requests_per_s"]) > 0
            assert embed["ttft_ms.p50"] == ""  # no first token: an empty cell ("–"), not 0
            assert float(chat["ttft_ms.p50"]) == pytest.approx(100.0)
            headers = page.evaluate("() => [...document.querySelectorAll('#llm-parts th')].map(th => th.textContent)")
            assert "E2E p50 (ms)" in headers and "input tok/s" in headers
        finally:
            chrome.close()
