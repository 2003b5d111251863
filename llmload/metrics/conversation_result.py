"""The computed multi-turn, reasoning and prefix-cache numbers of one run, and their result JSON keys.

:class:`ConversationMetrics` is what :class:`llmload.metrics.conversations.ConversationTally` gives; a run
without turns, reasoning or cached-token reports has none, so its summary and result JSON stay as before.
Formulas: :mod:`llmload.metrics.conversations`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llmload.metrics.distribution import Distribution

#: the one percentile the per-turn, conversation and reasoning numbers report (beside mean and median)
TAIL = 99.0
#: ``conversation_end`` values, in the order the summary lists them
END_REASONS = ("completed", "failed", "context_cap", "cut_off", "stopped")


def _tail(dist: Distribution) -> float:
    return dict(dist.percentiles_ms).get(TAIL, 0.0)


def distribution_keys(dist: Distribution, name: str) -> dict[str, float]:
    """``mean_``, ``median_`` and ``p99_{name}_ms``: the short form these blocks use (no std, no max)."""
    return {f"mean_{name}_ms": dist.mean_ms, f"median_{name}_ms": dist.median_ms, f"p99_{name}_ms": _tail(dist)}


@dataclass(frozen=True, slots=True)
class TurnStats:
    """The requests of one turn index (or of every index from ``turn`` on, pooled: ``last_turn > turn``)."""

    turn: int
    #: the highest turn index counted in this row (== ``turn`` unless the row pools the long tail)
    last_turn: int
    pooled: bool
    requests: int
    completed: int
    ttft: Distribution
    tpot: Distribution
    itl: Distribution
    #: over completed requests: the dataset's prompt length, the server's ``usage.prompt_tokens`` (None when
    #: no request of the row carried it)
    mean_prompt_tokens: float | None
    mean_prompt_tokens_server: float | None
    #: over completed requests that reported ``cached_tokens``; None when none did
    mean_cached_tokens: float | None
    cached_fraction: float | None

    @property
    def label(self) -> str:
        """``"3"``, or ``"16+"`` for the row that pools every turn from 16 on."""
        return f"{self.turn}+" if self.pooled else str(self.turn)

    def result_dict(self) -> dict[str, Any]:
        return {
            "turn": self.turn,
            "last_turn": self.last_turn,
            "label": self.label,
            "requests": self.requests,
            "completed": self.completed,
            **distribution_keys(self.ttft, "ttft"),
            **distribution_keys(self.tpot, "tpot"),
            **distribution_keys(self.itl, "itl"),
            "mean_prompt_tokens": self.mean_prompt_tokens,
            "mean_prompt_tokens_server": self.mean_prompt_tokens_server,
            "mean_cached_tokens": self.mean_cached_tokens,
            "cached_fraction": self.cached_fraction,
        }


@dataclass(frozen=True, slots=True)
class ConversationStats:
    """Whole conversations: how many, how far they got, how they ended, how long the completed ones took."""

    conversations: int
    #: every turn the workload gives the conversation completed
    completed: int
    #: completed requests over every conversation
    turns_completed: int
    #: ``conversation_end`` as the client recorded it: every reason of :data:`END_REASONS` (0 when none), plus
    #: ``"unknown"`` for conversations whose records name no end (only when there are some)
    ended_by: dict[str, int]
    #: completed conversations only: last turn's end - first turn's start, seconds
    mean_duration_s: float
    median_duration_s: float
    p99_duration_s: float

    @property
    def mean_turns_completed(self) -> float:
        return self.turns_completed / self.conversations if self.conversations else 0.0

    def result_dict(self) -> dict[str, Any]:
        return {
            "conversations": self.conversations,
            "completed": self.completed,
            "turns_completed": self.turns_completed,
            "mean_turns_completed": self.mean_turns_completed,
            "ended_by": dict(self.ended_by),
            "mean_duration_s": self.mean_duration_s,
            "median_duration_s": self.median_duration_s,
            "p99_duration_s": self.p99_duration_s,
        }


@dataclass(frozen=True, slots=True)
class ReasoningStats:
    """Completed requests that streamed reasoning, and when the answer text began (TTFAT)."""

    requests: int
    total_tokens: int
    #: TTFAT over completed requests with answer text; answer delay = TTFAT - TTFT over the same requests
    ttfat: Distribution
    answer_delay: Distribution

    @property
    def mean_tokens(self) -> float:
        return self.total_tokens / self.requests if self.requests else 0.0

    def result_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "total_reasoning_tokens": self.total_tokens,
            "mean_reasoning_tokens": self.mean_tokens,
            **distribution_keys(self.ttfat, "ttfat"),
            **distribution_keys(self.answer_delay, "answer_delay"),
        }


@dataclass(frozen=True, slots=True)
class PrefixCacheStats:
    """Completed requests whose server reported ``usage.prompt_tokens_details.cached_tokens``."""

    requests: int
    cached_tokens: int
    #: the same requests' prompt tokens as the server counted them (the dataset's where usage gave none)
    prompt_tokens: int

    @property
    def fraction(self) -> float | None:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else None

    def result_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "cached_tokens": self.cached_tokens,
                "prompt_tokens": self.prompt_tokens, "cached_fraction": self.fraction}


@dataclass(frozen=True, slots=True)
class ConversationMetrics:
    """Each part is present only when the run has its data: turns (``turn > 0``), reasoning, cached tokens."""

    conversations: ConversationStats | None = None
    turns: tuple[TurnStats, ...] = field(default_factory=tuple)
    reasoning: ReasoningStats | None = None
    prefix_cache: PrefixCacheStats | None = None
    #: per-session numbers (:class:`llmload.metrics.sessions.SessionStats`), for conversations and agentic
    #: sessions alike
    sessions: Any = None

    def result_keys(self) -> dict[str, Any]:
        """llmload's keys for the result JSON: ``conversations`` and ``turns`` (multi-turn runs),
        ``reasoning``, ``prefix_cache``, ``sessions``; a part without data is left out."""
        out: dict[str, Any] = {}
        if self.conversations is not None:
            out["conversations"] = self.conversations.result_dict()
            out["turns"] = [t.result_dict() for t in self.turns]
        if self.reasoning is not None:
            out["reasoning"] = self.reasoning.result_dict()
        if self.prefix_cache is not None:
            out["prefix_cache"] = self.prefix_cache.result_dict()
        if self.sessions is not None:
            out["sessions"] = self.sessions.result_dict()
        return out
