"""What ``/metrics`` and ``--engine-trace`` learn from the server: scheduler state, first tokens, request ends.

:class:`Observing` is one part of :class:`~llmload.sim.server.core.SimServer`. Its hooks run per engine step or
per request, never per sent chunk: the generation part calls :meth:`_publish` when the scheduler's state changes,
:meth:`_first_token` once per request and :meth:`_finished` (which also writes the ``--trace-file`` line) when a
request ends, however it ends.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmload.sim.engine import BatchEngine
    from llmload.sim.metrics import EngineTrace, WorkerStats
    from llmload.sim.prefix_cache import PrefixCache
    from llmload.sim.server.conn import Job
    from llmload.sim.server.tracefile import TraceFile

#: trace statuses of requests that ended before their last token (vLLM's ``abort``)
ABORTED = frozenset({"client_closed", "disconnect"})


class Observing:
    """Keeps this worker's ``/metrics`` block and ``--engine-trace`` in step with its engine."""

    engine: BatchEngine | None
    prefix_cache: PrefixCache | None
    trace: TraceFile
    metrics: WorkerStats
    engine_trace: EngineTrace | None
    #: fixed-timing mode: requests started and not yet ended (its "running"; nothing ever waits)
    _fixed_running: int

    def _publish(self, step_s: float = 0.0) -> None:
        """The scheduler's state changed (a step begins, a request came or left): store it, and trace it."""
        engine = self.engine
        if engine is None:
            running, waiting, kv = self._fixed_running, 0, 0
        else:
            running, waiting, kv = len(engine.running), len(engine.waiting), engine.kv_reserved
        metrics = self.metrics
        metrics.set_engine(running, waiting, kv)
        cache = self.prefix_cache
        if cache is not None:
            metrics.set_cache(cache.queries, cache.hits, cache.batch_hit_rate)
        if self.engine_trace is not None:
            capacity = engine.profile.kv_capacity if engine is not None else 0
            usage = min(1.0, kv / capacity) if capacity else 0.0
            self.engine_trace.write(time.monotonic(), running, waiting, usage, step_s)

    def _first_token(self, job: Job, now: float) -> None:
        """The request's first chunk goes out at ``now``: its TTFT, and (vLLM) its prompt tokens."""
        self.metrics.first_token(now - job.received, job.req.prompt_tokens)

    def _finished(self, job: Job, status: str) -> None:
        """The request ended (``status`` as the trace writes it): its trace line and, if the engine had it, its
        end in ``/metrics``. Requests answered with an error never reached the engine and count nowhere."""
        self.trace.write(job, status)
        if not job.in_engine:
            return
        now = time.monotonic()
        req = job.req
        # a pooling request ends as vLLM ends it: "stop" (it has no max_tokens to reach)
        finish = "length" if req.output_tokens >= req.max_tokens and req.pooled is None else "stop"
        reason = "abort" if status in ABORTED else finish
        seq = job.seq
        if self.engine is None:
            self._fixed_running -= 1
            self._publish()
            queue: float | None = 0.0
        else:
            queue = None if seq is None or seq.admitted is None else max(0.0, seq.admitted - job.started)
        self.metrics.finish(reason, now - job.received, queue, job.chunk_times, job.chunk_tokens,
                          (req.prompt_tokens, job.generated, job.cached_tokens))
