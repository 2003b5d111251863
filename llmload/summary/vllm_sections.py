"""The sections of today's ``vllm bench serve`` block that only some runs have: client-side queueing and the
queue-inclusive latency (``--percentile-metrics``), probe requests (``--probe-request-rate``), speculative
decoding (the server's ``vllm:spec_decode_*`` counters), and the capped list of failed requests vLLM prints
before the block. Titles and labels as vLLM prints them (docs/vllm-compat.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llmload.metrics import BenchmarkMetrics, Distribution, percentile_label
from llmload.summary.lines import float_line, heading, int_line

#: client-queue metric -> (label in its lines, section title)
QUEUE_SECTIONS = {
    "client_queue_time": ("Client Queue Time", "Client-side Queueing"),
    "e2el_including_client_queue": ("E2EL incl. Client Queue", "Queue-inclusive End-to-end Latency"),
}
#: failed requests vLLM lists before the block
FAILED_LISTED = 10


def _distribution(dist: Distribution, name: str) -> list[str]:
    return [float_line(f"Mean {name} (ms):", dist.mean_ms), float_line(f"Median {name} (ms):", dist.median_ms),
            *(float_line(f"P{percentile_label(p)} {name} (ms):", v) for p, v in dist.percentiles_ms)]


def queue_lines(metrics: BenchmarkMetrics) -> list[str]:
    """The Client-side Queueing and Queue-inclusive End-to-end Latency sections asked for."""
    lines: list[str] = []
    for key, dist in metrics.client_queue.items():
        name, title = QUEUE_SECTIONS[key]
        lines += [heading(title, "-"), *_distribution(dist, name)]
    return lines


def probe_lines(extras: Mapping[str, Any]) -> list[str]:
    """The Probe Requests section (only when a probe completed: its keys exist then)."""
    if "probe_completed" not in extras:
        return []
    return [heading("Probe Requests", "-"),
            int_line("Probe requests completed:", extras["probe_completed"]),
            int_line("Probe requests failed:", extras["probe_failed"]),
            float_line("Median probe E2EL (ms):", extras["probe_median_e2el_ms"]),
            float_line("P99 probe E2EL (ms):", extras["probe_p99_e2el_ms"]),
            float_line("Max probe E2EL (ms):", extras["probe_max_e2el_ms"])]


def spec_decode_lines(extras: Mapping[str, Any]) -> list[str]:
    """The Speculative Decoding section (only when the server's counters showed draft tokens)."""
    if "spec_decode_acceptance_rate" not in extras:
        return []
    lines = [heading("Speculative Decoding", "-"),
             float_line("Acceptance rate (%):", extras["spec_decode_acceptance_rate"]),
             float_line("Acceptance length:", extras["spec_decode_acceptance_length"]),
             int_line("Drafts:", extras["spec_decode_num_drafts"]),
             int_line("Draft tokens:", extras["spec_decode_draft_tokens"]),
             int_line("Accepted tokens:", extras["spec_decode_accepted_tokens"])]
    rates = extras.get("spec_decode_per_position_acceptance_rates") or []
    if rates:
        lines.append("Per-position acceptance (%):")
        lines += [float_line(f"  Position {i}:", rate * 100.0) for i, rate in enumerate(rates)]
    return lines


def format_failed_requests(errors: Sequence[str]) -> str:
    """vLLM's list before the block: the first :data:`FAILED_LISTED` failed requests' errors ('' when none
    failed). llmload's own block counts every failure by kind."""
    if not errors:
        return ""
    lines = [f"Failed requests during benchmark run detected (capping to {FAILED_LISTED}):"]
    lines += [f"Error {i}: {error}" for i, error in enumerate(errors[:FAILED_LISTED])]
    return "\n".join(lines)
