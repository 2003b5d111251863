"""The summary's blocks for multi-turn, reasoning and prefix-cache runs (``BenchmarkMetrics.conversations``),
printed after llmload's own block; a run without that data gets none of them, so its summary is unchanged.

    ================= Conversations ==================   conversations, how far they got, how they ended,
    ...                                                   duration of the completed ones
    ---------------------By turn----------------------   one row per turn index (16+ pooled): requests,
    turn       n  TTFT p50  TPOT p50    prompt  cached    TTFT and TPOT medians (ms), mean prompt tokens,
    ...                                                   cached fraction of the prompt (%, "-": not reported)
    ================== Prefix cache ==================   cached tokens / server prompt tokens
    =================== Reasoning ====================   reasoning tokens, TTFAT, TTFAT - TTFT
"""

from __future__ import annotations

from llmload.metrics import BenchmarkMetrics
from llmload.metrics.conversation_result import (
    ConversationMetrics,
    ConversationStats,
    PrefixCacheStats,
    ReasoningStats,
    TurnStats,
)
from llmload.summary.lines import WIDTH, float_line, heading, int_line

#: the per-turn table's columns: (header, width); the widths add up to the block's 50 characters
_TURN_COLUMNS = (("turn", 5), ("n", 7), ("TTFT p50", 10), ("TPOT p50", 10), ("prompt", 9), ("cached", 9))
#: ``conversation_end`` -> its summary label
_ENDS = (("failed", "Ended by a failed turn:"), ("context_cap", "Ended at the context cap:"),
         ("cut_off", "Cut off in a turn by end of run:"), ("stopped", "Stopped before its last turn:"),
         ("unknown", "End not recorded:"))


def _conversation_lines(c: ConversationStats) -> list[str]:
    lines = [
        int_line("Conversations:", c.conversations),
        int_line("Completed conversations:", c.completed),
        int_line("Turns completed:", c.turns_completed),
        float_line("Mean turns completed per conversation:", c.mean_turns_completed),
    ]
    lines += [int_line(label, c.ended_by.get(key, 0)) for key, label in _ENDS
              if key != "unknown" or c.ended_by.get(key)]
    lines += [
        float_line("Mean conversation duration (s):", c.mean_duration_s),
        float_line("Median conversation duration (s):", c.median_duration_s),
        float_line("P99 conversation duration (s):", c.p99_duration_s),
    ]
    return lines


def _cell(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def turn_table(turns: tuple[TurnStats, ...]) -> list[str]:
    """The compact per-turn table: a header line, then one right-aligned row per turn row (ms, tokens, %)."""
    lines = ["".join(f"{h:>{w}}" for h, w in _TURN_COLUMNS)]
    for t in turns:
        cached = None if t.cached_fraction is None else t.cached_fraction * 100.0
        cells = (t.label, str(t.requests), _cell(t.ttft.median_ms if t.completed else None, ".2f"),
                 _cell(t.tpot.median_ms if t.tpot.count else None, ".2f"), _cell(t.mean_prompt_tokens, ".1f"),
                 _cell(cached, ".1f"))
        lines.append("".join(f"{c:>{w}}" for c, (_, w) in zip(cells, _TURN_COLUMNS, strict=True)))
    return lines


def _cache_lines(p: PrefixCacheStats) -> list[str]:
    lines = [
        heading(" Prefix cache "),
        int_line("Requests reporting cached tokens:", p.requests),
        int_line("Cached prompt tokens:", p.cached_tokens),
        int_line("Prompt tokens (server):", p.prompt_tokens),
    ]
    if p.fraction is not None:
        lines.append(float_line("Cached fraction of prompt tokens (%):", p.fraction * 100.0))
    return [*lines, "=" * WIDTH]


def _reasoning_lines(r: ReasoningStats) -> list[str]:
    return [
        heading(" Reasoning "),
        int_line("Requests with reasoning:", r.requests),
        int_line("Total reasoning tokens:", r.total_tokens),
        float_line("Mean reasoning tokens:", r.mean_tokens),
        float_line("Mean TTFAT (ms):", r.ttfat.mean_ms),
        float_line("Median TTFAT (ms):", r.ttfat.median_ms),
        float_line("P99 TTFAT (ms):", dict(r.ttfat.percentiles_ms).get(99.0, 0.0)),
        float_line("Mean TTFAT - TTFT (ms):", r.answer_delay.mean_ms),
        float_line("Median TTFAT - TTFT (ms):", r.answer_delay.median_ms),
        float_line("P99 TTFAT - TTFT (ms):", dict(r.answer_delay.percentiles_ms).get(99.0, 0.0)),
        "=" * WIDTH,
    ]


def format_conversation_blocks(metrics: BenchmarkMetrics) -> str:
    """The Conversations (with the per-turn table), Prefix cache and Reasoning blocks, each only when the run
    has its data; empty for a run with none."""
    extra: ConversationMetrics | None = metrics.conversations
    if extra is None:
        return ""
    lines: list[str] = []
    if extra.conversations is not None:
        lines += [heading(" Conversations "), *_conversation_lines(extra.conversations)]
        lines += [heading("By turn (ms, prompt tokens, cached %)", "-"), *turn_table(extra.turns), "=" * WIDTH]
    if extra.prefix_cache is not None:
        lines += _cache_lines(extra.prefix_cache)
    if extra.reasoning is not None:
        lines += _reasoning_lines(extra.reasoning)
    return "\n".join(lines)
