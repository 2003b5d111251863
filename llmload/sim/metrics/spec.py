"""What each dialect's ``/metrics`` serves: names, types, help texts, bucket boundaries and labels.

The names, types and buckets are the engines' own (vLLM v1: ``vllm/v1/metrics/loggers.py``; SGLang:
``python/sglang/srt/metrics/collector.py`` and the scheduler's and tokenizer manager's labels), so dashboards and
scrapers built for those engines read the simulator unchanged. ``max`` and ``transformers`` serve vLLM's names.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

#: the histograms every dialect keeps, in their order in a worker's block
HISTOGRAMS = ("ttft", "itl", "e2e", "queue")
#: vLLM's FinishReason strings, in its order; every one is served (at 0 until it happens)
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")

_VLLM_TTFT = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
              40.0, 80.0, 160.0, 640.0, 2560.0)
_VLLM_ITL = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
             80.0)
_VLLM_REQUEST = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
                 480.0, 960.0, 1920.0, 7680.0)
_SGLANG_TTFT = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
_SGLANG_E2E = (*_SGLANG_TTFT, 600, 1200, 1800, 2400)
_SGLANG_ITL = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080, 0.100,
               0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0)
_SGLANG_QUEUE = (0.0, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90, 100, 200, 300, 400, 500,
                 600, 700, 800, 900, 1000, 1200, 1400, 1600, 1800, 2000, 2500, 3000)


@dataclass(frozen=True, slots=True)
class Family:
    """One metric family: ``source`` names a scalar of the worker block (or a histogram of :data:`HISTOGRAMS`).

    ``scope`` ``engine``: one series per worker (an engine replica); ``frontend``: one series summed over the
    workers, as SGLang's single tokenizer manager reports for all its schedulers. ``name`` is the exposition
    name (counters end in ``_total``).
    """

    name: str
    kind: str
    help: str
    source: str
    scope: str = "engine"


@dataclass(frozen=True, slots=True)
class Dialect:
    """The families of one engine's ``/metrics`` and how the engine counts.

    ``itl_per_token``: a chunk of ``n`` tokens after a gap ``g`` counts ``n`` observations of ``g / n`` (SGLang);
    otherwise one observation of ``g`` per chunk (vLLM, one per engine step). ``tokens_at_finish``: the token
    counters grow when a request ends (SGLang's tokenizer manager); otherwise as tokens are computed (vLLM).
    """

    families: tuple[Family, ...]
    buckets: MappingProxyType[str, tuple[float, ...]]
    itl_per_token: bool
    tokens_at_finish: bool


VLLM = Dialect(
    families=(
        Family("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", "running"),
        Family("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", "waiting"),
        Family("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", "kv_usage"),
        Family("vllm:prefix_cache_queries_total", "counter",
               "Prefix cache queries, in terms of number of queried tokens.", "prefix_queries"),
        Family("vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.",
               "prefix_hits"),
        Family("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.",
               "preemptions"),
        Family("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", "prompt_tokens"),
        Family("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
               "generation_tokens"),
        Family("vllm:request_success_total", "counter", "Count of successfully processed requests.", "success"),
        Family("vllm:time_to_first_token_seconds", "histogram", "Histogram of time to first token in seconds.",
               "ttft"),
        Family("vllm:inter_token_latency_seconds", "histogram", "Histogram of inter-token latency in seconds.",
               "itl"),
        Family("vllm:e2e_request_latency_seconds", "histogram", "Histogram of e2e request latency in seconds.",
               "e2e"),
        Family("vllm:request_queue_time_seconds", "histogram",
               "Histogram of time spent in WAITING phase for request.", "queue"),
    ),
    buckets=MappingProxyType({"ttft": _VLLM_TTFT, "itl": _VLLM_ITL, "e2e": _VLLM_REQUEST, "queue": _VLLM_REQUEST}),
    itl_per_token=False,
    tokens_at_finish=False,
)

SGLANG = Dialect(
    families=(
        Family("sglang:num_running_reqs", "gauge", "The number of running requests.", "running"),
        Family("sglang:num_used_tokens", "gauge", "The number of used tokens.", "kv_tokens"),
        Family("sglang:token_usage", "gauge", "The token usage.", "kv_usage"),
        Family("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.", "waiting"),
        Family("sglang:cache_hit_rate", "gauge", "The prefix cache hit rate.", "batch_hit_rate"),
        Family("sglang:max_total_num_tokens", "gauge", "Maximum total number of tokens in the KV cache pool.",
               "kv_capacity"),
        Family("sglang:queue_time_seconds", "histogram", "Histogram of queueing time in seconds.", "queue"),
        Family("sglang:prompt_tokens_total", "counter", "Number of prefill tokens processed.", "prompt_tokens",
               "frontend"),
        Family("sglang:generation_tokens_total", "counter", "Number of generation tokens processed.",
               "generation_tokens", "frontend"),
        Family("sglang:cached_tokens_total", "counter", "Number of cached prompt tokens.", "cached_tokens",
               "frontend"),
        Family("sglang:num_requests_total", "counter", "Number of requests processed.", "requests", "frontend"),
        Family("sglang:num_aborted_requests_total", "counter", "Number of requests aborted.", "aborted", "frontend"),
        Family("sglang:time_to_first_token_seconds", "histogram", "Histogram of time to first token in seconds.",
               "ttft", "frontend"),
        Family("sglang:inter_token_latency_seconds", "histogram", "Histogram of inter-token latency in seconds.",
               "itl", "frontend"),
        Family("sglang:e2e_request_latency_seconds", "histogram", "Histogram of End-to-end request latency in seconds",
               "e2e", "frontend"),
    ),
    buckets=MappingProxyType({"ttft": _SGLANG_TTFT, "itl": _SGLANG_ITL, "e2e": _SGLANG_E2E, "queue": _SGLANG_QUEUE}),
    itl_per_token=True,
    tokens_at_finish=True,
)


def dialect_metrics(dialect: str) -> Dialect:
    """The metric set a ``--dialect`` serves: SGLang's for ``sglang``, vLLM's for every other."""
    return SGLANG if dialect == "sglang" else VLLM


def escape_label(value: str) -> str:
    """A label value as the text format wants it (backslash, double quote and newline escaped)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def engine_labels(dialect: str, model: str, index: int, workers: int) -> str:
    """The label set of worker ``index``'s engine series (without braces).

    vLLM labels each engine core ``engine="<i>"``; SGLang labels its scheduler by rank and adds ``dp_rank`` only
    with data parallelism (here: more than one worker).
    """
    m = escape_label(model)
    if dialect != "sglang":
        return f'model_name="{m}",engine="{index}"'
    labels = f'model_name="{m}",engine_type="unified",tp_rank="0",pp_rank="0"'
    return labels + (f',dp_rank="{index}"' if workers > 1 else "")


def frontend_labels(model: str) -> str:
    """The label set of SGLang's tokenizer-manager series (one for all workers)."""
    return f'model_name="{escape_label(model)}",engine_type="unified"'
