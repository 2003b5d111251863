"""The LLM tab's HTTP routes: a Flask blueprint on Locust's web UI app, each view behind Locust's own
``auth_required_if_enabled`` (``--web-login``). The views find their tab in ``app.extensions``.

    GET  /llm/                the tab as a page of its own
    GET  /llm/static/<name>   tab.js, tab.css
    GET  /llm/stats           live numbers as JSON (``?window=S``, ``?series=0``, ``?slo_ttft=MS``...), the server's
                              scraped series under ``server`` (:mod:`llmload.webui.server_series`)
    POST /llm/rate            ``{"request_rate": R}``: open-loop rate for the whole test, master and workers
    POST /llm/slo             ``{"ttft": MS, "tpot": MS, "e2el": MS, "Chat:e2el": MS, "model=a:ttft": MS}``: goodput
                              SLOs, run-wide, per user class, per model (empty: none)
    GET  /llm/records.jsonl   this test's request records, one JSON object a line
    GET  /llm/result.json     this test's result JSON
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources
from typing import Any

import orjson
from flask import Blueprint, Response, current_app, request

from llmload.webui.live import SLO_METRICS, parse_slos

#: where a web UI app keeps its tab
EXTENSION = "llmload.tab"
_STATIC_TYPES = {"tab.js": "application/javascript", "tab.css": "text/css"}


def static_bytes(name: str) -> bytes:
    return resources.files("llmload.webui").joinpath("static", name).read_bytes()


def _tab() -> Any:
    return current_app.extensions[EXTENSION]


def _json(data: Any, status: int = 200) -> Response:
    body = orjson.dumps(data, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
    return Response(body, status=status, mimetype="application/json")


def _slos_from_query() -> dict[str, Any] | None:
    """``?slo_ttft=500&slo_Chat:e2el=900&slo_model=a:ttft=200``: SLOs for this request only (None: none given)."""
    given = {k[len("slo_"):]: v for k, v in request.args.items()
             if k.startswith("slo_") and k.rpartition(":")[2].removeprefix("slo_") in SLO_METRICS}
    return parse_slos(given) if given else None


def _payload() -> dict[str, Any]:
    data = request.get_json(silent=True)
    return data if isinstance(data, dict) else request.form.to_dict()


def page(_name: str = "") -> Response:
    html = static_bytes("page.html").decode().replace("{{BASE}}", _tab().prefix)
    return Response(html, mimetype="text/html")


def static_file(name: str) -> Response:
    if name not in _STATIC_TYPES:
        return Response("not found", status=404)
    resp = Response(static_bytes(name), mimetype=_STATIC_TYPES[name])
    resp.headers["Cache-Control"] = "no-cache"
    return resp


def stats() -> Response:
    try:
        window = float(request.args.get("window", 10.0))
        if not 0 < window <= 60:
            raise ValueError("window: expected seconds between 0 and 60")
        since = request.args.get("since")
        data = _tab().snapshot(window, series=request.args.get("series", "1") != "0",
                               since=float(since) if since not in (None, "") else None,
                               slos_ms=_slos_from_query())
    except ValueError as exc:
        return _json({"error": str(exc)}, 400)
    return _json(data)


def rate() -> Response:
    raw = _payload().get("request_rate")
    try:
        value = float(raw)  # type: ignore[arg-type]
        if not value >= 0 or value == float("inf"):
            raise ValueError
    except (TypeError, ValueError):
        return _json({"error": f"request_rate: expected a non-negative number of requests/s, got {raw!r}"}, 400)
    _tab().set_rate(value)
    return _json(_tab().facts())


def slo() -> Response:
    try:
        _tab().stats.slos_ms = parse_slos(_payload())
    except ValueError as exc:
        return _json({"error": str(exc)}, 400)
    return _json({"slos_ms": _tab().stats.slos_ms})


def records_jsonl() -> Response:
    records = _tab().test_records()

    def lines() -> Any:
        for r in records:
            yield orjson.dumps(r.to_dict()) + b"\n"

    resp = Response(lines(), mimetype="application/x-ndjson")
    resp.headers["Content-Disposition"] = "attachment; filename=llmload-records.jsonl"
    return resp


def result_json() -> Response:
    try:
        result = _tab().result(_slos_from_query())
    except ValueError as exc:
        return _json({"error": str(exc)}, 400)
    if result is None:
        return _json({"error": "no finished requests in this test yet"}, 409)
    resp = _json(result)
    resp.headers["Content-Disposition"] = "attachment; filename=llmload-result.json"
    return resp


#: (path under /llm, endpoint, view, methods)
ROUTES: tuple[tuple[str, str, Callable[..., Response], list[str]], ...] = (
    ("/", "llm_page", page, ["GET"]),
    ("/static/<name>", "llm_static", static_file, ["GET"]),
    ("/stats", "llm_stats", stats, ["GET"]),
    ("/rate", "llm_rate", rate, ["POST"]),
    ("/slo", "llm_slo", slo, ["POST"]),
    ("/records.jsonl", "llm_records", records_jsonl, ["GET"]),
    ("/result.json", "llm_result", result_json, ["GET"]),
)


def blueprint(prefix: str, auth: Callable[[Callable[..., Any]], Callable[..., Any]]) -> Blueprint:
    """The tab's routes under ``{prefix}/llm``, each wrapped in ``auth``."""
    bp = Blueprint("llmload", __name__, url_prefix=f"{prefix}/llm")
    for path, endpoint, view, methods in ROUTES:
        bp.add_url_rule(path, endpoint, auth(view), methods=methods)
    return bp


def tab_snippet(prefix: str) -> bytes:
    """What the tab adds to Locust's page: its base path, stylesheet and script."""
    return (f'<script>window.llmloadBase = {orjson.dumps(prefix).decode()};</script>'
            f'<link rel="stylesheet" href="{prefix}/llm/static/tab.css">'
            f'<script defer src="{prefix}/llm/static/tab.js"></script></body>').encode()
