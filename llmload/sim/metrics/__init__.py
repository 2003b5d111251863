"""``/metrics`` for the simulator: the engines' metric names, the workers' shared counters, the exposition text
and the ``--engine-trace`` ground truth.

    spec.py         each dialect's families (vLLM v1's, SGLang's), buckets and labels
    shared.py       SharedStats (all workers' blocks in shared memory) and WorkerStats (one worker's writes)
    render.py       the Prometheus text exposition of the shared blocks
    enginetrace.py  --engine-trace: one line per published scheduler state
    mm_cache.py     vLLM's multimodal cache counters (served once an image was seen)
    gpu.py          the replicas' work for /dcgm/metrics, shared like the blocks above (GpuBoard, GpuWriter)
    dcgm.py         /dcgm/metrics: dcgm-exporter's page for the simulated GPUs (DcgmPage)
"""

from __future__ import annotations

from llmload.sim.metrics.dcgm import DcgmPage
from llmload.sim.metrics.enginetrace import EngineTrace
from llmload.sim.metrics.gpu import GpuBoard, GpuWriter
from llmload.sim.metrics.render import CONTENT_TYPE, Exposition
from llmload.sim.metrics.shared import SharedStats, WorkerStats
from llmload.sim.metrics.spec import dialect_metrics

__all__ = ["CONTENT_TYPE", "DcgmPage", "EngineTrace", "Exposition", "GpuBoard", "GpuWriter", "SharedStats",
           "WorkerStats", "dialect_metrics"]
