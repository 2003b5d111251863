"""The LLM tab's server side: the tab's state (:class:`LLMTab`), its registration on Locust's web UI
(``extended_tabs``, the :mod:`llmload.webui.routes` blueprint, the page script) and steering.

The tab meets the run on ``environment.llmload`` (:class:`llmload.plugin.run.LocustRun`, by duck typing): its
records, its one in-flight count over every worker (``in_flight_total``: the workers' ``llm_live`` reports), and
steering (``set_rate``: ``llm_set`` to the workers).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from time import perf_counter
from typing import Any

from llmload.options import option_value
from llmload.webui.gpu_panel import gpu_payload
from llmload.webui.live import LATENCIES, LiveStats
from llmload.webui.server_series import server_payload

logger = logging.getLogger(__name__)

#: the tab's key in Locust's UI (``?tab=llm``)
TAB_KEY = "llm"
#: seconds the master waits for records still travelling from workers before counting a window
DISTRIBUTED_SETTLE_S = 1.5


class LLMTab:
    """Everything the tab needs in one process (the master, or the only process of a local run)."""

    def __init__(self, environment: Any, records: list) -> None:
        #: ``--web-base-path``, set when the routes are registered
        self.prefix = ""
        self.environment = environment
        self.stats = LiveStats(records)

    # -- runner facts ---------------------------------------------------------------------------------------

    @property
    def distributed(self) -> bool:
        from locust.runners import MasterRunner

        return isinstance(self.environment.runner, MasterRunner)

    def in_flight(self) -> int:
        """The run's requests in flight, over every worker (0 before the workers' first reports)."""
        run = getattr(self.environment, "llmload", None)
        total = run.in_flight_total() if hasattr(run, "in_flight_total") else getattr(run, "in_flight", 0)
        return int(total or 0)

    def facts(self) -> dict[str, Any]:
        runner = self.environment.runner
        opts = self.environment.parsed_options
        return {
            "state": getattr(runner, "state", "missing"),
            "distributed": self.distributed,
            "workers": getattr(runner, "worker_count", 0) if self.distributed else 0,
            "users": int(getattr(runner, "user_count", 0) or 0),
            "target_users": int(getattr(runner, "target_user_count", 0) or 0),
            "arrival": option_value(opts, "arrival"),
            "request_rate": float(option_value(opts, "request_rate")),
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
            "server": server_payload(getattr(self.environment, "llmload", None), self.stats.test_start,
                                     series=series),
            "gpu": gpu_payload(getattr(self.environment, "llmload", None), int(run.get("total_output_tokens") or 0)),
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
                if ticks % 4 == 0 and getattr(self.environment.runner, "state", "") in (
                        "spawning", "running", "stopping"):
                    self.sample()
            except Exception:  # the sampler must outlive a bad record
                logger.exception("llmload: LLM tab sampler failed")

    # -- steering -------------------------------------------------------------------------------------------

    def set_rate(self, rate: float) -> None:
        """The open-loop rate, requests/s for the whole test: the run's live schedule takes it from 0.5 s from now,
        here and, in a distributed run, on every worker (:meth:`llmload.plugin.run.LocustRun.set_rate`)."""
        run = getattr(self.environment, "llmload", None)
        if run is not None:
            run.set_rate(rate)
        else:
            self.environment.parsed_options.request_rate = rate

    # -- downloads ------------------------------------------------------------------------------------------

    def test_records(self) -> Sequence[Any]:
        self.stats.ingest()
        return self.stats.test_records()

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
                                  ttft_rule=option_value(opts, "ttft_rule"),
                                  schedule_lags_s=lags if lags else None)
        result = metrics.to_result_dict()
        result.update({"backend": getattr(opts, "backend", ""), "base_url": self.environment.host or "",
                       "arrival": option_value(opts, "arrival"), "source": "llmload web UI"})
        return result


def register_routes(tab: LLMTab, web_ui: Any) -> None:
    """Add the tab (Locust's ``extended_tabs``), its ``/llm/*`` blueprint and its script to Locust's web UI."""
    from flask import Response, request

    from llmload.webui.login import setup_login
    from llmload.webui.routes import EXTENSION, blueprint, tab_snippet

    app = web_ui.app
    opts = tab.environment.parsed_options
    prefix = (getattr(opts, "web_base_path", "") or "").rstrip("/")
    tab.prefix = prefix
    web_ui.template_args["extended_tabs"] = [
        *[t for t in web_ui.template_args.get("extended_tabs", []) if t.get("key") != TAB_KEY],
        {"title": "LLM", "key": TAB_KEY},
    ]
    app.extensions[EXTENSION] = tab
    app.register_blueprint(blueprint(prefix, web_ui.auth_required_if_enabled))
    snippet = tab_snippet(prefix)

    @app.after_request
    def inject_tab_script(response: Response) -> Response:
        # Locust's React app draws the tab bar; our script fills the LLM tab's panel
        if (request.endpoint == "locust.index" and response.status_code == 200
                and response.mimetype == "text/html" and not response.direct_passthrough):
            response.set_data(response.get_data().replace(b"</body>", snippet, 1))
        return response

    setup_login(web_ui, prefix, getattr(opts, "llm_web_credentials", "") or "")
