"""The fixed choice sets of llmload's options, each spelled once.

A dependency-free module on purpose: the option table (:mod:`llmload.options`), the dataset readers, the
arrival code and the metrics all import these, and ``llmload.options`` itself imports the backends and datasets
(for :data:`~llmload.client.backends.BACKENDS`, :data:`~llmload.datasets.DATASET_NAMES`), so keeping the tuples here
avoids an import cycle. Backends and dataset names stay with their registries.
"""

from __future__ import annotations

#: vLLM's ``--percentile-metrics`` names, in the order vLLM reports them
METRIC_NAMES = ("ttft", "tpot", "itl", "e2el")
#: today's ``vllm bench serve``'s client-side queue metrics (completed requests; need ``--max-concurrency``, the
#: second also a finite ``--request-rate``), reported after :data:`METRIC_NAMES`
QUEUE_METRIC_NAMES = ("client_queue_time", "e2el_including_client_queue")
#: every name ``--percentile-metrics`` takes
PERCENTILE_METRIC_NAMES = (*METRIC_NAMES, *QUEUE_METRIC_NAMES)

#: ``--ttft-rule``: which streamed event counts as the first token (content: first text; vllm: first choices)
TTFT_RULES = ("content", "vllm")
#: ``--trace-format``: the trace files ``--dataset-name trace`` reads
TRACE_FORMATS = ("azure", "burstgpt", "jsonl", "mooncake")
#: ``--dataset-name`` values that replay a trace: ``mooncake`` and vLLM's ``timed_trace`` read Mooncake's JSONL
TRACE_DATASETS = ("trace", "mooncake", "timed_trace")
#: datasets of agentic sessions: each sample is a session of dependent calls (docs/agentic.md)
SESSION_DATASETS = ("weka_trace",)
#: ``--ramp-up-strategy``: vLLM's ramp-up shapes
RAMP_UP_STRATEGIES = ("linear", "exponential")
#: ``--records-format``: the per-request records file next to a result JSON
RECORDS_FORMATS = ("jsonl", "parquet")
#: ``--arrival`` (``locust -f``): closed loop (send, wait, repeat) or open loop (Poisson at ``--request-rate``)
ARRIVALS = ("closed", "open")

#: ``--history``: what a replayed conversation appends after each turn (docs/conversations.md)
HISTORY_MODES = ("recorded", "live")
#: ``--context-policy``: what happens to a turn over ``--max-context-tokens``
CONTEXT_POLICIES = ("end", "truncate")

__all__ = ["ARRIVALS", "CONTEXT_POLICIES", "HISTORY_MODES", "RAMP_UP_STRATEGIES", "RECORDS_FORMATS", "SESSION_DATASETS", "TRACE_DATASETS", "TRACE_FORMATS",
           "TTFT_RULES"]
