"""The run-control options of today's ``vllm bench serve`` (``--ready-check-timeout-sec``, ``--num-warmups``,
``--probe-request-rate``): part of the one option table (:mod:`llmload.options.table`); what they do:
:mod:`llmload.core.probes` and :func:`llmload.bench.setup.initial_test`."""

from __future__ import annotations

import llmload.options.argtypes as argtypes
from llmload.options.spec import Option, Scope

BENCH = Scope.BENCH

RUN_OPTIONS = (
    Option(("--ready-check-timeout-sec",), "ready_check_timeout_sec", BENCH, "timeouts",
           "retry the initial test request until the server answers, for up to this many seconds (0: one try, "
           "default; vllm bench serve then sends none, llmload always checks the server before the run)",
           type=argtypes.non_negative_int, default=0, metavar="S"),
    Option(("--num-warmups",), "num_warmups", BENCH, "timeouts",
           "before the run, send this many copies of the first request at once (at most --max-concurrency at a "
           "time), not measured (default: %(default)s)", type=argtypes.non_negative_int, default=0, metavar="N"),
    Option(("--probe-request-rate",), "probe_request_rate", BENCH, "timeouts",
           "during the run, send one-token probe requests one at a time, at most this many per second, outside "
           "--max-concurrency: what a new user's request meets under the load (probe_* keys; default: none)",
           type=argtypes.non_negative, default=0.0, metavar="RPS"),
)
