"""``compute_metrics`` and vLLM's ``--save-detailed`` lists, over a list of records.

Every request sent is counted once: ``sent = completed + failed + cancelled + cut_off``, and ``failures_by_kind`` (kinds of
:mod:`llmload.client.failures`, cut-off ones as ``cut_off``) adds up to ``failed + cut_off``. Failed and cut-off
requests count 0 output tokens and no input tokens, and are left out of every latency list.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from llmload.metrics.accumulator import MetricsAccumulator
from llmload.metrics.columns import Tally
from llmload.metrics.definitions import (
    LATE_SEND_MS,
    e2el_s,
    input_tokens,
    is_completed,
    itls_s,
    output_tokens,
    queue_time_s,
    ttft_s,
)
from llmload.metrics.result import BenchmarkMetrics
from llmload.metrics.streamed import StreamedList

if TYPE_CHECKING:
    from llmload.metrics.request import MeasuredRequest


def compute_metrics(
    records: Sequence[MeasuredRequest],
    duration_s: float,
    *,
    goodput_slos: Mapping[str, Any] | None = None,
    class_slos: Mapping[str, Mapping[str, float]] | None = None,
    selected_percentiles: Sequence[float] = (99.0,),
    selected_metrics: Sequence[str] = ("ttft", "tpot", "itl"),
    ttft_rule: str = "content",
    schedule_lags_s: Sequence[float] | None = None,
    late_send_threshold_ms: float = LATE_SEND_MS,
    slice_duration_s: float | None = None,
    vllm_compat: str | None = None,
) -> BenchmarkMetrics:
    """Every reported metric from raw records: :meth:`MetricsAccumulator.result` over them (formulas in
    :mod:`llmload.metrics.accumulator` and :mod:`llmload.metrics.definitions`).

    ``goodput_slos``: ``{metric: ms}`` (vLLM's ``--goodput``), or :func:`llmload.metrics.parse_goodput`'s
    structure with per-class and per-model entries; ``class_slos``: ``{user_class: {metric: ms}}``, replacing the run-wide
    SLOs for that class's requests. ``schedule_lags_s``: how late the dispatcher fired each open-loop send;
    defaults to the records' queue times (the same thing when no concurrency limit holds requests back).
    Records naming more than one ``model`` (``--model a,b``, ``--lora-modules``) add ``by_model``: each model's
    metrics over its own requests, over the same duration (as ``by_class`` for user classes).
    ``slice_duration_s`` adds ``slices``: the same numbers per slice of the run (:mod:`llmload.metrics.slices`).
    """
    acc = MetricsAccumulator()
    acc.extend(records)
    metrics = acc.result(duration_s, goodput_slos=goodput_slos, class_slos=class_slos,
                         selected_percentiles=selected_percentiles, selected_metrics=selected_metrics,
                         ttft_rule=ttft_rule, schedule_lags_s=schedule_lags_s,
                         late_send_threshold_ms=late_send_threshold_ms, vllm_compat=vllm_compat)
    if slice_duration_s and records:
        from llmload.metrics.slices import time_slices

        end = min(r.start for r in records) + duration_s
        metrics.slice_duration = slice_duration_s
        metrics.slices = time_slices(records, slice_duration_s, end=end, goodput_slos=goodput_slos)
    return metrics


def failure_counts(records: Sequence[MeasuredRequest]) -> tuple[dict[str, int], dict[str, str]]:
    """``(count per kind, first message per kind)`` over the records that did not complete, most frequent first
    (ties by name)."""
    tally = Tally()
    for r in records:
        tally.add(r, is_completed(r))
    return tally.failure_counts()


def request_lists(records: Sequence[MeasuredRequest], metrics: BenchmarkMetrics | None = None, *,
                  detailed: bool = False, streamed: bool = False) -> dict[str, list]:
    """The per-request lists of today's ``vllm bench serve`` result JSON, one entry per request in input order:
    ``latencies`` (E2E seconds, 0.0 where none) and ``queue_times`` (seconds a request waited past its
    intended send: for a ``--max-concurrency`` slot, or behind the dispatcher; 0.0 in closed loop) always;
    with ``detailed`` also ``start_times`` (the records' clock) and :func:`detailed_lists`. ``streamed``: each list
    a :class:`~llmload.metrics.streamed.StreamedList`, made from the records as the result JSON is written."""
    out: dict[str, list] = {
        "latencies": _per_request(records, lambda r: e if is_completed(r) and (e := e2el_s(r)) is not None else 0.0,
                                  streamed),
        "queue_times": _per_request(records, lambda r: q if (q := queue_time_s(r)) is not None else 0.0, streamed),
    }
    if detailed and metrics is not None and metrics.pooling:
        # vLLM's pooling run: the input lengths the server reported (vLLM overwrites the dataset's) and the errors
        out["input_lens"] = _per_request(records, lambda r: r.server_prompt_tokens or 0, streamed)
        out["errors"] = _per_request(records, lambda r: r.error, streamed)
    elif detailed:
        out["start_times"] = _per_request(records, lambda r: r.start, streamed)
        out.update(detailed_lists(records, metrics, streamed=streamed))
    return out


def _per_request(records: Sequence[MeasuredRequest], value: Callable[[Any], Any], streamed: bool) -> list:
    """``[value(r) for r in records]``, or the :class:`StreamedList` that makes it when written."""
    if streamed:
        return StreamedList(len(records), lambda: (value(r) for r in records))
    return [value(r) for r in records]


def detailed_lists(records: Sequence[MeasuredRequest], metrics: BenchmarkMetrics | None = None, *,
                   streamed: bool = False) -> dict[str, list]:
    """vLLM's ``--save-detailed`` lists, one entry per request in input order (times in seconds; ``input_lens``
    the dataset's prompt lengths, as vLLM; ``ttfts`` is 0.0 where no first token arrived, as vLLM's default)."""
    output_lens = metrics.output_lens if metrics is not None else None
    if output_lens is None or len(output_lens) != len(records):
        output_lens = [output_tokens(r) for r in records]
    return {
        "input_lens": _per_request(records, input_tokens, streamed),
        "output_lens": StreamedList(len(output_lens), lambda: iter(output_lens)) if streamed else list(output_lens),
        "ttfts": _per_request(records, lambda r: t if (t := ttft_s(r)) is not None else 0.0, streamed),
        "itls": _per_request(records, itls_s, streamed),
        "generated_texts": _per_request(records, lambda r: r.text(), streamed),
        "errors": _per_request(records, lambda r: r.error, streamed),
    }
