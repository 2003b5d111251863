"""The energy and export options (docs/energy.md, docs/observability.md): GPU telemetry from DCGM exporter pages
or local NVML, the price of energy, and pushing a run's numbers to OpenTelemetry and MLflow. Part of the one
option table (:mod:`llmload.options.table`)."""

from __future__ import annotations

import llmload.options.argtypes as argtypes
from llmload.options.spec import Option, Scope

BOTH = Scope.BOTH

ENERGY_OPTIONS = (
    Option(("--gpu-metrics-url",), "gpu_metrics_url", BOTH, "server",
           "an NVIDIA DCGM exporter page (e.g. http://node-1:9400/metrics), scraped on the server-metrics clock for "
           "GPU power, energy, utilisation and memory; repeat it, one per node; 'auto': this host's :9400 "
           "(default: the simulator's own page when the server is llmload sim)", action="append", metavar="URL",
           web_ui=False),
    Option(("--energy-gpu-ids",), "energy_gpu_ids", BOTH, "server",
           "read these local GPUs' power and energy through NVML (pip install 'llmload[nvml]'), e.g. 0,1",
           type=argtypes.gpu_ids, metavar="IDS", web_ui=False),
    Option(("--energy-price-kwh",), "energy_price_kwh", BOTH, "server",
           "USD per kWh: the energy's cost beside the GPU-hour cost", type=argtypes.non_negative, metavar="USD"),
    Option(("--otlp-endpoint",), "otlp_endpoint", BOTH, "output",
           "push the run's metrics at its end to this OpenTelemetry collector over OTLP/HTTP (POST URL/v1/metrics; "
           "GenAI semantic conventions; pip install 'llmload[otlp]'); a refusal is a warning, never a failed run",
           metavar="URL", web_ui=False),
    Option(("--mlflow-tracking-uri",), "mlflow_tracking_uri", BOTH, "output",
           "log the run to MLflow at its end (file:./mlruns works offline): the options as params, the result's "
           "numbers as metrics, the result, records and report as artifacts (pip install 'llmload[mlflow]')",
           metavar="URI", web_ui=False),
)
