"""llmload's own live metrics for Prometheus and Grafana (``--prometheus-port``; docs/observability.md).

:class:`LiveExporter` counts every finished record on a registry of its own and serves ``/metrics`` in gevent's
loop; :mod:`llmload.exporter.wiring` is what ``llmload bench`` and the ``locust -f`` plugin call.
"""

from __future__ import annotations

from llmload.exporter.metrics import IN_FLIGHT, METRIC_NAMES, LiveExporter, sample_names
from llmload.exporter.server import Endpoint, bind

__all__ = ["IN_FLIGHT", "METRIC_NAMES", "Endpoint", "LiveExporter", "bind", "sample_names"]
