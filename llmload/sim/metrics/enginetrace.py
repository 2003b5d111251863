"""The engine's own ground truth (``--engine-trace``): one JSON line each time its scheduler state is published.

A line is written exactly when ``/metrics``' gauges change (an engine step begins, a request arrives while a
step runs, leaves early, or, in fixed-timing mode, starts or ends), with ``t`` from ``time.monotonic()`` (the
``--trace-file`` clock) taken at that moment. So the gauges a scrape served at server time ``T`` are those of the
last line with ``t <= T``. Lines are buffered and written with one ``os.write`` per batch (``O_APPEND``: workers'
batches never interleave mid-line): when 256 lines are pending, a second after the last write, when the engine
goes idle, and at exit.
"""

from __future__ import annotations

import os

import orjson

_BATCH_LINES = 256
_BATCH_S = 1.0


class EngineTrace:
    """One worker's engine-trace writer."""

    def __init__(self, path: str, worker: int) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.pid = os.getpid()
        self.worker = worker
        self._lines: list[bytes] = []
        self._written_at = 0.0

    def write(self, t: float, running: int, waiting: int, kv_usage: float, step_s: float) -> None:
        """The state from ``t`` on; ``step_s`` is the planned length of the step that begins (0: none)."""
        self._lines.append(orjson.dumps({
            "t": t, "pid": self.pid, "worker": self.worker, "running": running, "waiting": waiting,
            "kv_usage": kv_usage, "step_s": step_s,
        }))
        if (not running and not waiting) or len(self._lines) >= _BATCH_LINES or t - self._written_at >= _BATCH_S:
            self.flush(t)

    def flush(self, t: float = 0.0) -> None:
        if self._lines and self.fd is not None:
            os.write(self.fd, b"\n".join(self._lines) + b"\n")
            self._lines.clear()
        self._written_at = t

    def close(self) -> None:
        if self.fd is not None:
            self.flush()
            os.close(self.fd)
            self.fd = None
