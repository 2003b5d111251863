"""The summary's blocks for multi-turn, reasoning and prefix-cache runs (``BenchmarkMetrics.conversations``),
printed after llmload's own block; a run without that data gets none of them, so its summary is unchanged.

    ================= Conversations ==================   conversations, how far they got, how they ended,
    ...                                                   duration of the completed ones
    ---------------------By turn----------------------   one row per turn index (16+ pooled): requests,
    turn       n  TTFT p50  TPOT p50    prompt  cached    TTFT and TPOT medians (ms), mean prompt tokens,
    ...                                                   cached fraction of the prompt (%, "-": not reported)
    ================== Prefix cache ==================   cached tokens / server prompt tokens
    =================== Reasoning ====================   reasoning tokens, TTFAT, TTFAT - TTFT
    ==================== Sessions ====================   sessions (conversations, agentic sessions): calls,
    ...                                                   duration, server and idle time, cache hit rate
    -------------------By chain type------------------   agentic sessions: a row per chain type (main, each
    chain        calls  TTFT p50  TTFT p99  cached        sub-agent type): TTFT median and p99 (ms), cached %
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
from llmload.metrics.sessions import SessionStats
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


def _table_line(cells: tuple[str, ...], columns: tuple[tuple[str, int], ...]) -> str:
    """One line of a compact table: each cell right-aligned in its column's width."""
    return "".join(f"{c:>{w}}" for c, (_, w) in zip(cells, columns, strict=True))


def turn_table(turns: tuple[TurnStats, ...]) -> list[str]:
    """The compact per-turn table: a header line, then one right-aligned row per turn row (ms, tokens, %)."""
    lines = [_table_line(tuple(h for h, _ in _TURN_COLUMNS), _TURN_COLUMNS)]
    for t in turns:
        cached = None if t.cached_fraction is None else t.cached_fraction * 100.0
        cells = (t.label, str(t.requests), _cell(t.ttft.median_ms if t.completed else None, ".2f"),
                 _cell(t.tpot.median_ms if t.tpot.count else None, ".2f"), _cell(t.mean_prompt_tokens, ".1f"),
                 _cell(cached, ".1f"))
        lines.append(_table_line(cells, _TURN_COLUMNS))
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


#: the per-chain table's columns: (header, width); 50 characters
_CHAIN_COLUMNS = (("chain", 13), ("calls", 7), ("TTFT p50", 10), ("TTFT p99", 10), ("cached", 10))


def _session_lines(s: SessionStats) -> list[str]:
    lines = [
        heading(" Sessions "),
        int_line("Sessions:", s.sessions),
        int_line("Completed sessions:", s.completed),
        int_line("Calls:", s.calls),
        int_line("Calls completed:", s.calls_completed),
        float_line("Mean calls per session:", s.calls_per_session.mean),
        float_line("Mean session duration (s):", s.duration_s.mean),
        float_line("P99 session duration (s):", s.duration_s.p99),
        float_line("Mean time waiting for the server (s):", s.server_time_s.mean),
        float_line("Mean tool/think time (s):", s.idle_time_s.mean),
    ]
    if s.cached_fraction is not None and s.hit_rate is not None:
        lines += [float_line("Cached share of prompt tokens (%):", s.cached_fraction * 100.0),
                  float_line("Median session hit rate (%):", s.hit_rate.median * 100.0)]
    if s.trace_reuse_fraction is not None:
        lines.append(float_line("Traces' own reuse (hash ids) (%):", s.trace_reuse_fraction * 100.0))
    if s.chains:
        lines += [heading("By chain type", "-"), _table_line(tuple(h for h, _ in _CHAIN_COLUMNS), _CHAIN_COLUMNS)]
        for c in s.chains:
            cached = None if c.cached_fraction is None else c.cached_fraction * 100.0
            cells = (c.agent_type[:12], str(c.calls), _cell(c.ttft.median_ms if c.ttft.count else None, ".2f"),
                     _cell(dict(c.ttft.percentiles_ms).get(99.0) if c.ttft.count else None, ".2f"),
                     _cell(cached, ".1f"))
            lines.append(_table_line(cells, _CHAIN_COLUMNS))
    return [*lines, "=" * WIDTH]


def format_conversation_blocks(metrics: BenchmarkMetrics) -> str:
    """The Conversations (with the per-turn table), Prefix cache, Reasoning and Sessions blocks, each only when
    the run has its data; empty for a run with none."""
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
    if extra.sessions is not None:
        lines += _session_lines(extra.sessions)
    return "\n".join(lines)
