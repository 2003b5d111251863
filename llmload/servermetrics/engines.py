"""Which engine serves the metrics, and its series under common names.

Each engine names the same quantities differently (vLLM ``vllm:num_requests_running``, SGLang
``sglang:num_running_reqs``, TGI ``tgi_batch_current_size``); the summary and the report read the common names
of :data:`COMMON_SERIES`. A common series takes the first of its source names that the scrape has (the current
name first, then older ones: vLLM exported both during renames, and they must not add up). Samples no mapping
uses stay in :attr:`Snapshot.raw` only.

Across label sets (vLLM's ``engine`` and ``model_name``, SGLang's ``dp_rank``, ``finished_reason``...) a count
is summed: several data-parallel engines or models behind one server add up. A fraction (KV-cache usage, an
engine's own hit rate) is averaged over them, as vLLM's aggregated log line does, and ``kv_cache_usage_max``
keeps the fullest engine. Series that differ only in a shard label (SGLang's ``tp_rank``, ``pp_rank``,
``moe_ep_rank``: the ranks of one tensor/pipeline-parallel engine report the same batch) count once: the
lowest rank's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from llmload.servermetrics.parse import Sample

SUM, MEAN, HISTOGRAM = "sum", "mean", "histogram"

#: labels that tell the shards of one engine apart (their series are one series, not several to add up)
SHARD_LABELS = ("tp_rank", "pp_rank", "moe_ep_rank")

#: gauges and counters under their common names (histograms: :data:`COMMON_HISTOGRAMS`)
COMMON_SERIES = (
    "running",  # requests in the running batch
    "waiting",  # requests queued
    "kv_cache_usage",  # fraction 0..1 of the KV cache in use (mean over engines)
    "kv_cache_usage_max",  # the fullest engine's fraction
    "prefix_cache_hits_total",  # prompt tokens served from the prefix cache (counter)
    "prefix_cache_queries_total",  # prompt tokens looked up in it (counter)
    "prefix_cache_hit_rate",  # the engine's own hit rate, where it exports only a rate (0..1)
    "preemptions_total",  # requests preempted (vLLM) or retracted (SGLang) (counter)
    "prompt_tokens_total",
    "generation_tokens_total",
    "requests_finished_total",
    "batch_max_tokens",  # TGI: token budget reserved by the running batch
    "max_batch_total_tokens",  # TGI: the budget's size
)

#: histograms: ``series["<name>_sum"]``, ``series["<name>_count"]`` and ``histograms[name]``
COMMON_HISTOGRAMS = ("ttft_seconds", "queue_time_seconds", "e2e_seconds", "itl_seconds", "tpot_seconds")


@dataclass(frozen=True)
class Source:
    """A common series and the engine's names for it, in order of preference."""

    common: str
    names: tuple[str, ...]
    how: str = SUM


def _s(common: str, *names: str, how: str = SUM) -> Source:
    return Source(common, names, how)


def _h(common: str, *names: str) -> Source:
    return Source(common, names, HISTOGRAM)


#: engine -> its sources (names checked in vLLM vllm/v1/metrics/loggers.py, SGLang
#: python/sglang/srt/metrics/collector.py, TGI router/src/server.rs + backends/v3; see tests/data/README.md)
ENGINES: dict[str, tuple[Source, ...]] = {
    "vllm": (
        _s("running", "vllm:num_requests_running"),
        _s("waiting", "vllm:num_requests_waiting"),
        _s("kv_cache_usage", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", how=MEAN),
        _s("prefix_cache_hits_total", "vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
        _s("prefix_cache_queries_total", "vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
        _s("prefix_cache_hit_rate", "vllm:gpu_prefix_cache_hit_rate", how=MEAN),  # v0 engine
        _s("preemptions_total", "vllm:num_preemptions_total"),
        _s("prompt_tokens_total", "vllm:prompt_tokens_total"),
        _s("generation_tokens_total", "vllm:generation_tokens_total"),
        _s("requests_finished_total", "vllm:request_success_total"),
        _h("ttft_seconds", "vllm:time_to_first_token_seconds"),
        _h("queue_time_seconds", "vllm:request_queue_time_seconds"),
        _h("e2e_seconds", "vllm:e2e_request_latency_seconds"),
        _h("itl_seconds", "vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
        _h("tpot_seconds", "vllm:request_time_per_output_token_seconds"),
    ),
    "sglang": (
        _s("running", "sglang:num_running_reqs"),
        _s("waiting", "sglang:num_queue_reqs"),
        _s("kv_cache_usage", "sglang:token_usage", how=MEAN),
        # counted per finished request, both: cached prompt tokens over prompt tokens is the token hit rate
        _s("prefix_cache_hits_total", "sglang:cached_tokens_total"),
        _s("prefix_cache_queries_total", "sglang:prompt_tokens_total"),
        _s("prefix_cache_hit_rate", "sglang:cache_hit_rate", how=MEAN),
        _s("preemptions_total", "sglang:num_retracted_requests_total"),
        _s("prompt_tokens_total", "sglang:prompt_tokens_total"),
        _s("generation_tokens_total", "sglang:generation_tokens_total"),
        _s("requests_finished_total", "sglang:num_requests_total"),
        _h("ttft_seconds", "sglang:time_to_first_token_seconds"),
        _h("queue_time_seconds", "sglang:queue_time_seconds"),
        _h("e2e_seconds", "sglang:e2e_request_latency_seconds"),
        _h("itl_seconds", "sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
    ),
    "tgi": (
        _s("running", "tgi_batch_current_size"),
        _s("waiting", "tgi_queue_size"),
        _s("batch_max_tokens", "tgi_batch_current_max_tokens"),
        _s("max_batch_total_tokens", "tgi_batch_max_total_tokens"),
        # TGI counts tokens in per-request histograms: input length at validation, generated at success
        _s("prompt_tokens_total", "tgi_request_input_length_sum"),
        _s("generation_tokens_total", "tgi_request_generated_tokens_sum"),
        _s("requests_finished_total", "tgi_request_success"),
        _h("queue_time_seconds", "tgi_request_queue_duration"),
        _h("e2e_seconds", "tgi_request_duration"),
        # each request's mean time per output token (TGI's docs call it inter-token latency)
        _h("itl_seconds", "tgi_request_mean_time_per_token_duration"),
    ),
}

_PREFIXES = {"vllm": "vllm:", "sglang": "sglang:", "tgi": "tgi_"}


def detect_engine(samples: Iterable[Sample]) -> str | None:
    """``"vllm"``, ``"sglang"`` or ``"tgi"`` from the metric names' prefixes (the one with most samples), or
    None for a server none of them runs."""
    counts = dict.fromkeys(_PREFIXES, 0)
    for s in samples:
        name = s.name
        if name.startswith("vllm:"):
            counts["vllm"] += 1
        elif name.startswith("sglang:"):
            counts["sglang"] += 1
        elif name.startswith("tgi_"):
            counts["tgi"] += 1
    best = max(counts, key=lambda k: counts[k])
    return best if counts[best] else None


def source_names(engine: str | None) -> frozenset[str]:
    """Every sample name the mapping of ``engine`` may read (histograms' ``_bucket``/``_sum``/``_count``)."""
    names: set[str] = set()
    for src in ENGINES.get(engine or "", ()):
        for n in src.names:
            names.update((f"{n}_bucket", f"{n}_sum", f"{n}_count") if src.how == HISTOGRAM else (n,))
    return frozenset(names)


def _dedupe(samples: list[Sample]) -> list[Sample]:
    """One sample per series once shard labels are ignored: the lowest shard's."""
    if not any(label in s.labels for s in samples for label in SHARD_LABELS):
        return samples
    kept: dict[tuple, tuple[tuple, Sample]] = {}
    for s in samples:
        key = tuple(sorted((k, v) for k, v in s.labels.items() if k not in SHARD_LABELS))
        shard = tuple(_rank(s.labels.get(label, "")) for label in SHARD_LABELS)
        if key not in kept or shard < kept[key][0]:
            kept[key] = (shard, s)
    return [s for _, s in kept.values()]


def _rank(value: str) -> tuple[int, str]:
    return (int(value), "") if value.isdigit() else (1 << 30, value)


def _finite(samples: list[Sample]) -> list[float]:
    return [s.value for s in samples if math.isfinite(s.value)]


def _histogram(
    by_name: dict[str, list[Sample]], base: str
) -> tuple[float | None, float, list[tuple[float, float]]]:
    """Sum (None when not exported), count and cumulative buckets ``[(le, count), ...]`` (ascending ``le``,
    ``+Inf`` as ``inf``), each added up over the label sets."""
    sums = _finite(_dedupe(by_name.get(f"{base}_sum", [])))
    total = sum(sums) if sums else None
    buckets: dict[float, float] = {}
    for s in _dedupe(by_name.get(f"{base}_bucket", [])):
        try:
            le = float(s.labels.get("le", ""))
        except ValueError:
            continue
        if math.isfinite(s.value) and not math.isnan(le):
            buckets[le] = buckets.get(le, 0.0) + s.value
    counts = _finite(_dedupe(by_name.get(f"{base}_count", [])))
    count = sum(counts) if counts else buckets.get(math.inf, 0.0)  # the +Inf bucket is the count
    return total, count, sorted(buckets.items())


def _add_gauge(series: dict[str, float], src: Source, samples: list[Sample]) -> bool:
    values = _finite(_dedupe(samples))
    if not values:
        return False
    if src.how == MEAN:
        series[src.common] = sum(values) / len(values)
        if src.common == "kv_cache_usage":
            series["kv_cache_usage_max"] = max(values)
    else:
        series[src.common] = float(sum(values))
    return True


def common_series(
    samples: Iterable[Sample], engine: str | None
) -> tuple[dict[str, float], dict[str, list[tuple[float, float]]]]:
    """``(series, histograms)`` of one scrape under the common names; both empty for an unknown engine.

    A histogram ``h`` gives ``series["h_sum"]``, ``series["h_count"]`` and ``histograms["h"]``. TGI's
    ``kv_cache_usage`` is derived: the running batch's reserved token budget over the total budget, an upper
    bound of the KV cache in use (TGI exports no usage)."""
    sources = ENGINES.get(engine or "")
    if not sources:
        return {}, {}
    wanted = source_names(engine)
    by_name: dict[str, list[Sample]] = {}
    for s in samples:
        if s.name in wanted:
            by_name.setdefault(s.name, []).append(s)
    series: dict[str, float] = {}
    histograms: dict[str, list[tuple[float, float]]] = {}
    for src in sources:
        for name in src.names:
            if src.how != HISTOGRAM:
                if name in by_name and _add_gauge(series, src, by_name[name]):
                    break
                continue
            if f"{name}_count" in by_name or f"{name}_bucket" in by_name:
                total, count, buckets = _histogram(by_name, name)
                series[f"{src.common}_count"] = count
                if total is not None:
                    series[f"{src.common}_sum"] = total
                if buckets:
                    histograms[src.common] = buckets
                break
    budget = series.get("max_batch_total_tokens")
    if engine == "tgi" and budget and "batch_max_tokens" in series:
        series["kv_cache_usage"] = min(1.0, series["batch_max_tokens"] / budget)
    return series, histograms
