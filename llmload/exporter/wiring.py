"""How the ways in serve llmload's live metrics: ``llmload bench`` (single process or master) and ``locust -f``
(master or local runner). Workers never serve them: every record reaches the master, which counts it.

The bench and plugin modules call three things only: :func:`bind_from_options` (``RunPlan``: a busy port is a
usage error, exit 2, before anything is sent), :func:`bench_exporter` (around bench's run) and
:func:`locust_exporter` (the plugin's ``attach``), then :meth:`RunExporter.finish` at the end. The objects of
the ways in (the run plan, environment, masters) are read by duck typing, so this package imports neither.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from llmload.common.errors import ConfigError
from llmload.exporter.metrics import LiveExporter
from llmload.exporter.server import Endpoint, bind
from llmload.options import option_value

Listener = Callable[[Any], None]


def bind_from_options(options: Any) -> Endpoint | None:
    """``--prometheus-port``'s socket, listening from now on; None when the option is off."""
    port = getattr(options, "prometheus_port", None)
    linger = float(option_value(options, "prometheus_linger"))
    if port is None or port == "":
        if linger:
            raise ConfigError("--prometheus-linger needs --prometheus-port")
        return None
    return bind(getattr(options, "prometheus_host", None) or "127.0.0.1", int(port))


class RunExporter:
    """A :class:`LiveExporter` serving one run; ``exporter`` None: the option is off and this does nothing."""

    def __init__(self, exporter: LiveExporter | None, linger_s: float = 0.0,
                 say: Callable[[str], None] = print) -> None:
        self.exporter = exporter
        self.linger_s = linger_s
        self._say = say

    def chain(self, listener: Listener) -> Listener:
        """``listener`` followed by the exporter's ``observe`` (the one record callback bench's run takes)."""
        if self.exporter is None:
            return listener
        observe = self.exporter.observe

        def both(record: Any) -> None:
            listener(record)
            observe(record)

        return both

    def finish(self, interrupted: Callable[[], bool] = lambda: False) -> None:
        """Every record is counted: with ``--prometheus-linger``, keep answering until one more scrape was
        answered (or the linger ran out, or ``interrupted()``), so the last values reach the scraper; then stop."""
        exporter = self.exporter
        if exporter is None:
            return
        try:
            if self.linger_s > 0:
                import gevent

                seen = exporter.scrapes
                self._say(f"The run is over: {exporter.url} stays up until scraped once more (at most "
                          f"{self.linger_s:g} s, --prometheus-linger)")
                deadline = time.monotonic() + self.linger_s
                while exporter.scrapes == seen and time.monotonic() < deadline and not interrupted():
                    gevent.sleep(0.05)
        finally:
            exporter.stop()
            self.exporter = None


def master_in_flight(bench_master: Any) -> int:
    """A bench master's requests in flight: released by a worker (its batches say which) and not yet answered,
    over the workers still alive; behind by at most one batch interval."""
    return sum(len(w.dispatched - w.received) for w in list(bench_master.workers.values()) if not w.lost)


@contextmanager
def bench_exporter(plan: Any, env: Any, master: Any, interrupts: Any,
                   say: Callable[[str], None]) -> Iterator[RunExporter]:
    """``llmload bench``'s exporter around the run, serving on the socket ``plan.prometheus`` holds; lingers
    when the run ended normally (a signal during the linger ends it)."""
    endpoint = plan.prometheus
    if endpoint is None:
        yield RunExporter(None)
        return
    exporter = LiveExporter(models=mix_names(plan.args), schedule_lag=plan.config.spec.open_loop_lag_counts)
    if master is None:
        from llmload.core.state import state_of

        state = state_of(env)
        exporter.in_flight_from(lambda: state.in_flight)
    else:
        exporter.in_flight_from(lambda: master_in_flight(master.bench))
    say(f"Prometheus metrics at {exporter.serve(endpoint)}")
    live = RunExporter(exporter, float(plan.args.prometheus_linger or 0.0), say)
    try:
        yield live
    except BaseException:
        live.linger_s = 0.0
        raise
    finally:
        signals = interrupts.count
        live.finish(lambda: interrupts.count != signals)


def locust_exporter(run: Any) -> RunExporter | None:
    """``locust -f``'s exporter for a master or local runner's :class:`~llmload.plugin.run.LocustRun`: serves
    from Locust's ``init`` on and counts every record its RecordList gets (all tests of a web UI session:
    counters never go back). None when the option is off. ConfigError when the port is busy."""
    endpoint = bind_from_options(run.options)
    if endpoint is None:
        return None
    from llmload.client.users import LLMUser
    from llmload.core.workload import schedule_spec

    classes = [c.__name__ for c in run.environment.user_classes if isinstance(c, type) and issubclass(c, LLMUser)]
    lags = not run.headless or schedule_spec(run.options).open_loop_lag_counts
    exporter = LiveExporter(classes, models=mix_names(run.options), schedule_lag=lags)
    exporter.in_flight_from(lambda: locust_in_flight(run))
    run.records.listeners.append(exporter.observe)
    say = logging.getLogger(__name__).info
    say(f"Prometheus metrics at {exporter.serve(endpoint)}")
    return RunExporter(exporter, float(option_value(run.options, "prometheus_linger")), say)


def locust_in_flight(run: Any) -> float | None:
    """The run's requests in flight (:meth:`llmload.plugin.cluster.ClusterRole.in_flight_total`, the one count the
    live tab and the saturation test read too; None on a master before the workers' first reports)."""
    total = run.in_flight_total()
    return None if total is None else float(total)


def mix_names(options: Any) -> tuple[str, ...]:
    """The models a run's requests choose from (``--model a,b``, ``--lora-modules``): a ``model`` label when two
    or more. A bad mix is the run's own error to report, at its start; here it only labels nothing."""
    from llmload.core.models import model_mix_from

    try:
        mix = model_mix_from(options)
    except ConfigError:
        return ()
    return mix.names if mix is not None else ()
