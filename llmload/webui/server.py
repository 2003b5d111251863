"""The LLM tab's server side: Flask routes on Locust's web UI, worker <-> master messages, steering.

Routes (under ``--web-base-path``; every one behind ``--web-login`` when it is on):

    GET  /llm/                the tab as a page of its own
    GET  /llm/stats           live numbers as JSON (``?window=S``, ``?series=0``, ``?slo_ttft=MS``...)
    POST /llm/rate            ``{"request_rate": R}``: open-loop rate for the whole test, master and workers
    POST /llm/slo             ``{"ttft": MS, "tpot": MS, "e2el": MS}``: goodput SLOs (empty: none)
    GET  /llm/records.jsonl   this test's request records, one JSON object a line
    GET  /llm/result.json     this test's result JSON (``compute_metrics(...).to_result_dict()``)
    POST /llm/login           ``--llm-web-credentials``' login form target

Messages: workers send ``llm_live`` (``{"in_flight": n}``, once a second) to the master; the master sends
``llm_set`` (``{"request_rate": R}``) to workers when the rate is steered.
"""

from __future__ import annotations

import hmac
import logging
import os
from importlib import resources
from time import perf_counter
from typing import Any

from llmload.webui.live import LATENCIES, SLO_METRICS, LiveStats, parse_slos

logger = logging.getLogger(__name__)

#: the tab's key in Locust's UI (``?tab=llm``)
TAB_KEY = "llm"
#: seconds the master waits for records still travelling from workers before counting a window
DISTRIBUTED_SETTLE_S = 1.5
#: a worker's in-flight report older than this is ignored
LIVE_STALE_S = 5.0


class LLMTab:
    """Everything the tab needs in one process (the master, or the only process of a local run)."""

    def __init__(self, environment: Any, records: list) -> None:
        self.environment = environment
        self.stats = LiveStats(records)
        #: worker node id -> (in-flight count, perf_counter when reported)
        self.worker_live: dict[str, tuple[int, float]] = {}
        self._users_sent: tuple[int, int] | None = None

    # -- runner facts ---------------------------------------------------------------------------------------

    @property
    def distributed(self) -> bool:
        from locust.runners import MasterRunner

        return isinstance(self.environment.runner, MasterRunner)

    def in_flight(self) -> int:
        if self.distributed:
            now = perf_counter()
            return sum(n for n, at in self.worker_live.values() if now - at <= LIVE_STALE_S)
        from llmload.users import in_flight

        return int(in_flight.count)

    def facts(self) -> dict[str, Any]:
        runner = self.environment.runner
        opts = self.environment.parsed_options
        return {
            "state": getattr(runner, "state", "missing"),
            "distributed": self.distributed,
            "workers": getattr(runner, "worker_count", 0) if self.distributed else 0,
            "users": int(getattr(runner, "user_count", 0) or 0),
            "target_users": int(getattr(runner, "target_user_count", 0) or 0),
            "arrival": getattr(opts, "arrival", "closed"),
            "request_rate": float(getattr(opts, "request_rate", 0.0) or 0.0),
            "in_flight": self.in_flight(),
            "backend": getattr(opts, "backend", ""),
            "host": self.environment.host or "",
        }

    @property
    def settle_s(self) -> float:
        return DISTRIBUTED_SETTLE_S if self.distributed else 0.0

    # -- the numbers ----------------------------------------------------------------------------------------

    def snapshot(self, window_s: float = 10.0, *, series: bool = True, since: float | None = None,
                 slos_ms: dict[str, float] | None = None) -> dict[str, Any]:
        self.stats.ingest()
        slos = self.stats.slos_ms if slos_ms is None else slos_ms
        window = self.stats.window(window_s, settle_s=self.settle_s, slos_ms=slos)
        run = self.stats.run(slos_ms=slos)
        out: dict[str, Any] = {
            **self.facts(),
            "elapsed_s": perf_counter() - self.stats.test_start,
            "slos_ms": slos,
            "latencies": LATENCIES,
            "window": window,
            "run": run,
            "errors": dict(self.stats.errors),
        }
        if series:
            points = list(self.stats.series)
            if since is not None:
                points = [p for p in points if p["t"] > since]
            out["series"] = points
        return out

    def sample(self) -> None:
        self.stats.ingest()
        facts = self.facts()
        self.stats.sample({"users": facts["users"], "in_flight": facts["in_flight"],
                           "request_rate": facts["request_rate"] if facts["arrival"] == "open" else None},
                          settle_s=self.settle_s)

    def sample_forever(self) -> None:
        import gevent

        ticks = 0
        while True:
            gevent.sleep(0.25)
            ticks += 1
            try:
                self.sync_users()
                if ticks % 4 == 0 and getattr(self.environment.runner, "state", "") in (
                        "spawning", "running", "stopping"):
                    self.sample()
            except Exception:  # the sampler must outlive a bad record
                logger.exception("llmload: LLM tab sampler failed")

    def sync_users(self) -> None:
        """Tell workers the test's total user count when it changes (start form, Edit): open-loop users
        divide ``--request-rate`` by it, and Locust forwards ``num_users`` only from the command line."""
        if not self.distributed:
            return
        runner = self.environment.runner
        target = int(getattr(runner, "target_user_count", 0) or 0)
        key = (target, runner.worker_count)
        if target and key != self._users_sent:
            runner.send_message("llm_set", {"num_users": target})
            self._users_sent = key

    # -- steering -------------------------------------------------------------------------------------------

    def set_rate(self, rate: float) -> None:
        """The open-loop rate, requests/s for the whole test: here and, in a distributed run, on every worker
        (open-loop users re-read it at least every 0.5 s)."""
        self.environment.parsed_options.request_rate = rate
        if self.distributed:
            self.environment.runner.send_message("llm_set", {"request_rate": rate})

    # -- downloads ------------------------------------------------------------------------------------------

    def test_records(self) -> list:
        self.stats.ingest()
        return list(self.stats.records)

    def result(self, slos_ms: dict[str, float] | None = None) -> dict[str, Any] | None:
        from llmload.metrics import METRIC_NAMES, compute_metrics

        records = self.test_records()
        duration = self.stats.duration()
        if not records or duration <= 0:
            return None
        lags = [lag for r in records if (lag := r.schedule_lag) is not None]
        opts = self.environment.parsed_options
        slos = self.stats.slos_ms if slos_ms is None else slos_ms
        metrics = compute_metrics(records, duration, goodput_slos=slos or None,
                                  selected_percentiles=(50.0, 90.0, 99.0), selected_metrics=METRIC_NAMES,
                                  ttft_rule=getattr(opts, "ttft_rule", "content"),
                                  schedule_lags_s=lags if lags else None)
        result = metrics.to_result_dict()
        result.update({"backend": getattr(opts, "backend", ""), "base_url": self.environment.host or "",
                       "arrival": getattr(opts, "arrival", "closed"), "source": "llmload web UI"})
        return result


def _static(name: str) -> bytes:
    return resources.files("llmload.webui").joinpath("static", name).read_bytes()


def register_routes(tab: LLMTab, web_ui: Any) -> None:
    """Add the ``/llm/*`` routes, the tab and its script to Locust's web UI."""
    import orjson
    from flask import Response, request

    app = web_ui.app
    opts = tab.environment.parsed_options
    prefix = (getattr(opts, "web_base_path", "") or "").rstrip("/")
    auth = web_ui.auth_required_if_enabled

    web_ui.template_args["extended_tabs"] = [
        *[t for t in web_ui.template_args.get("extended_tabs", []) if t.get("key") != TAB_KEY],
        {"title": "LLM", "key": TAB_KEY},
    ]

    def as_json(data: Any, status: int = 200) -> Response:
        body = orjson.dumps(data, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
        return Response(body, status=status, mimetype="application/json")

    def slos_from_query() -> dict[str, float] | None:
        given = {m: request.args.get(f"slo_{m}") for m in SLO_METRICS if f"slo_{m}" in request.args}
        return parse_slos(given) if given else None

    def payload() -> dict[str, Any]:
        data = request.get_json(silent=True)
        return data if isinstance(data, dict) else request.form.to_dict()

    def page(_name: str = "") -> Response:
        html = _static("page.html").decode().replace("{{BASE}}", prefix)
        return Response(html, mimetype="text/html")

    def static_file(name: str) -> Response:
        types = {"tab.js": "application/javascript", "tab.css": "text/css"}
        if name not in types:
            return Response("not found", status=404)
        resp = Response(_static(name), mimetype=types[name])
        resp.headers["Cache-Control"] = "no-cache"
        return resp

    def stats() -> Response:
        try:
            window = float(request.args.get("window", 10.0))
            if not 0 < window <= 60:
                raise ValueError("window: expected seconds between 0 and 60")
            since = request.args.get("since")
            data = tab.snapshot(window, series=request.args.get("series", "1") != "0",
                                since=float(since) if since not in (None, "") else None,
                                slos_ms=slos_from_query())
        except ValueError as exc:
            return as_json({"error": str(exc)}, 400)
        return as_json(data)

    def rate() -> Response:
        raw = payload().get("request_rate")
        try:
            value = float(raw)  # type: ignore[arg-type]
            if not value >= 0 or value == float("inf"):
                raise ValueError
        except (TypeError, ValueError):
            return as_json({"error": f"request_rate: expected a non-negative number of requests/s, got {raw!r}"},
                           400)
        tab.set_rate(value)
        return as_json(tab.facts())

    def slo() -> Response:
        try:
            tab.stats.slos_ms = parse_slos(payload())
        except ValueError as exc:
            return as_json({"error": str(exc)}, 400)
        return as_json({"slos_ms": tab.stats.slos_ms})

    def records_jsonl() -> Response:
        records = tab.test_records()

        def lines():
            for r in records:
                yield orjson.dumps(r.to_dict()) + b"\n"

        resp = Response(lines(), mimetype="application/x-ndjson")
        resp.headers["Content-Disposition"] = "attachment; filename=llmload-records.jsonl"
        return resp

    def result_json() -> Response:
        try:
            result = tab.result(slos_from_query())
        except ValueError as exc:
            return as_json({"error": str(exc)}, 400)
        if result is None:
            return as_json({"error": "no finished requests in this test yet"}, 409)
        resp = as_json(result)
        resp.headers["Content-Disposition"] = "attachment; filename=llmload-result.json"
        return resp

    routes = [
        ("/llm/", "llm_page", page, ["GET"]),
        ("/llm/static/<name>", "llm_static", static_file, ["GET"]),
        ("/llm/stats", "llm_stats", stats, ["GET"]),
        ("/llm/rate", "llm_rate", rate, ["POST"]),
        ("/llm/slo", "llm_slo", slo, ["POST"]),
        ("/llm/records.jsonl", "llm_records", records_jsonl, ["GET"]),
        ("/llm/result.json", "llm_result", result_json, ["GET"]),
    ]
    for path, endpoint, view, methods in routes:
        view.__name__ = endpoint
        app.add_url_rule(prefix + path, endpoint, auth(view), methods=methods)

    snippet = (f'<script>window.llmloadBase = {orjson.dumps(prefix).decode()};</script>'
               f'<link rel="stylesheet" href="{prefix}/llm/static/tab.css">'
               f'<script defer src="{prefix}/llm/static/tab.js"></script></body>').encode()

    @app.after_request
    def inject_tab_script(response: Response) -> Response:
        # Locust's React app draws the tab bar; our script fills the LLM tab's panel
        if (request.endpoint == "locust.index" and response.status_code == 200
                and response.mimetype == "text/html" and not response.direct_passthrough):
            response.set_data(response.get_data().replace(b"</body>", snippet, 1))
        return response

    _hide_secrets(web_ui, opts)
    _setup_login(web_ui, prefix, getattr(opts, "llm_web_credentials", "") or "")


def _hide_secrets(web_ui: Any, opts: Any) -> None:
    """Locust writes every start-form default into the page, secrets included (``--api-key``): blank them
    there, and when the form comes back with the field left empty, keep the value given at start-up."""
    from flask import request

    kept: dict[str, str] = {}
    original_update = web_ui.update_template_args

    def update_template_args() -> None:
        original_update()
        for dest, field in (web_ui.template_args.get("extra_options") or {}).items():
            if field.get("is_secret") and field.get("default_value"):
                kept.setdefault(dest, str(field["default_value"]))
                field["default_value"] = ""

    web_ui.update_template_args = update_template_args
    update_template_args()

    @web_ui.app.after_request
    def keep_secrets(response: Any) -> Any:
        if request.endpoint == "locust.swarm" and opts is not None:
            for dest in kept:
                given = request.form.get(dest)
                if given:
                    kept[dest] = given
                elif kept[dest]:
                    setattr(opts, dest, kept[dest])
        return response


class _WebUser:
    """The one user ``--llm-web-credentials`` defines (Flask-Login's user protocol)."""

    is_authenticated = True
    is_active = True
    is_anonymous = False

    def __init__(self, name: str) -> None:
        self.name = name

    def get_id(self) -> str:
        return self.name


def _setup_login(web_ui: Any, prefix: str, credentials: str) -> None:
    """With ``--web-login --llm-web-credentials USER:PASS``: Locust's login page checks them, and scripts may
    send them as HTTP basic auth; an unauthenticated ``/llm/*`` request gets 401, a page a redirect to login."""
    if not web_ui.web_login or not credentials:
        if credentials:
            logger.warning("llmload: --llm-web-credentials has no effect without --web-login")
        return
    import base64

    from flask import jsonify, redirect, request, session, url_for
    from flask_login import login_user

    user, sep, password = credentials.partition(":")
    if not sep or not user:
        raise SystemExit("llmload: error: --llm-web-credentials: expected USER:PASSWORD")
    app = web_ui.app
    if not app.secret_key:
        app.secret_key = os.urandom(32)
    manager = web_ui.login_manager

    def valid(name: str, secret: str) -> bool:
        return hmac.compare_digest(name.encode(), user.encode()) and hmac.compare_digest(
            secret.encode(), password.encode())

    @manager.user_loader
    def load_user(user_id: str) -> _WebUser | None:
        return _WebUser(user_id) if user_id == user else None

    @manager.request_loader
    def basic_auth(req: Any) -> _WebUser | None:
        header = req.headers.get("Authorization", "")
        if not header.lower().startswith("basic "):
            return None
        try:
            name, _, secret = base64.b64decode(header[6:]).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return None
        return _WebUser(name) if valid(name, secret) else None

    @manager.unauthorized_handler
    def unauthorized() -> Any:
        if request.path.startswith(f"{prefix}/llm/") and request.path != f"{prefix}/llm/":
            resp = jsonify({"error": "authentication required: log in, or send HTTP basic auth"})
            resp.status_code = 401
            resp.headers["WWW-Authenticate"] = 'Basic realm="llmload"'
            return resp
        return redirect(url_for("locust.login"))

    def login() -> Any:
        if valid(request.form.get("username", ""), request.form.get("password", "")):
            login_user(_WebUser(user))
            return redirect(url_for("locust.index"))
        session["auth_error"] = "Invalid username or password"
        return redirect(url_for("locust.login"))

    app.add_url_rule(f"{prefix}/llm/login", "llm_login", login, methods=["POST"])
    web_ui.auth_args = {**web_ui.auth_args, "username_password_callback": f"{prefix}/llm/login"}
