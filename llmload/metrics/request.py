"""What the metrics read of one request: :class:`MeasuredRequest`, the fields of
:class:`~llmload.client.records.RequestRecord` they use. The records' latency properties come from
:mod:`llmload.metrics.definitions`, so the metrics describe a request by this protocol instead of importing the
record (the records sit above the metrics)."""

from __future__ import annotations

from collections.abc import MutableSequence
from typing import Protocol


class MeasuredRequest(Protocol):
    """A request as the metrics see it (a ``RequestRecord`` is one)."""

    request_id: str
    prompt_len: int
    expected_output_len: int
    intended_send: float | None
    dispatched_at: float | None
    start: float
    first_token: float | None
    chunk_times: MutableSequence[float]
    chunk_tokens: MutableSequence[int]
    output_tokens: int
    output_tokens_source: str
    server_prompt_tokens: int | None
    generated_text: str
    success: bool
    error: str
    failure_kind: str
    cut_off: bool
    conversation_id: str
    turn: int
    conversation_turns: int
    conversation_end: str
    cached_tokens: int | None
    first_answer_token: float | None
    reasoning_tokens: int
    reasoning_text: str
    user_class: str
    cancelled: bool
    model: str
    #: agentic sessions: the agent that made the call and its kind ('' outside a session)
    agent: str
    agent_type: str
    #: a KV-cache trace's own reuse for this request (None: not such a trace)
    trace_cached_tokens: int | None

    @property
    def end(self) -> float | None: ...
    #: ``--response-format``: the answer's verdict (None: not checked)
    structured_output_valid: bool | None
