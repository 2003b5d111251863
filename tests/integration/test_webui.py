"""The LLM tab in Locust's web UI shows live numbers that match the records, steers the load, works with
workers, and keeps its routes behind --web-login; `llmload ui` starts and stops its simulator."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from support import CLOCK_SLACK_S, end_process, free_port, offline_env

ROOT = Path(__file__).resolve().parents[2]
LOCUSTFILE = "locustfiles/sharegpt.py"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
#: set to refresh the screenshot committed for the README
UPDATE_DOCS_ENV = "LLMLOAD_UPDATE_SCREENSHOT"




def script(name: str) -> list[str]:
    """The console script installed next to this interpreter, else ``python -m``."""
    path = Path(sys.executable).with_name(name)
    return [str(path)] if path.exists() else [sys.executable, "-m", "llmload.cli" if name == "llmload" else name]






class Web:
    """A running ``locust`` (or ``llmload ui``) with its web UI on 127.0.0.1."""

    def __init__(self, proc: subprocess.Popen, url: str, log: Path) -> None:
        self.proc, self.url, self.log = proc, url, log
        self.http = httpx.Client(base_url=url, timeout=10.0, trust_env=False)

    def stats(self, **params: object) -> dict:
        resp = self.http.get("/llm/stats", params={"series": 0, **params})
        assert resp.status_code == 200, resp.text
        return resp.json()

    def wait_for(self, what: str, check: Callable[[dict], bool], timeout: float = 20.0, **params: object) -> dict:
        deadline = time.monotonic() + timeout
        data: dict = {}
        while time.monotonic() < deadline:
            data = self.stats(**params)
            if check(data):
                return data
            time.sleep(0.25)
        pytest.fail(f"waited {timeout} s for {what}; last /llm/stats: {json.dumps(data)[:1500]}\n{self.tail()}")

    def wait_settled(self, timeout: float = 30.0) -> list[str]:
        """After a stop: wait until the records route and the run's request count agree and stay the same over
        three polls a second apart (the last batches have arrived). Returns the records lines. (Not on
        ``in_flight``: with workers it keeps the last count they reported, cut-off streams included.)"""
        deadline = time.monotonic() + timeout
        seen: list[tuple[int, int]] = []
        data: dict = {}
        while time.monotonic() < deadline:
            data = self.stats()
            lines = self.http.get("/llm/records.jsonl").text.splitlines()
            seen.append((len(lines), data["run"]["requests"]))
            if (data["state"] == "stopped" and len(seen) >= 3
                    and len(set(seen[-3:])) == 1 and seen[-1][0] == seen[-1][1]):
                return lines
            time.sleep(1.0)
        pytest.fail(f"the records did not settle within {timeout} s: {seen[-5:]}; last /llm/stats: "
                    f"{json.dumps(data)[:1500]}\n{self.tail()}")

    def tail(self) -> str:
        return "--- log tail ---\n" + self.log.read_text(errors="replace")[-3000:]


@pytest.fixture
def start_web(tmp_path: Path) -> Iterator[Callable[..., Web]]:
    """``start_web(argv_prefix, *args)``: run it with a web UI on a free port; ended by PID at teardown."""
    procs: list[subprocess.Popen] = []

    def start(prefix: list[str], *args: str, port_flag: str = "--web-port", env: dict[str, str] | None = None) -> Web:
        port = free_port()
        log = tmp_path / f"web{len(procs)}.log"
        argv = [*prefix, *args, port_flag, str(port)]
        if prefix == script("locust"):
            argv += ["--web-host", "127.0.0.1"]
        with open(log, "wb") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    cwd=ROOT, env=offline_env(env), start_new_session=True)
        procs.append(proc)
        web = Web(proc, f"http://127.0.0.1:{port}", log)
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"{argv} exited with {proc.returncode}\n{web.tail()}")
            try:
                web.http.get("/llm/stats")
                return web
            except httpx.TransportError:
                time.sleep(0.2)
        pytest.fail(f"web UI of {argv} did not come up\n{web.tail()}")

    try:
        yield start
    finally:
        for proc in procs:
            end_process(proc, grace=15.0)


def locust_args(sim_url: str, *extra: str) -> list[str]:
    return ["-f", LOCUSTFILE, "--host", sim_url, "--tokenizer", "builtin", "--num-prompts", "40",
            "--max-tokens", "16", *extra]


def close(a: float, b: float, rel: float) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-9)


def browser():
    """A headless Chromium from Debian's package (never a downloaded one), or a skip saying what is missing."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (pip install playwright)")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)")
    return sync_playwright


@pytest.mark.needs("chromium")
@pytest.mark.slow
def test_llm_tab_in_browser(start_sim, start_web, tmp_path: Path) -> None:
    sync_playwright = browser()
    from llmload.client.records import RequestRecord
    from llmload.core.outcome import run_span
    from llmload.metrics import METRIC_NAMES, compute_metrics

    sim = start_sim("--ttft-ms", "30", "--itl-ms", "5", "--model", "sim-a,sim-b")
    web = start_web(script("locust"), *locust_args(sim.url))
    with sync_playwright() as pw:
        chrome = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = chrome.new_page(viewport={"width": 1400, "height": 1300}, accept_downloads=True)
            page.goto(web.url + "/")
            # the start form: users, ramp-up, and llmload's options (API key masked)
            page.fill("input[name=userCount]", "4")
            page.fill("input[name=spawnRate]", "4")
            page.get_by_text("Custom parameters").click()
            assert page.get_attribute("input[name=apiKey]", "type") == "password"
            page.select_option("select[name=arrival]", "open")
            page.fill("input[name=requestRate]", "4")
            # two models taken in turn, and one request in ten cancelled after its second token (issue 23)
            page.fill("input[name=model]", "sim-a,sim-b")
            page.select_option("select[name=modelSelection]", "round-robin")
            page.fill("input[name=cancelRate]", "0.1")
            page.fill("input[name=cancelAfter]", "tokens:2")
            page.get_by_role("button", name="Start").click()
            web.wait_for("the test to run", lambda d: d["state"] == "running" and d["users"] == 4)

            page.get_by_role("tab", name="LLM").click()
            page.wait_for_function(
                "() => Number(document.getElementById('llm-tokens-per-s').dataset.value) > 0"
                " && Number(document.getElementById('llm-r-ttft-p50').dataset.value) > 0", timeout=25000)
            # a few seconds of data for the charts and a full 5-second window
            web.wait_for("a few seconds of data", lambda d: d["run"]["completed"] >= 10 and d["elapsed_s"] >= 6,
                         timeout=40)

            def compare() -> tuple[dict, dict, list[str]]:
                shown = page.evaluate(
                    "() => Object.fromEntries(['llm-tokens-per-s', 'llm-requests-per-s', 'llm-r-ttft-p50',"
                    " 'llm-r-tpot-p50', 'llm-w-ttft-p50'].map(id => [id, Number(document.getElementById(id)"
                    ".dataset.value)]))")
                live = web.stats()
                checks = {
                    "run TTFT p50": close(shown["llm-r-ttft-p50"], live["run"]["ttft_ms"]["p50"], 0.15),
                    "window TTFT p50": close(shown["llm-w-ttft-p50"], live["window"]["ttft_ms"]["p50"], 0.2),
                    "run TPOT p50": close(shown["llm-r-tpot-p50"], live["run"]["tpot_ms"]["p50"], 0.15),
                    "window tokens/s": close(shown["llm-tokens-per-s"], live["window"]["output_tokens_per_s"], 0.35),
                }
                return shown, live, [name for name, ok in checks.items() if not ok]

            # what the page shows is what the route says: the page polls once a second, so the two are compared
            # until they agree (a page that shows other numbers never does)
            deadline = time.monotonic() + 30
            shown, live, differ = compare()
            while differ and time.monotonic() < deadline:
                page.wait_for_timeout(500)
                shown, live, differ = compare()
            assert not differ, f"the page and /llm/stats differ on {differ}: {shown}\n{live['run']}\n{live['window']}"
            assert shown["llm-r-ttft-p50"] >= 30.0 - CLOCK_SLACK_S * 1000.0
            assert live["arrival"] == "open" and live["request_rate"] == 4.0

            # steer: 4 -> 16 requests/s from the tab; the 3-second window follows within seconds
            # 4 req/s (Poisson): about 20 in 5 s; 5 to 45 leaves room for chance, not for 16 req/s
            before = web.stats(window=5)["window"]["requests_per_s"]
            assert 1.0 <= before <= 9.0, before
            page.fill("#llm-rate-input", "16")
            page.click("#llm-rate-set")
            steered = time.monotonic()
            after = web.wait_for("the rate to rise", lambda d: d["window"]["requests_per_s"] >= 10.0,
                                 timeout=12.0, window=3)
            print(f"rate 4 -> 16 req/s: window requests/s {before:.1f} -> {after['window']['requests_per_s']:.1f}"
                  f" after {time.monotonic() - steered:.1f} s")
            assert after["request_rate"] == 16.0
            page.wait_for_timeout(2500)  # the steered rate on the charts
            page.screenshot(path=str(tmp_path / "llm-tab.png"), full_page=True)
            if os.environ.get(UPDATE_DOCS_ENV):
                shutil.copy(tmp_path / "llm-tab.png", ROOT / "docs" / "figures" / "llm-tab.png")

            # the two models, one row each, as the run's numbers say
            page.wait_for_function("() => document.querySelectorAll('#llm-parts-body tr[data-by=model]').length"
                                   " === 2", timeout=15000)

            # goodput against an SLO entered in the tab
            page.fill("#llm-slo-ttft", "5000")
            page.click("#llm-slo-set")
            web.wait_for("the SLO", lambda d: d["slos_ms"] == {"ttft": 5000.0})

            page.get_by_role("button", name="Stop").click()
            web.wait_for("the test to stop", lambda d: d["state"] == "stopped")
            web.wait_settled()  # streams in flight at the stop are recorded (cut off) before the download
            with page.expect_download() as got:
                page.click("#llm-download-records")
            records_path = tmp_path / "records.jsonl"
            got.value.save_as(records_path)
            with page.expect_download() as got:
                page.click("#llm-download-result")
            result_path = tmp_path / "result.json"
            got.value.save_as(result_path)
        finally:
            chrome.close()

    final = web.stats()
    raw = [json.loads(line) for line in records_path.read_text().splitlines() if line.strip()]
    records = [RequestRecord.from_dict(r) for r in raw]
    assert len(records) == final["run"]["requests"] > 20
    duration = run_span(records)  # the result JSON's: first send to the last end of a request that streamed
    expect = compute_metrics(records, duration, goodput_slos={"ttft": 5000.0}, selected_percentiles=(50, 90, 99),
                             selected_metrics=METRIC_NAMES).to_result_dict()
    run = final["run"]
    assert run["completed"] == expect["completed"]
    assert run["duration_s"] == pytest.approx(expect["duration"], rel=1e-9)
    assert run["requests_per_s"] == pytest.approx(expect["request_throughput"], rel=1e-9)
    assert run["output_tokens_per_s"] == pytest.approx(expect["output_throughput"], rel=1e-9)
    assert run["goodput_per_s"] == pytest.approx(expect["request_goodput"], rel=1e-9)
    for name in METRIC_NAMES:
        for p in ("50", "90", "99"):
            want = expect[f"p{p}_{name}_ms"]
            assert run[f"{name}_ms"][f"p{p}"] == pytest.approx(want, rel=1e-9, abs=1e-9), (name, p)
    result = json.loads(result_path.read_text())
    for key in ("completed", "request_throughput", "output_throughput", "request_goodput", "p99_ttft_ms",
                "median_tpot_ms", "p99_itl_ms", "mean_e2el_ms"):
        assert result[key] == pytest.approx(expect[key], rel=1e-9), key
    assert result["goodput_slos_ms"] == {"ttft": 5000.0}
    # the form's model mix and cancellation reached every request: both models in turn, some cancelled (never in
    # a latency statistic), and the tab counted them as the records do
    assert {r.model for r in records} == {"sim-a", "sim-b"}
    assert sorted(result["by_model"]) == ["sim-a", "sim-b"]
    cancelled = sum(r.cancelled for r in records)
    assert cancelled > 0 and run["cancelled"] == result["cancelled"] == cancelled


@pytest.mark.slow
def test_distributed_workers_feed_the_tab(start_sim, start_web) -> None:
    sim = start_sim("--ttft-ms", "30", "--itl-ms", "20", "--lora-modules", "alpha,beta")
    master = str(free_port())
    web = start_web(script("locust"), *locust_args(sim.url, "--processes", "2", "--master-bind-port", master,
                                                   "--master-port", master, "--lora-modules", "alpha", "beta"))
    web.wait_for("two workers", lambda d: d["workers"] == 2)
    # started like the form does (no -u on the command line): the rate is for the whole test
    resp = web.http.post("/swarm", data={"user_count": "4", "spawn_rate": "4", "host": sim.url,
                                         "arrival": "open", "request_rate": "6"})
    assert resp.json()["success"], resp.text
    seen_in_flight = 0

    def steady(d: dict) -> bool:
        nonlocal seen_in_flight
        seen_in_flight = max(seen_in_flight, d["in_flight"])
        return d["run"]["completed"] >= 30 and d["elapsed_s"] >= 10

    live = web.wait_for("requests from the workers", steady, timeout=40, window=5)
    assert live["distributed"] and live["users"] == 4
    assert seen_in_flight > 0, "workers' in-flight reports never arrived"
    # 6 req/s for the whole test, not per worker (12): over the run so far (>= 10 s, ~60 requests, Poisson), the
    # rate is well inside 3-9 req/s by chance alone, and a per-worker rate is far outside
    assert 3.0 <= live["run"]["requests_per_s"] <= 9.0, live["run"]
    assert live["window"]["ttft_ms"]["p50"] >= 30.0 - CLOCK_SLACK_S * 1000.0
    assert live["window"]["output_tokens_per_s"] > 0
    # two adapters (drawn at random per request): the tab breaks the run down by model, and judges each model's
    # requests by its own SLOs (TTFT >= 30 ms: no request meets 1 ms, every one meets 60 s)
    by_model = live["run"]["by_model"]
    assert set(by_model) == {"alpha", "beta"}, by_model
    assert sum(m["requests"] for m in by_model.values()) == live["run"]["requests"]
    resp = web.http.post("/llm/slo", json={"ttft": "1", "items": "model=alpha:ttft:60000"})
    assert resp.status_code == 200 and resp.json()["slos_ms"] == {"ttft": 1.0, "model=alpha": {"ttft": 60000.0}}
    judged = web.stats()["run"]
    assert judged["by_model"]["beta"]["good"] == 0
    assert judged["by_model"]["alpha"]["good"] == judged["by_model"]["alpha"]["completed"] == judged["good"] > 0
    queried = web.stats(**{"slo_model=beta:ttft": "60000"})["run"]  # this request's SLOs only (alpha: none)
    assert queried["by_model"]["beta"]["good"] == queried["by_model"]["beta"]["completed"] > 0
    assert queried["good"] == queried["completed"]
    assert web.http.post("/llm/slo", json={"items": "model=alpha:ttft"}).status_code == 400

    resp = web.http.post("/llm/rate", json={"request_rate": 14})
    assert resp.status_code == 200 and resp.json()["request_rate"] == 14.0
    web.wait_for("workers to take the new rate", lambda d: d["window"]["requests_per_s"] >= 10.0,
                 timeout=12, window=3)
    web.http.post("/stop")
    web.wait_for("the test to stop", lambda d: d["state"] == "stopped")
    lines = web.wait_settled()  # the workers' final batches
    workers = {json.loads(line)["worker"] for line in lines}
    assert workers == {"worker0", "worker1"}, workers
    assert {json.loads(line)["model"] for line in lines} == {"alpha", "beta"}
    assert len(lines) == web.stats()["run"]["requests"]


@pytest.mark.slow
def test_routes_need_login_when_web_login_is_on(start_web) -> None:
    web = start_web(script("locust"), "-f", LOCUSTFILE, "--host", "http://127.0.0.1:9", "--web-login",
                    "--llm-web-credentials", "tester:s3cret", "--request-rate", "1")
    for method, path in (("GET", "/llm/stats"), ("GET", "/llm/records.jsonl"), ("GET", "/llm/result.json"),
                         ("POST", "/llm/rate")):
        resp = web.http.request(method, path, json={"request_rate": 99} if method == "POST" else None)
        assert resp.status_code == 401, (path, resp.status_code, resp.text[:300])
        assert "request_rate" not in resp.text
    assert web.http.get("/llm/stats", auth=("tester", "wrong")).status_code == 401
    assert web.http.get("/").status_code == 302  # Locust's page sends you to its login form
    ok = web.http.get("/llm/stats", auth=("tester", "s3cret"))
    assert ok.status_code == 200 and ok.json()["request_rate"] == 1.0  # the refused POST changed nothing
    # the login form (Locust's page posts to our callback) gives a session that opens the routes
    browser_like = httpx.Client(base_url=web.url, trust_env=False)
    resp = browser_like.post("/llm/login", data={"username": "tester", "password": "s3cret"})
    assert resp.status_code == 302
    assert browser_like.get("/llm/stats").status_code == 200


@pytest.mark.slow
def test_llmload_ui_starts_and_stops_the_simulator(start_web) -> None:
    web = start_web(script("llmload"), "ui", "--sim-args", "--ttft-ms 5 --itl-ms 1", "--",
                    "--num-prompts", "10", port_flag="--web-port", env={"LLMLOAD_API_KEY": "sekrit-key-123"})
    host = web.stats()["host"]
    assert host.startswith("http://127.0.0.1:")
    assert httpx.get(host + "/v1/models", trust_env=False).status_code == 200
    page = web.http.get("/")
    assert b"/llm/static/tab.js" in page.content and '"key": "llm"' in page.text
    assert '"is_secret": true' in page.text and "sekrit-key-123" not in page.text  # never echoed
    os.kill(web.proc.pid, signal.SIGTERM)
    web.proc.wait(timeout=20)
    with pytest.raises(httpx.TransportError):
        httpx.get(host + "/v1/models", trust_env=False, timeout=2)
