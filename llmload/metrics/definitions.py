"""Every per-request metric, defined once: its name, unit, which requests it applies to, and its formula.

The final summary and result JSON (:mod:`llmload.metrics.compute`), the web UI's live tab
(:mod:`llmload.webui.live`), the HTML reports (:mod:`llmload.report.stats`) and :class:`~llmload.client.records.RequestRecord`'s own
properties all take their per-request values from the functions here, so changing a rule (say, the TPOT one)
is one edit. Times are ``perf_counter()`` seconds as the record holds them; reports show milliseconds.

    metric        unit  applies to                     formula
    TTFT          s     completed requests             first_token - start
    TTFAT         s     completed, with answer text    first_answer_token - start   (reasoning excluded)
    answer delay  s     completed, with both           first_answer_token - first_token
    ITL           s     completed, pooled              chunk_times[k] - chunk_times[k-1]   (every k >= 1)
    TPOT          s     completed, out > 1             (E2EL - TTFT) / (out - 1)
    TPOT steady   s     completed, out > 2, has ITL_1  (E2EL - TTFT - ITL_1) / (out - 2)
    E2EL          s     completed requests             chunk_times[-1] - start
    queue time    s     every open-loop request sent   start - intended_send
    schedule lag  s     every open-loop request sent   max(0, dispatched_at - intended_send)
    input tokens  tok   completed requests             prompt_len (the dataset's, as vLLM)
    output tokens tok   completed requests             output_tokens (0 for the others, as vLLM)

A request is *completed* when it succeeded and was not cut off by the end of the run. Goodput's per-request
rule (vLLM's ``--goodput``): a completed request is good when every given SLO holds, ``value_s <= slo_ms /
1000``, with TPOT counted as 0 for a one-token output.

This module must not import :mod:`llmload.client.records`: ``RequestRecord``'s properties come from here, so the
functions take any :class:`~llmload.metrics.request.MeasuredRequest` (a ``RequestRecord`` is one).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from llmload.metrics.request import MeasuredRequest

if TYPE_CHECKING:
    from llmload.metrics.spill import Chunked

#: ``Metric.applies_to``: successful and not cut off
COMPLETED = "completed"
#: ``Metric.applies_to``: every request sent (the function gives None where the metric does not exist)
SENT = "sent"


def is_completed(record: MeasuredRequest) -> bool:
    """Counted as a completed request: successful and not cut off by the end of the run."""
    return record.success and not record.cut_off


def ttft_s(record: MeasuredRequest) -> float | None:
    """TTFT = first_token - start (seconds); None when no first token arrived."""
    return None if record.first_token is None else record.first_token - record.start


def ttfat_s(record: MeasuredRequest) -> float | None:
    """TTFAT = first_answer_token - start (seconds); None when no answer text arrived. Under the default TTFT
    rule a reasoning delta is a first token, so TTFT alone hides how long a reasoning model thinks."""
    return None if record.first_answer_token is None else record.first_answer_token - record.start


def answer_delay_s(record: MeasuredRequest) -> float | None:
    """Answer delay = first_answer_token - first_token (seconds): TTFAT - TTFT, the time spent reasoning (or in
    tool calls) before the answer; None unless both exist."""
    if record.first_answer_token is None or record.first_token is None:
        return None
    return record.first_answer_token - record.first_token


def e2el_s(record: MeasuredRequest) -> float | None:
    """E2EL = chunk_times[-1] - start (seconds); None when no counted event arrived."""
    times = record.chunk_times
    return times[-1] - record.start if len(times) else None


def itl_array(record: MeasuredRequest) -> np.ndarray:
    """ITL_k = chunk_times[k] - chunk_times[k-1] for k >= 1 (seconds); pooled over requests, never averaged."""
    times = np.asarray(record.chunk_times, dtype=float)
    return times[1:] - times[:-1]  # np.diff's arithmetic, without its overhead


def itls_s(record: MeasuredRequest) -> list[float]:
    """The ITLs of :func:`itl_array` as a list (vLLM's ``--save-detailed`` ``itls`` entry)."""
    return itl_array(record).tolist()


def tpot_s(record: MeasuredRequest) -> float | None:
    """TPOT = (E2EL - TTFT) / (out - 1) (seconds); None unless out > 1 and both latencies exist."""
    ttft, e2el, out = ttft_s(record), e2el_s(record), record.output_tokens
    if out <= 1 or ttft is None or e2el is None:
        return None
    return (e2el - ttft) / (out - 1)


def tpot_steady_s(record: MeasuredRequest) -> float | None:
    """TPOT excl. 1st ITL = (E2EL - TTFT - ITL_1) / (out - 2) (seconds); None unless out > 2 and an ITL_1
    exists. Leaves out the gap many engines stall in while the batch refills."""
    ttft, e2el, out = ttft_s(record), e2el_s(record), record.output_tokens
    times = record.chunk_times
    if out <= 2 or ttft is None or e2el is None or len(times) < 2:
        return None
    return (e2el - ttft - (times[1] - times[0])) / (out - 2)


def queue_time_s(record: MeasuredRequest) -> float | None:
    """Queue time = start - intended_send (seconds): how long an open-loop request waited to be sent (for a
    concurrency slot, or behind a late dispatcher); None in closed loop."""
    return None if record.intended_send is None else record.start - record.intended_send


def schedule_lag_s(record: MeasuredRequest) -> float | None:
    """Schedule lag = max(0, dispatched_at - intended_send) (seconds): how late the client released an
    open-loop request; None in closed loop."""
    if record.intended_send is None or record.dispatched_at is None:
        return None
    return max(0.0, record.dispatched_at - record.intended_send)


#: a send released later than this after its intended time is a late send (the summary's count, client health)
LATE_SEND_MS = 10.0


def late_sends(schedule_lags_s: Iterable[float] | Chunked, threshold_ms: float = LATE_SEND_MS) -> int:
    """How many schedule lags (seconds) are over ``threshold_ms``: the one count of late sends (``schedule_lags_s``
    may be a :class:`~llmload.metrics.spill.Chunked` source, read a chunk at a time)."""
    chunks = getattr(schedule_lags_s, "chunks", None)
    if chunks is not None:
        return sum(int(np.count_nonzero(chunk * 1000.0 > threshold_ms)) for chunk in chunks())
    if isinstance(schedule_lags_s, np.ndarray):
        return int(np.count_nonzero(schedule_lags_s * 1000.0 > threshold_ms))
    return sum(1 for lag in schedule_lags_s if lag * 1000.0 > threshold_ms)


def input_tokens(record: MeasuredRequest) -> int:
    """Prompt tokens as vLLM counts them: the dataset's ``prompt_len`` (tokenized client-side before the run)."""
    return record.prompt_len


def server_input_tokens(record: MeasuredRequest) -> int:
    """Prompt tokens as the server counted them: ``usage.prompt_tokens`` when given, else the dataset's."""
    return record.prompt_len if record.server_prompt_tokens is None else record.server_prompt_tokens


def output_tokens(record: MeasuredRequest) -> int:
    """Counted output tokens: ``output_tokens`` for a completed request, 0 otherwise (vLLM's
    ``actual_output_lens``)."""
    return record.output_tokens if is_completed(record) else 0


def goodput_value_s(record: MeasuredRequest, name: str) -> float | None:
    """The value a goodput SLO on ``name`` (ttft, tpot, e2el) is checked against: the metric, or
    :data:`GOODPUT_MISSING`'s stand-in where it does not exist (TPOT 0 for out <= 1, as vLLM)."""
    value = GOODPUT_VALUES[name](record)
    return GOODPUT_MISSING.get(name) if value is None else value


def meets_slo(value_s: Any, slo_ms: float) -> Any:
    """One SLO holds: ``value_s <= slo_ms / 1000`` (inclusive). Also elementwise on a numpy array, where NaN
    (a missing value) fails."""
    return value_s <= slo_ms / 1000.0


def is_good(record: MeasuredRequest, slos_ms: Mapping[str, float]) -> bool:
    """vLLM's goodput test for one completed request: every given SLO holds (:func:`meets_slo`); a missing
    value without a stand-in fails."""
    for name, slo in slos_ms.items():
        value = goodput_value_s(record, name)
        if value is None or not meets_slo(value, slo):
            return False
    return True


@dataclass(frozen=True, slots=True)
class Metric:
    """One latency metric: ``value(record)`` gives its seconds (a list when ``pooled``), formula in its
    docstring; it is taken only from the requests ``applies_to`` names."""

    key: str
    label: str
    unit: str
    applies_to: str
    value: Callable[[Any], Any]
    pooled: bool = False

    @property
    def formula(self) -> str:
        """The first line of the value function's docstring."""
        return (self.value.__doc__ or "").strip().splitlines()[0]

    def applies(self, record: MeasuredRequest) -> bool:
        return self.applies_to == SENT or is_completed(record)


#: every latency metric, in the order the live tab and reports show them
METRICS: Mapping[str, Metric] = MappingProxyType({m.key: m for m in (
    Metric("ttft", "TTFT", "s", COMPLETED, ttft_s),
    Metric("itl", "ITL", "s", COMPLETED, itl_array, pooled=True),
    Metric("tpot", "TPOT", "s", COMPLETED, tpot_s),
    Metric("tpot_steady", "TPOT excl. 1st ITL", "s", COMPLETED, tpot_steady_s),
    Metric("e2el", "E2E latency", "s", COMPLETED, e2el_s),
    Metric("queue_time", "Queue time", "s", SENT, queue_time_s),
    Metric("schedule_lag", "Schedule lag", "s", SENT, schedule_lag_s),
)})
def e2el_including_client_queue_s(record: MeasuredRequest) -> float | None:
    """E2EL including the client queue = E2EL + queue time (seconds): today's vLLM's latency as the user saw it,
    counted from the request's intended send; None in closed loop."""
    e2el, queue = e2el_s(record), queue_time_s(record)
    return None if e2el is None or queue is None else e2el + queue


#: today's ``vllm bench serve``'s client-side queue metrics, over completed requests (``--percentile-metrics
#: client_queue_time,e2el_including_client_queue``): kept apart from :data:`METRICS`, which the live tab shows
QUEUE_METRICS: Mapping[str, Metric] = MappingProxyType({m.key: m for m in (
    Metric("client_queue_time", "Client queue time", "s", COMPLETED, queue_time_s),
    Metric("e2el_including_client_queue", "E2EL incl. client queue", "s", COMPLETED, e2el_including_client_queue_s),
)})
#: the metrics ``--goodput`` accepts, and the per-request value each SLO is checked against
GOODPUT_VALUES: Mapping[str, Callable[[Any], float | None]] = MappingProxyType(
    {"ttft": ttft_s, "tpot": tpot_s, "e2el": e2el_s})
GOODPUT_METRICS = tuple(GOODPUT_VALUES)
#: what a goodput metric counts as where a request has none: vLLM appends TPOT 0 for a one-token output
GOODPUT_MISSING: Mapping[str, float] = MappingProxyType({"tpot": 0.0})
