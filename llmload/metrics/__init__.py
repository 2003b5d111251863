"""Benchmark metrics from raw :class:`RequestRecord` values, with vLLM's ``benchmark_serving`` semantics.

    definitions   every per-request metric, once: name, unit, which requests, formula (TTFT, ITL, TPOT, ...)
    accumulator   MetricsAccumulator: records in one at a time; final BenchmarkMetrics and live numbers out
    compute       compute_metrics (a MetricsAccumulator over a list), detailed_lists, failure_counts
    conversations ConversationTally: per-turn, per-conversation, reasoning and prefix-cache numbers
    conversation_result  ConversationMetrics (TurnStats, ConversationStats, ...) and their result JSON keys
    result        Distribution, BenchmarkMetrics and the result JSON's keys
    slos          parse_goodput, the one SLO parser (run-wide, per user class, per model)
    percentiles   the one percentile rule over raw values and over bucket counts
    histogram     LogHistogram, the mergeable histogram of the live paths
    peaks         vLLM's max_output_tokens_per_s and max_concurrent_requests
    slices        time_slices: the same numbers per slice of a run (--slice-duration)
    cost          Deployment (--gpus, --gpu-type, --gpu-hour-cost): throughput per GPU, cost per million tokens

Statistics: numpy mean, median, population std, ``np.percentile`` (linear); an empty list gives 0.

Names load on first use: the simulator imports :mod:`llmload.metrics.percentiles` and runs without numpy, and
:mod:`llmload.client.records` takes its properties from :mod:`llmload.metrics.definitions`.
"""

from __future__ import annotations

from llmload.common.lazy import lazy_names

_EXPORTS = {
    "accumulator": ("MetricsAccumulator", "LIVE_PERCENTILES"),
    "compute": ("compute_metrics", "detailed_lists", "request_lists", "failure_counts"),
    "cost": ("Deployment", "deployment_from"),
    "conversations": ("ConversationTally", "TURN_ROWS", "turn_row"),
    "conversation_result": ("ConversationMetrics", "ConversationStats", "TurnStats", "ReasoningStats",
                            "PrefixCacheStats"),
    "definitions": (
        "METRICS", "Metric", "GOODPUT_METRICS", "COMPLETED", "SENT", "is_completed", "is_good", "ttft_s",
        "ttfat_s", "answer_delay_s",
        "itl_array", "itls_s", "tpot_s", "tpot_steady_s", "e2el_s", "queue_time_s", "schedule_lag_s",
        "input_tokens", "server_input_tokens", "output_tokens", "goodput_value_s", "meets_slo", "GOODPUT_MISSING",
    ),
    "histogram": ("LogHistogram",),
    "peaks": ("peak_per_second", "token_times"),
    "percentiles": ("linear_percentiles", "rank_bucket"),
    "result": ("BenchmarkMetrics", "Distribution", "METRIC_NAMES", "QUEUE_METRIC_NAMES", "TTFT_RULES", "DETAILED_KEYS",
               "percentile_label"),
    "slices": ("time_slices",),
    "slos": ("parse_goodput", "split_slos", "slos_for", "check_slos", "form_items"),
}
__all__ = sorted(name for names in _EXPORTS.values() for name in names)

__getattr__, __dir__ = lazy_names(__name__, _EXPORTS, globals(), __all__)
