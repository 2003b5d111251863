"""Requests beside the measured run, as today's ``vllm bench serve`` sends them (docs/vllm-compat.md): warm-up
copies of the first request before it (``--num-warmups``), and probe requests during it
(``--probe-request-rate``): a one-token "Hi", one at a time, outside the ``--max-concurrency`` limit, to see
what a new user's request meets under the load. Neither is a record of the run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llmload.core.schedule import INITIAL_TEST_ID, Scheduled
from llmload.datasets.base import SampleRequest

#: what a probe sends (vLLM's: the prompt "Hi", one token each way)
PROBE_SAMPLE = SampleRequest(prompt="Hi", prompt_len=1, expected_output_len=1)
Send = Callable[[Scheduled], Any]


def warm_up(send: Send, sample: SampleRequest, count: int, max_concurrency: int | None) -> int:
    """Send ``count`` copies of ``sample`` at once (at most ``max_concurrency`` at a time) and wait for them;
    returns how many failed. Not measured."""
    from gevent.pool import Pool

    pool = Pool(max_concurrency or count)
    sent = [pool.spawn(send, Scheduled(-1, 0.0, sample, f"{INITIAL_TEST_ID}-warmup-{i}")) for i in range(count)]
    pool.join()
    return sum(1 for g in sent if g.value is None or not getattr(g.value, "success", False))


@dataclass
class ProbeRequests:
    """Probes at ``rate`` per second at most: send, wait for the answer, sleep ``1 / rate``, again, until
    :meth:`finish` (which waits for the probe in flight, as vLLM awaits its last one)."""

    send: Send
    rate: float
    latencies_s: list[float] = field(default_factory=list)
    failed: int = 0

    def __post_init__(self) -> None:
        from gevent.event import Event

        self._stop = Event()
        self._greenlet: Any = None

    def start(self) -> None:
        import gevent

        self._greenlet = gevent.spawn(self._loop)

    def _loop(self) -> None:
        n = 0
        while not self._stop.is_set():
            record = self.send(Scheduled(-1, 0.0, PROBE_SAMPLE, f"{INITIAL_TEST_ID}-probe-{n}"))
            n += 1
            if getattr(record, "success", False) and record.e2el is not None:
                self.latencies_s.append(float(record.e2el))
            else:
                self.failed += 1
            self._stop.wait(1.0 / self.rate)

    def finish(self, timeout_s: float | None = None) -> None:
        """Stop sending; wait up to ``timeout_s`` for the probe in flight, then drop it."""
        self._stop.set()
        if self._greenlet is not None:
            self._greenlet.join(timeout=timeout_s)
            self._greenlet.kill(block=False)

    def result_keys(self) -> dict[str, Any]:
        """vLLM's ``probe_*`` keys: only when a probe completed (milliseconds, linear percentiles)."""
        if not self.latencies_s:
            return {}
        ms = np.asarray(self.latencies_s) * 1000.0
        return {"probe_completed": len(self.latencies_s), "probe_failed": self.failed,
                "probe_median_e2el_ms": float(np.median(ms)), "probe_p99_e2el_ms": float(np.percentile(ms, 99)),
                "probe_max_e2el_ms": float(np.max(ms))}
