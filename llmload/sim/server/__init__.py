"""HTTP/1.1 handling, generation jobs and the trace file of the simulated engine.

One process runs one :class:`SimServer` on an :class:`~llmload.sim.loop.EventLoop`. Streams use chunked
transfer encoding with one SSE event per HTTP chunk, keep-alive is supported, and every chunk is sent at its
scheduled time: from the continuous-batching engine's step ends, or, in fixed-timing mode, at
``received + ttft + k·itl``. ``--workers N`` runs N such processes on one port with SO_REUSEPORT.

    conn.py       Conn and Job; non-blocking accept, read, write, close
    http.py       request heads, keep-alive, plain responses, the non-generation routes
    streaming.py  starting a job (and its fault), the two chunk clocks, sending chunks
    tracefile.py  the --trace-file ground truth
    observe.py    what /metrics and --engine-trace learn: scheduler state, first tokens, request ends
    core.py       SimServer: the parts above put together, its lifetime and /sim/stats
    workers.py    binding the port, one process or N forked workers (serve)
"""

from __future__ import annotations

from llmload.sim.server.conn import Conn, Job
from llmload.sim.server.core import SimServer
from llmload.sim.server.workers import run_worker, serve

__all__ = ["Conn", "Job", "SimServer", "run_worker", "serve"]
