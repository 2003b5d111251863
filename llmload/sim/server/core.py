"""The simulated engine's server object: its state, its lifetime, ``/sim/stats`` and ``/metrics``.

:class:`SimServer` is assembled from four parts that share its attributes: connection I/O
(:mod:`~llmload.sim.server.conn`), HTTP (:mod:`~llmload.sim.server.http`), generation
(:mod:`~llmload.sim.server.streaming`) and what ``/metrics`` learns from it (:mod:`~llmload.sim.server.observe`).
They are mixins rather than separate objects because the per-token path reads the server's attributes directly,
with no extra hop.
"""

from __future__ import annotations

import os
import select
import socket
import time
from itertools import count

from llmload.metrics.percentiles import rank_bucket
from llmload.sim.config import SimConfig
from llmload.sim.engine import BatchEngine
from llmload.sim.faults import FaultPicker
from llmload.sim.loop import EventLoop
from llmload.sim.lora import AdapterSlots
from llmload.sim.metrics import (
    DcgmPage,
    EngineTrace,
    Exposition,
    GpuWriter,
    SharedStats,
    WorkerStats,
    dialect_metrics,
)
from llmload.sim.prefix_cache import PrefixCache
from llmload.sim.requests import RequestParser, Tokenize
from llmload.sim.server.conn import Conn, Connections
from llmload.sim.server.http import HttpFront
from llmload.sim.server.observe import Observing
from llmload.sim.server.streaming import Streaming
from llmload.sim.server.tracefile import TraceFile


class SimServer(Streaming, HttpFront, Observing, Connections):
    """The simulated engine's HTTP front end and chunk scheduler."""

    def __init__(self, config: SimConfig, sock: socket.socket, worker_index: int = 0,
                 tokenize: Tokenize | None = None, shared: SharedStats | None = None) -> None:
        """``shared``: the ``/metrics`` blocks of all workers (made before they fork); a block of one if None."""
        self.config = config
        self.sock = sock
        self.loop = EventLoop()
        self.parser = RequestParser(config, tokenize)
        self.faults = FaultPicker(config.faults, config.seed * 7919 + worker_index)
        # one cache per process: --workers N behave as N replicas, each with its own prefix cache
        self.prefix_cache = (PrefixCache(config.prefix_cache_tokens, config.prefix_cache_block)
                             if config.prefix_cache else None)
        #: the loaded LoRA adapters of this process (--workers: each replica its own)
        self.adapters = AdapterSlots(config.max_loras, config.lora_load_ms)
        self.engine = (None if config.fixed_timing
                       else BatchEngine(config.profile, config.tokens_per_chunk, self.prefix_cache,
                                        self.adapters if config.lora_modules else None))
        self._step_deadline: float | None = None
        self.conns: dict[int, Conn] = {}
        self._ids = count(1)
        self._id_prefix = f"{os.getpid():x}"
        self.wall_offset = time.time() - time.monotonic()
        self.trace = TraceFile(config.trace_file, self.wall_offset)
        self.requests = 0
        self.chunks_sent = 0
        self._own_shared = shared is None
        self.shared = shared if shared is not None else SharedStats(dialect_metrics(config.dialect))
        self.metrics = WorkerStats(self.shared, worker_index, self.engine.profile.kv_capacity if self.engine else 0)
        self.exposition = Exposition(self.shared, config.dialect, config.model)
        #: this replica's GPUs: its steps' work goes in, /dcgm/metrics (every replica's) comes out
        self.gpu = GpuWriter(self.shared.gpu, worker_index, config.gpu)
        self.dcgm = DcgmPage(self.shared, config.gpu, config.seed)
        self.engine_trace = EngineTrace(config.engine_trace, worker_index) if config.engine_trace else None
        self._fixed_running = 0
        # hot-path shortcuts into the loop
        self._timers = self.loop.timers
        self._timer_seq = self.loop._seq
        self._lateness = self.loop.lateness
        self._itl_s = (config.itl_ms or 0.0) / 1000.0
        #: when this process received its first request (--degrade-after counts from it)
        self.first_request_at: float | None = None
        self._session_header = config.session_header.strip().lower()  # request headers are lower-cased
        sock.setblocking(False)
        self.loop.register(sock.fileno(), select.EPOLLIN, self._on_accept)

    def serve_forever(self) -> None:
        try:
            self.loop.run()
        finally:
            self.close()

    def stop(self) -> None:
        self.loop.stop()

    def close(self) -> None:
        for conn in list(self.conns.values()):
            self._close(conn)
        self.loop.unregister(self.sock.fileno())
        self.loop.close()
        self.trace.close()
        if self.engine_trace is not None:
            self.engine_trace.close()
        if self._own_shared:
            self.shared.close()

    def stats(self) -> dict:
        counts = self.loop.lateness
        total = sum(counts)

        def pct(p: float) -> float:
            """The lateness percentile in µs: the bucket :func:`rank_bucket` picks (10 µs each)."""
            k = rank_bucket(counts, p)
            return 0.0 if k is None else k * 10.0

        engine = self.engine
        cache = self.prefix_cache
        return {
            "pid": os.getpid(),
            "requests": self.requests,
            "chunks_sent": self.chunks_sent,
            "timer_events": total,
            "lateness_us": {"p50": pct(50), "p99": pct(99), "p999": pct(99.9), "max": pct(100)},
            "running": len(engine.running) if engine else None,
            "waiting": len(engine.waiting) if engine else None,
            "prefix_cache": None if cache is None else {
                "tokens": cache.tokens, "capacity_tokens": cache.capacity_blocks * cache.block_size,
                "hit_tokens": cache.hits, "query_tokens": cache.queries,
            },
            "lora": {"loads": self.adapters.loads, "loaded": self.adapters.active,
                     "max_loras": self.adapters.max_loras} if self.config.lora_modules else None,
            # every worker's GPUs (shared memory), not only this one's: the inputs of /dcgm/metrics' power model
            "gpu": self.dcgm.totals(),
        }
