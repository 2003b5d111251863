"""The printed result block: vLLM's ``benchmark_serving.py`` layout, then llmload's own lines.

Layout (as vLLM): a heading centred in 50 ``=`` (``"{s:{c}^{n}}"``), one ``"{:<40} {:<10}"`` line per integer
and ``"{:<40} {:<10.2f}"`` per float, a section per selected metric headed by its title centred in 50 ``-``
(Mean, Median, then one line per percentile), closed by 50 ``=``. llmload's block follows in the same style,
then, for a multi-turn, reasoning or prefix-cache run, its blocks (:mod:`llmload.summary.conversations`), then,
for a run with more than one user class, one section per class (last, so the lines above never move).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from llmload.metrics import METRIC_NAMES, BenchmarkMetrics, Distribution, percentile_label
from llmload.summary.conversations import format_conversation_blocks
from llmload.summary.lines import EXAMPLE_CHARS, WIDTH, float_line, heading, int_line
from llmload.summary.vllm_sections import probe_lines, queue_lines, spec_decode_lines

#: metric -> (label in lines, section title), as vLLM prints them
_SECTIONS = {
    "ttft": ("TTFT", "Time to First Token"),
    "tpot": ("TPOT", "Time per Output Token (excl. 1st token)"),
    "itl": ("ITL", "Inter-token Latency"),
    "e2el": ("E2EL", "End-to-end Latency"),
}


def _distribution_lines(dist: Distribution, name: str, *, with_median: bool = True) -> list[str]:
    lines = [float_line(f"Mean {name} (ms):", dist.mean_ms)]
    if with_median:
        lines.append(float_line(f"Median {name} (ms):", dist.median_ms))
    lines += [float_line(f"P{percentile_label(p)} {name} (ms):", v) for p, v in dist.percentiles_ms]
    return lines


def format_run_header(
    request_rate: float,
    burstiness: float = 1.0,
    max_concurrency: int | None = None,
    *,
    ramp_up_strategy: str | None = None,
    ramp_up_start_rps: float | None = None,
    ramp_up_end_rps: float | None = None,
) -> str:
    """The lines vLLM prints before the run starts (traffic rate, burstiness, concurrency)."""
    if ramp_up_strategy is not None:
        lines = [
            f"Traffic ramp-up strategy: {ramp_up_strategy}.",
            f"Will increase RPS from {ramp_up_start_rps} to {ramp_up_end_rps} RPS over the duration "
            "of the benchmark.",
        ]
    else:
        lines = [f"Traffic request rate: {request_rate}"]
    distribution = "Poisson process" if burstiness == 1.0 else "Gamma distribution"
    lines.append(f"Burstiness factor: {burstiness} ({distribution})")
    lines.append(f"Maximum request concurrency: {max_concurrency}")
    return "\n".join(lines)


def format_vllm_block(metrics: BenchmarkMetrics, *, max_concurrency: int | None = None,
                      request_rate: float | None = None, extras: Mapping[str, Any] | None = None) -> str:
    """Today's ``vllm bench serve`` ``Serving Benchmark Result`` block, line for line (docs/vllm-compat.md):
    failed requests after the successful ones, the configured rate when it is finite; ``extras``: the result's
    ``probe_*`` and ``spec_decode_*`` keys, whose sections appear when they are there."""
    m = metrics
    lines = [heading(" Serving Benchmark Result "), int_line("Successful requests:", m.completed),
             int_line("Failed requests:", m.failed)]
    if max_concurrency is not None:
        lines.append(int_line("Maximum request concurrency:", max_concurrency))
    if request_rate is not None and math.isfinite(request_rate):
        lines.append(float_line("Request rate configured (RPS):", request_rate))
    if m.pooling:
        return "\n".join(lines + _pooling_lines(m))
    lines += [
        float_line("Benchmark duration (s):", m.duration),
        int_line("Total input tokens:", m.total_input),
        int_line("Total generated tokens:", m.total_output),
        float_line("Request throughput (req/s):", m.request_throughput),
    ]
    if m.request_goodput is not None:
        lines.append(float_line("Request goodput (req/s):", m.request_goodput))
    lines += [
        float_line("Output token throughput (tok/s):", m.output_throughput),
        float_line("Peak output token throughput (tok/s):", m.max_output_tokens_per_s),
        float_line("Peak concurrent requests:", m.reported_max_concurrent),
        float_line("Total token throughput (tok/s):", m.total_token_throughput),
    ]
    lines += probe_lines(extras or {})
    for key in METRIC_NAMES:
        if key in m.selected_metrics:
            name, title = _SECTIONS[key]
            lines.append(heading(title, "-"))
            lines += _distribution_lines(getattr(m, key), name)
    lines += queue_lines(m)
    lines += spec_decode_lines(extras or {})
    lines.append("=" * WIDTH)
    return "\n".join(lines)


def _pooling_lines(m: BenchmarkMetrics) -> list[str]:
    """The rest of today's vLLM block for a pooling run: input tokens and throughputs, then E2EL (no output
    tokens, TTFT, TPOT or ITL)."""
    lines = [float_line("Benchmark duration (s):", m.duration), int_line("Total input tokens:", m.total_input),
             float_line("Request throughput (req/s):", m.request_throughput),
             float_line("Input throughput (inputs/s):", m.input_sequences / m.duration),
             float_line("Total token throughput (tok/s):", m.total_token_throughput)]
    name, title = _SECTIONS["e2el"]
    lines.append(heading(title, "-"))
    lines += _distribution_lines(m.e2el, name)
    lines += queue_lines(m)
    lines.append("=" * WIDTH)
    return lines


def media_lines(m: BenchmarkMetrics) -> list[str]:
    """Images sent and how long request bodies took to go out, where the run had them."""
    lines = []
    if m.images:
        lines.append(int_line("Images sent:", m.images))
        lines.append(float_line("Image bytes sent (MB):", m.image_bytes / 1e6))
    if m.sends:
        lines.append(float_line("Mean request send time (ms):", m.send_mean_ms))
        lines.append(float_line("Max request send time (ms):", m.send_max_ms))
    return lines


def _rate(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.2f}"


def format_llmload_block(
    metrics: BenchmarkMetrics,
    *,
    backend_label: str | None = None,
    request_rate: float | None = None,
    burstiness: float | None = None,
    client_health: dict[str, Any] | None = None,
    deployment: Any = None,
) -> str:
    """llmload's extra lines: failures, cut-offs, steady TPOT, queue time, schedule lag, per GPU and cost (when
    the run describes its GPUs: a :class:`~llmload.metrics.Deployment`), client health."""
    m = metrics
    lines = [heading(" llmload extras ")]
    if backend_label:
        lines.append(int_line("Backend:", backend_label))
    if request_rate is not None:
        lines.append(int_line("Request rate (req/s):", _rate(request_rate)))
    if burstiness is not None:
        lines.append(int_line("Burstiness factor:", burstiness))
    if m.cancelled:  # failed requests: in vLLM's block above
        lines.append(int_line("Cancelled by the client:", m.cancelled))
    lines.append(int_line("Cut off by end of run:", m.cut_off))
    if not m.pooling:
        lines.append(int_line("TTFT rule:", m.ttft_rule))
    if m.output_tokens_source and not m.pooling:
        sources = ", ".join(f"{k} {v}" for k, v in sorted(m.output_tokens_source.items()))
        lines.append(int_line("Output tokens counted from:", sources))
    if m.prompt_tokens_mismatch:
        lines.append(int_line("Server prompt tokens differ (requests):", m.prompt_tokens_mismatch))
    if m.structured_checked is not None:
        lines.append(structured_output_line(m))
    if m.tool_calls is not None:
        lines.append(int_line("Tool calls (answers with one):", f"{m.tool_calls} ({m.tool_call_answers})"))
    lines += media_lines(m)
    lines += failure_lines(m)
    if not m.pooling:
        lines.append(heading("TPOT excl. 1st ITL", "-"))
        lines += _distribution_lines(m.tpot_steady, "TPOT excl. 1st ITL")
    if m.queue_time.count:
        lines.append(heading("Queue time (send - intended)", "-"))
        lines += _distribution_lines(m.queue_time, "queue time")
    if m.schedule_lag.count:
        lines.append(heading("Schedule lag", "-"))
        lines += [
            float_line(f"P{percentile_label(p)} schedule lag (ms):", v)
            for p, v in m.schedule_lag.percentiles_ms
        ]
        lines.append(float_line("Max schedule lag (ms):", m.schedule_lag.max_ms))
        lines.append(int_line(f"Late sends (> {m.late_send_threshold_ms:g} ms):", m.late_sends))
    if deployment is not None and deployment.described:
        lines += _deployment_lines(m, deployment)
    if client_health:
        lines += _health_lines(client_health)
    lines.append("=" * WIDTH)
    return "\n".join(lines)


def _deployment_lines(m: BenchmarkMetrics, deployment: Any) -> list[str]:
    """Per GPU and, with a price, per million tokens (docs/metrics.md, "Per GPU and cost")."""
    gpus = f"{deployment.gpus} x {deployment.gpu_type}" if deployment.gpu_type else str(deployment.gpus)
    lines = [heading("Per GPU and cost", "-"), int_line("GPUs:", gpus),
             float_line("Output tok/s per GPU:", deployment.per_gpu(m.output_throughput)),
             float_line("Total tok/s per GPU:", deployment.per_gpu(m.total_token_throughput))]
    if deployment.gpu_hour_cost is not None:
        lines.append(float_line("GPU-hour cost (USD):", deployment.gpu_hour_cost))
        for label, rate in (("output", m.output_throughput), ("total", m.total_token_throughput)):
            cost = deployment.cost_per_million(rate)
            lines.append(float_line(f"Cost per 1M {label} tokens (USD):", cost) if cost is not None
                         else int_line(f"Cost per 1M {label} tokens (USD):", "n/a"))
    return lines


def structured_output_line(m: BenchmarkMetrics) -> str:
    """``--response-format``: how many checked answers parsed and matched the schema, of how many."""
    n, valid = m.structured_checked or 0, m.structured_valid
    share = f" ({100.0 * valid / n:.1f} %)" if n else ""
    return int_line("Structured output valid:", f"{valid} / {n}{share}")


#: longest example message printed after a failure kind's count
def failure_lines(metrics: BenchmarkMetrics) -> list[str]:
    """The "Failures by kind" section: one line per kind (most frequent first) with its count and an example
    message; nothing when every request completed."""
    if not metrics.failures_by_kind:
        return []
    lines = [heading("Failures by kind", "-")]
    for kind, n in sorted(metrics.failures_by_kind.items(), key=lambda kv: (-kv[1], kv[0])):
        example = " ".join(metrics.failure_examples.get(kind, "").split())
        if len(example) > EXAMPLE_CHARS:
            example = example[: EXAMPLE_CHARS - 3] + "..."
        lines.append(f"{kind + ':':<40} {n!s:<10} {example}".rstrip())
    return lines


def _health_lines(health: dict[str, Any]) -> list[str]:
    lines = [heading("Client health", "-")]
    if health.get("reader"):
        lines.append(int_line("Client reader:", health["reader"]))
    for key, label in (
        ("cpu_percent_mean", "Client CPU mean (%):"),
        ("cpu_percent_max", "Client CPU max (%):"),
        ("read_lag_p99_ms", "P99 read lag after arrival (ms):"),
        ("loop_lag_p99_ms", "P99 event-loop lag (ms):"),
        ("stall_p99_ms", "P99 loop stall (ms):"),
        ("stall_max_ms", "Longest loop stall (ms):"),
    ):
        if health.get(key) is not None:
            lines.append(float_line(label, float(health[key])))
    if health.get("merged_read_share") is not None:
        lines.append(float_line("Reads that merged chunks (%):", 100.0 * float(health["merged_read_share"])))
    if health.get("bottleneck"):
        reason = health.get("reason") or "the load generator could not keep up"
        lines.append(f"WARNING: THE CLIENT WAS THE BOTTLENECK: {reason}")
        lines.append("WARNING: latencies above include client delay; add processes or lower the load.")
        if health.get("processes_advised"):
            lines.append(f"WARNING: one process drives about {health['process_capacity_tok_s']:,} output tok/s here at "
                         f"{health.get('process_capacity_cpu_percent', 75):.0f}% CPU: --processes "
                         f"{health['processes_advised']} would have kept this run accurate.")
    return lines


def format_class_block(metrics: BenchmarkMetrics, *, by: str = "class") -> str:
    """Per user class (``metrics.by_class``; ``by="model"``: per model, ``metrics.by_model``): requests, tokens,
    throughput, goodput and the selected metrics' mean, median and percentiles over that part's requests;
    empty for a run with one."""
    parts = metrics.by_model if by == "model" else metrics.by_class
    if not parts:
        return ""
    lines = [heading(" By model " if by == "model" else " By user class ")]
    for user_class, m in parts.items():
        lines.append(heading(user_class or f"(no {by})", "-"))
        lines += [
            int_line("Successful requests:", m.completed),
            int_line("Failed requests:", m.failed),
            *([int_line("Cancelled by the client:", m.cancelled)] if m.cancelled else []),
            int_line("Cut off by end of run:", m.cut_off),
            int_line("Total input tokens:", m.total_input),
            *([] if m.pooling else [int_line("Total generated tokens:", m.total_output)]),
            float_line("Request throughput (req/s):", m.request_throughput),
        ]
        if m.request_goodput is not None:
            lines.append(float_line("Request goodput (req/s):", m.request_goodput))
        if m.pooling:  # embeddings, rerank: no output tokens, no first token; E2EL whatever the run selected
            lines.append(float_line("Input throughput (inputs/s):", m.input_sequences / m.duration))
        else:
            lines.append(float_line("Output token throughput (tok/s):", m.output_throughput))
        lines.append(float_line("Total token throughput (tok/s):", m.total_token_throughput))
        for key in ("e2el",) if m.pooling else METRIC_NAMES:
            if m.pooling or key in m.selected_metrics:
                lines += _distribution_lines(getattr(m, key), _SECTIONS[key][0])
    lines.append("=" * WIDTH)
    return "\n".join(lines)


def format_summary(
    metrics: BenchmarkMetrics,
    *,
    backend_label: str | None = None,
    request_rate: float | None = None,
    burstiness: float | None = None,
    max_concurrency: int | None = None,
    client_health: dict[str, Any] | None = None,
    deployment: Any = None,
    extras: Mapping[str, Any] | None = None,
) -> str:
    """vLLM's block (with ``extras``' sections: :func:`format_vllm_block`), llmload's block, the conversation, prefix-cache and reasoning blocks when the run has that
    data (:mod:`llmload.summary.conversations`), then the per-class block when there is one (no trailing
    newline)."""

    blocks = [
        format_vllm_block(metrics, max_concurrency=max_concurrency, request_rate=request_rate, extras=extras),
        format_llmload_block(
            metrics,
            backend_label=backend_label,
            request_rate=request_rate,
            burstiness=burstiness,
            client_health=client_health,
            deployment=deployment,
        ),
    ]
    blocks += [block for block in (format_conversation_blocks(metrics), format_class_block(metrics),
                                   format_class_block(metrics, by="model")) if block]
    return "\n".join(blocks)
