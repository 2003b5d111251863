"""What today's ``vllm bench serve`` measures around the main run besides the requests, for ``llmload bench``:
probe requests during it (``--probe-request-rate``), the server's speculative-decoding counters before and after
it, and the ramp-up's rate changes (docs/vllm-compat.md). :meth:`RunExtras.end` gives their result keys."""

from __future__ import annotations

import time
from typing import Any

from llmload.core.probes import ProbeRequests
from llmload.core.ramp_events import rps_change_events
from llmload.servermetrics.spec_decode import read_spec_decode, spec_decode_keys

#: how long a ``/metrics`` read for the spec-decode counters may take (a server without the page answers 404)
SPEC_READ_TIMEOUT_S = 2.0


class RunExtras:
    """Started just before the first measured request, ended after the last."""

    def __init__(self, plan: Any, run: Any, user: Any) -> None:
        args = plan.args
        self.spec = plan.config.spec
        self.schedule = run.schedule
        self.base_url = run.target.base_url
        self.headers = {"Authorization": f"Bearer {plan.api_key}"} if plan.api_key else None
        self.stop_timeout = float(args.stop_timeout or 0.0)
        rate = float(getattr(args, "probe_request_rate", 0.0) or 0.0)
        self.probes = ProbeRequests(user.send, rate) if rate > 0 else None
        self.counters_before: dict[str, Any] | None = None
        self.start_wall = time.time()

    def begin(self) -> None:
        self.counters_before = read_spec_decode(self.base_url, self.headers, SPEC_READ_TIMEOUT_S)
        if self.probes is not None:
            self.probes.start()
        self.start_wall = time.time()

    def end(self, interrupted: bool = False) -> dict[str, Any]:
        """vLLM's probe, ``rps_change_events`` and ``spec_decode_*`` keys (each only where it applies). A stopped
        run does not wait for the probe in flight (its requests already had ``--stop-timeout``)."""
        keys: dict[str, Any] = {}
        if self.probes is not None:
            self.probes.finish(timeout_s=0.0 if interrupted else max(self.stop_timeout, 1.0))
            keys.update(self.probes.result_keys())
        if self.spec.ramp_up_strategy is not None:
            offsets = [entry.offset for entry in getattr(self.schedule, "entries", ())]
            keys["rps_change_events"] = rps_change_events(self.spec, offsets, self.start_wall)
        after = read_spec_decode(self.base_url, self.headers, SPEC_READ_TIMEOUT_S) if self.counters_before else None
        keys.update(spec_decode_keys(self.counters_before, after))
        return keys
