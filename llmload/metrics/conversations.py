"""Multi-turn, reasoning and prefix-cache numbers, gathered one record at a time beside the run-wide ones.

A conversation is the records sharing ``conversation_id`` with ``turn`` 1..k (``turn`` 0: a single request,
never counted here). :class:`llmload.metrics.MetricsAccumulator` feeds every record to a
:class:`ConversationTally`; :meth:`ConversationTally.result` gives a
:class:`~llmload.metrics.conversation_result.ConversationMetrics`, or None for a run with no turns, no
reasoning and no cached-token reports (so its summary and result JSON are unchanged).

Per turn index (turns from :data:`TURN_ROWS` on share one row, ``"16+"``: few conversations get that far, and
one row per index would make the tail noise):

    requests, completed        records of that turn, and those completed (success, not cut off)
    TTFT, TPOT, ITL            mean, median, p99 over its completed requests (definitions.py; ITLs pooled)
    mean prompt tokens         over completed: prompt_len; server_prompt_tokens where the server gave it
    mean cached tokens         over completed requests with cached_tokens (None: no server reported it)
    cached fraction            sum(cached_tokens) / sum(server prompt tokens) over those same requests

Per conversation (``conversation_end`` is set by the client on a conversation's last record; a failed turn
ends its conversation there, as "failed"):

    completed                  no failed or cut-off turn, and every turn of the workload completed
                               (conversation_turns; where that is 0, the end says "completed")
    turns completed            completed requests; per conversation: turns completed / conversations
    ended by                   count of each conversation_end ("unknown": records that name no end)
    duration                   completed conversations: max(end) - min(start) of their records

Reasoning (completed requests): requests with reasoning (``reasoning_tokens > 0`` or reasoning text), their
reasoning tokens; TTFAT and answer delay (TTFAT - TTFT) over completed requests with answer text. Prefix cache
(any run): completed requests reporting ``cached_tokens``, the sum of those and of their server prompt tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from llmload.metrics.columns import Column
from llmload.metrics.conversation_result import (
    END_REASONS,
    TAIL,
    ConversationMetrics,
    ConversationStats,
    PrefixCacheStats,
    ReasoningStats,
    TurnStats,
)
from llmload.metrics.definitions import (
    answer_delay_s,
    input_tokens,
    itl_array,
    server_input_tokens,
    tpot_s,
    ttfat_s,
    ttft_s,
)
from llmload.metrics.percentiles import linear_percentiles
from llmload.metrics.result import Distribution
from llmload.metrics.sessions import SessionTally

if TYPE_CHECKING:
    from llmload.metrics.request import MeasuredRequest

#: turns with this index or higher share one row (labelled "16+")
TURN_ROWS = 16


def turn_row(turn: int) -> int:
    """The row a turn index is counted in: itself, or :data:`TURN_ROWS` for every turn from there on."""
    return min(turn, TURN_ROWS)


@dataclass(slots=True)
class PrefixTally:
    """Completed requests reporting ``cached_tokens``: how many, their cached and server prompt tokens."""

    requests: int = 0
    cached: int = 0
    prompt: int = 0

    def add(self, r: MeasuredRequest) -> None:
        if r.cached_tokens is None:
            return
        self.requests += 1
        self.cached += int(r.cached_tokens)
        self.prompt += server_input_tokens(r)

    @property
    def fraction(self) -> float | None:
        return self.cached / self.prompt if self.requests and self.prompt else None


@dataclass(slots=True)
class _Turn:
    """The records of one turn row."""

    last_turn: int = 0
    requests: int = 0
    completed: int = 0
    prompt: int = 0
    server_prompt: int = 0
    server_reported: int = 0
    cache: PrefixTally = field(default_factory=PrefixTally)
    ttft: Column = field(default_factory=Column)
    tpot: Column = field(default_factory=Column)
    #: completed records, for the pooled ITLs at the end (references: the run keeps its records anyway)
    done: list[Any] = field(default_factory=list)


@dataclass(slots=True)
class _Conversation:
    start: float
    end: float
    records: int = 0
    completed: int = 0
    broken: bool = False
    workload_turns: int = 0
    last_turn: int = 0
    how: str = ""

    @property
    def done(self) -> bool:
        if self.broken:
            return False
        return self.completed >= self.workload_turns if self.workload_turns else self.how == "completed"


class ConversationTally:
    """Takes every record of a run (:meth:`add`); see the module docstring for what it counts."""

    def __init__(self) -> None:
        self._turns: dict[int, _Turn] = {}
        self._conversations: dict[str, _Conversation] = {}
        self.cache = PrefixTally()
        self.reasoning_requests = 0
        self.reasoning_tokens = 0
        self._ttfat = Column()
        self._answer_delay = Column()
        #: per-session numbers, conversations and agentic sessions alike (:mod:`llmload.metrics.sessions`)
        self.sessions = SessionTally()

    def add(self, r: MeasuredRequest, completed: bool) -> None:
        if r.conversation_id:
            self.sessions.add(r, completed)
        if r.turn > 0 and not r.agent_type:  # a session's calls are not a conversation's turns
            self._add_turn(r, completed)
        if not completed:
            return
        self.cache.add(r)
        if r.reasoning_tokens > 0 or r.reasoning_text:
            self.reasoning_requests += 1
            self.reasoning_tokens += r.reasoning_tokens
        if (ttfat := ttfat_s(r)) is not None:
            self._ttfat.append(ttfat)
        if (delay := answer_delay_s(r)) is not None:
            self._answer_delay.append(delay)

    def _add_turn(self, r: MeasuredRequest, completed: bool) -> None:
        row = self._turns.get(turn_row(r.turn))
        if row is None:
            row = self._turns[turn_row(r.turn)] = _Turn()
        row.last_turn = max(row.last_turn, r.turn)
        row.requests += 1
        end = r.end if r.end is not None else r.start
        conv = self._conversations.get(r.conversation_id)
        if conv is None:
            conv = self._conversations[r.conversation_id] = _Conversation(r.start, end)
        conv.start, conv.end = min(conv.start, r.start), max(conv.end, end)
        conv.records += 1
        conv.workload_turns = max(conv.workload_turns, r.conversation_turns)
        if r.conversation_end and r.turn >= conv.last_turn:
            conv.how = r.conversation_end
        conv.last_turn = max(conv.last_turn, r.turn)
        if not completed:
            conv.broken = True
            return
        conv.completed += 1
        row.completed += 1
        row.prompt += input_tokens(r)
        if r.server_prompt_tokens is not None:
            row.server_prompt += r.server_prompt_tokens
            row.server_reported += 1
        row.cache.add(r)
        if (ttft := ttft_s(r)) is not None:
            row.ttft.append(ttft)
        if (tpot := tpot_s(r)) is not None:
            row.tpot.append(tpot)
        row.done.append(r)

    @property
    def multi_turn(self) -> bool:
        """Some record was a turn of a conversation."""
        return bool(self._turns)

    @property
    def active(self) -> bool:
        """The run has something this tally reports: turns, reasoning or cached-token reports."""
        return self.multi_turn or bool(self.sessions) or self.reasoning_requests > 0 or self.cache.requests > 0

    # -- final numbers --------------------------------------------------------------------------------------

    def result(self) -> ConversationMetrics | None:
        """The run's :class:`ConversationMetrics`; None when there is nothing to report (:attr:`active`)."""
        if not self.active:
            return None
        reasoning = None
        if self.reasoning_requests:
            reasoning = ReasoningStats(self.reasoning_requests, self.reasoning_tokens,
                                       _dist(self._ttfat.array()), _dist(self._answer_delay.array()))
        cache = None
        if self.cache.requests:
            cache = PrefixCacheStats(self.cache.requests, self.cache.cached, self.cache.prompt)
        return ConversationMetrics(
            conversations=self._conversation_stats() if self.multi_turn else None,
            turns=tuple(self._turn_stats(i, row) for i, row in sorted(self._turns.items())),
            reasoning=reasoning, prefix_cache=cache, sessions=self.sessions.result(),
        )

    def _turn_stats(self, index: int, row: _Turn) -> TurnStats:
        itls = [itl_array(r) for r in row.done]
        n = row.completed
        return TurnStats(
            turn=index, last_turn=row.last_turn, pooled=index == TURN_ROWS, requests=row.requests,
            completed=n, ttft=_dist(row.ttft.array()), tpot=_dist(row.tpot.array()),
            itl=_dist(np.concatenate(itls) if itls else np.zeros(0)),
            mean_prompt_tokens=row.prompt / n if n else None,
            mean_prompt_tokens_server=row.server_prompt / row.server_reported if row.server_reported else None,
            mean_cached_tokens=row.cache.cached / row.cache.requests if row.cache.requests else None,
            cached_fraction=row.cache.fraction,
        )

    def _conversation_stats(self) -> ConversationStats:
        convs = list(self._conversations.values())
        ended = {reason: 0 for reason in END_REASONS}
        for conv in convs:
            how = conv.how or "unknown"
            ended[how] = ended.get(how, 0) + 1
        durations = np.asarray([c.end - c.start for c in convs if c.done], dtype=float)
        mean, median, tail = (
            (float(np.mean(durations)), float(np.median(durations)), linear_percentiles(durations, [TAIL])[0])
            if len(durations) else (0.0, 0.0, 0.0))
        return ConversationStats(
            conversations=len(convs), completed=len(durations),
            turns_completed=sum(c.completed for c in convs), ended_by=ended,
            mean_duration_s=mean, median_duration_s=median, p99_duration_s=tail,
        )

    # -- live numbers ---------------------------------------------------------------------------------------

    def live_rows(self) -> list[dict[str, Any]] | None:
        """The live tab's per-turn rows (``turn``, ``label``, ``requests``, ``completed``, ``ttft_p50_ms``,
        ``tpot_p50_ms``, ``cached_fraction``); None when no record was a turn."""
        if not self.multi_turn:
            return None
        rows = []
        for index, row in sorted(self._turns.items()):
            rows.append({
                "turn": index, "label": f"{index}+" if index == TURN_ROWS else str(index),
                "requests": row.requests, "completed": row.completed,
                "ttft_p50_ms": _p50_ms(row.ttft), "tpot_p50_ms": _p50_ms(row.tpot),
                "cached_fraction": row.cache.fraction,
            })
        return rows


def _dist(values_s: np.ndarray) -> Distribution:
    return Distribution.of(values_s, (TAIL,))


def _p50_ms(column: Column) -> float | None:
    values = column.array()
    return linear_percentiles(values, [50.0])[0] * 1000.0 if values.size else None
