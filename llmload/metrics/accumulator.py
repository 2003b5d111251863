"""One accumulator for every number llmload reports: fed records one at a time, it gives the final
:class:`BenchmarkMetrics` (summary block, result JSON) and the live tab's numbers over any set of records.

    acc = MetricsAccumulator()              # itl_exact_limit=N: past N ITLs, a LogHistogram takes over (live)
    for record in records:
        acc.add(record)
    acc.result(duration_s, goodput_slos=..., class_slos=..., selected_percentiles=..., ...)  # BenchmarkMetrics
    acc.live(span_s, slos=...)              # the live tab's {requests, completed, ..., ttft_ms: {...}, ...}
    acc.live(span_s, user_class="Chat")     # the same over one user class

Formulas: per request :mod:`llmload.metrics.definitions`; over requests (``duration`` = the run's, ``span`` =
the live window's):

    request_throughput     = completed / duration
    request_goodput        = good / duration                    good: :func:`~llmload.metrics.definitions.is_good`
    output_throughput      = sum(out) / duration
    total_token_throughput = (sum(in) + sum(out)) / duration     in: the dataset's prompt_len, as vLLM

Records carrying more than one distinct ``user_class`` give ``by_class``: each class's numbers over the same
duration; records naming more than one ``model`` (``--model a,b``, ``--lora-modules``) give ``by_model`` the same
way. A request is judged by the most specific SLOs given (:func:`~llmload.metrics.slos.slos_for`): its model's
(``model=NAME:METRIC:MS``), else its class's, else the run-wide ones. The records are kept in one group per
(class, model) pair, so each value is held once however it is broken down.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from llmload.common.errors import ConfigError
from llmload.metrics.columns import ALIGNED, Tally, Values, joined
from llmload.metrics.conversations import ConversationTally
from llmload.metrics.definitions import (
    LATE_SEND_MS,
    METRICS,
    QUEUE_METRICS,
    is_completed,
    itl_array,
    late_sends,
)
from llmload.metrics.histogram import LogHistogram
from llmload.metrics.peaks import PeakColumns, peaks_of_columns
from llmload.metrics.result import PERCENTILE_METRIC_NAMES, TTFT_RULES, BenchmarkMetrics, Distribution
from llmload.metrics.slos import check_slos, model_key, slos_for, split_slos

if TYPE_CHECKING:
    import numpy as np

    from llmload.metrics.request import MeasuredRequest

#: percentiles the live tab shows
LIVE_PERCENTILES = (50.0, 90.0, 99.0)


@dataclass(slots=True)
class _Group:
    """The requests of one user class that named one model."""

    name: str
    model: str = ""
    tally: Tally = field(default_factory=Tally)
    values: Values = field(default_factory=Values)
    #: what the run's peaks need of its completed requests (not the records: they are not kept)
    peaks: PeakColumns = field(default_factory=PeakColumns)


@dataclass(frozen=True, slots=True)
class _Ask:
    """What :meth:`MetricsAccumulator.result` was asked for."""

    duration: float
    run_slos: dict[str, float] | None
    class_slos: dict[str, dict[str, float]]
    percentiles: tuple[float, ...]
    metrics: tuple[str, ...]
    ttft_rule: str
    late_ms: float

    @property
    def has_slos(self) -> bool:
        return bool(self.run_slos) or bool(self.class_slos)

    def slos_for(self, user_class: str, model: str = "") -> dict[str, float]:
        return slos_for(self.run_slos, self.class_slos, user_class, model)


class MetricsAccumulator:
    """Takes :class:`RequestRecord` values one at a time (:meth:`add`); see the module docstring."""

    def __init__(self, *, itl_exact_limit: int | None = None) -> None:
        #: ITLs kept exactly up to this many (None: all, as final results need); then a histogram for all
        self.itl_exact_limit = itl_exact_limit
        self.itl_exact = True
        self.total = Tally()
        self._groups: dict[tuple[str, str], _Group] = {}
        self._itl_count = 0
        #: turns, conversations, reasoning and cached tokens (``BenchmarkMetrics.conversations``)
        self.conversations = ConversationTally()
        #: per record, in input order: counted output tokens (vLLM's ``actual_output_lens``)
        self.output_lens = array("q")

    def add(self, record: MeasuredRequest) -> None:
        completed = is_completed(record)
        key = (record.user_class, record.model)
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = _Group(*key)
        self.total.add(record, completed)
        group.tally.add(record, completed)
        gaps = itl_array(record) if completed and len(record.chunk_times) > 1 else None
        group.values.add(record, completed, gaps)
        self.output_lens.append(record.output_tokens if completed else 0)
        self.conversations.add(record, completed)
        if not completed:
            return
        group.peaks.add(record, gaps)
        self._itl_count += max(len(record.chunk_times) - 1, 0)
        if self.itl_exact and self.itl_exact_limit is not None and self._itl_count > self.itl_exact_limit:
            self.itl_exact = False
            for g in self._groups.values():
                g.values.itl.to_histogram()

    def extend(self, records: Iterable[MeasuredRequest]) -> None:
        for record in records:
            self.add(record)

    @property
    def classes(self) -> list[str]:
        """The distinct user classes seen, sorted (``""``: records that name none)."""
        return sorted({c for c, _ in self._groups})

    @property
    def models(self) -> list[str]:
        """The distinct models the records named, sorted (``""``: records that name none)."""
        return sorted({m for _, m in self._groups})

    def _select(self, user_class: str | None = None, model: str | None = None) -> tuple[list[_Group], Tally]:
        """The groups of one class or one model (None: every one), and their counters."""
        groups = [self._groups[k] for k in sorted(self._groups)
                  if (user_class is None or k[0] == user_class) and (model is None or k[1] == model)]
        if user_class is None and model is None:
            return groups, self.total
        return groups, groups[0].tally if len(groups) == 1 else Tally.merged(g.tally for g in groups)

    # -- final numbers --------------------------------------------------------------------------------------

    def result(
        self,
        duration_s: float,
        *,
        goodput_slos: Mapping[str, Any] | None = None,
        class_slos: Mapping[str, Mapping[str, float]] | None = None,
        selected_percentiles: Sequence[float] = (99.0,),
        selected_metrics: Sequence[str] = ("ttft", "tpot", "itl"),
        ttft_rule: str = "content",
        schedule_lags_s: Sequence[float] | None = None,
        late_send_threshold_ms: float = LATE_SEND_MS,
        vllm_compat: str | None = None,
    ) -> BenchmarkMetrics:
        """The run's :class:`BenchmarkMetrics`, plus ``by_class`` when more than one class was seen; the vLLM
        keys with the meanings of today's ``vllm bench serve`` (``vllm_compat="0.7"``: 0.7's).

        ``goodput_slos``: ``{metric: ms}`` or :func:`~llmload.metrics.parse_goodput`'s structure with
        per-class entries; ``class_slos`` adds (and overrides) per-class ones. ``schedule_lags_s``: how late
        the dispatcher fired each open-loop send; defaults to the records' queue times.
        """
        run_slos, nested = split_slos(goodput_slos)
        classes = {**nested, **{c: dict(s) for c, s in (class_slos or {}).items()}}
        ask = _Ask(duration_s, run_slos, classes, tuple(float(p) for p in selected_percentiles),
                   tuple(selected_metrics), ttft_rule, late_send_threshold_ms)
        _validate(ask)
        groups, tally = self._select()
        metrics = _metrics(groups, tally, ask, schedule_lags_s)
        metrics.goodput_slos = dict(run_slos) if run_slos else None
        metrics.class_slos = classes
        metrics.output_lens = self.output_lens  # 8 bytes a request, not a list of ints
        metrics.conversations = self.conversations.result()
        if len(self.classes) > 1:
            metrics.by_class = {c: _metrics(*self._select(user_class=c), ask, None) for c in self.classes}
            for c, part in metrics.by_class.items():
                part.goodput_slos = dict(ask.slos_for(c)) or None
        if len(self.models) > 1:
            metrics.by_model = {m: _metrics(*self._select(model=m), ask, None) for m in self.models}
            for m, part in metrics.by_model.items():
                part.goodput_slos = classes.get(model_key(m)) or (dict(run_slos) if run_slos else None)
        metrics.follow_vllm(vllm_compat)
        return metrics

    # -- live numbers ---------------------------------------------------------------------------------------

    def live(self, span_s: float, *, slos: Mapping[str, Any] | None = None, user_class: str | None = None,
             model: str | None = None, percentiles: Sequence[float] = LIVE_PERCENTILES) -> dict[str, Any]:
        """The live tab's numbers over every record added (or one class's, or one model's), rates over
        ``span_s`` seconds: counts, tokens, ``{metric}_ms`` as ``{count, mean, p50, p90, p99}``, goodput (None
        without SLOs), failures by kind."""
        groups, tally = self._select(user_class, model)
        if not groups:
            groups, tally = [_Group(user_class or "", model or "")], Tally()
        run_slos, class_slos = split_slos(slos)

        def rate(n: float) -> float:
            return n / span_s if span_s > 0 else 0.0

        out: dict[str, Any] = {
            "requests": tally.records,
            "completed": tally.completed,
            "failed": tally.failed,
            "cancelled": tally.cancelled,
            "cut_off": tally.cut_off,
            "total_output_tokens": tally.total_output,
            "total_input_tokens": tally.total_input,
            "requests_per_s": rate(tally.completed),
            "output_tokens_per_s": rate(tally.total_output),
            "input_tokens_per_s": rate(tally.total_input),
        }
        for key in METRICS:
            out[f"{key}_ms"] = _live_summary(_values(groups, key), percentiles)
        out["itl_exact"] = self.itl_exact
        good = None
        if run_slos or class_slos:
            good = sum(g.values.good(slos_for(run_slos, class_slos, g.name, g.model)) for g in groups)
        out["good"] = good
        out["goodput_per_s"] = None if good is None else rate(good)
        out["errors"] = dict(tally.failures)
        return out


def _values(groups: Sequence[_Group], key: str) -> np.ndarray | LogHistogram:
    """A metric's values (seconds) over the groups: exact, or the merged ITL histogram past the limit."""
    if key in QUEUE_METRICS or not METRICS[key].pooled:
        columns = [g.values.aligned[key] if key in ALIGNED else g.values.sent[key] for g in groups]
        return joined(columns, finite=key in ALIGNED)
    exact = [p.exact for g in groups if (p := g.values.itl).exact is not None]
    hists = [p.hist for g in groups if (p := g.values.itl).hist is not None]
    if not hists:
        return joined(exact)
    merged = LogHistogram()
    for hist in [*hists, *(LogHistogram.of(c.array()) for c in exact)]:
        merged.merge(hist)
    return merged


def _live_summary(values: np.ndarray | LogHistogram, percentiles: Sequence[float]) -> dict[str, float | None]:
    """``{count, mean, p50, p90, p99}`` in ms: exact (:class:`Distribution`) or from the histogram."""
    if isinstance(values, LogHistogram):
        out: dict[str, float | None] = {"count": values.total, "mean": values.mean * 1000.0}
        out.update({f"p{int(p)}": values.percentile(p) * 1000.0 for p in percentiles})
        return out
    dist = Distribution.of(values, percentiles)
    if not dist.count:  # no value is not 0 ms (a pooling class has no first token): the tab shows "–"
        return {"count": 0, "mean": None, **{f"p{int(p)}": None for p in percentiles}}
    return {"count": dist.count, "mean": dist.mean_ms, **{f"p{int(p)}": v for p, v in dist.percentiles_ms}}


def _metrics(groups: Sequence[_Group], tally: Tally, ask: _Ask, lags_s: Sequence[float] | None
             ) -> BenchmarkMetrics:
    """:class:`BenchmarkMetrics` over ``groups`` (every one, or one class's or model's); the caller sets the SLO
    fields."""
    d = ask.duration
    dist = {key: Distribution.of(_exact(groups, key), ask.percentiles) for key in METRICS if key != "schedule_lag"}
    lags = _exact(groups, "queue_time") if lags_s is None else lags_s
    good = sum(g.values.good(ask.slos_for(g.name, g.model)) for g in groups) if ask.has_slos else None
    peak_tokens, peak_bucket, peak_active = peaks_of_columns([g.peaks for g in groups])
    by_kind, examples = tally.failure_counts()
    return BenchmarkMetrics(
        duration=d, completed=tally.completed, failed=tally.failed, cut_off=tally.cut_off, cancelled=tally.cancelled,
        total_requests=tally.records, total_input=tally.total_input, total_output=tally.total_output,
        request_throughput=tally.completed / d, request_goodput=None if good is None else good / d,
        good_requests=good,
        output_throughput=tally.total_output / d,
        total_token_throughput=(tally.total_input + tally.total_output) / d,
        max_output_tokens_per_s=peak_tokens, max_concurrent_requests=peak_active,
        max_concurrent_requests_per_second=peak_bucket,
        ttft=dist["ttft"], tpot=dist["tpot"], itl=dist["itl"], e2el=dist["e2el"],
        tpot_steady=dist["tpot_steady"], queue_time=dist["queue_time"],
        schedule_lag=Distribution.of(lags, ask.percentiles),
        late_sends=late_sends(lags, ask.late_ms), late_send_threshold_ms=ask.late_ms,
        selected_metrics=ask.metrics, selected_percentiles=ask.percentiles, goodput_slos=None,
        ttft_rule=ask.ttft_rule, output_tokens_source=dict(tally.sources),
        prompt_tokens_mismatch=tally.prompt_mismatch, prompt_tokens_server_minus_dataset=tally.prompt_diff,
        total_input_server=tally.total_input_server if tally.server_reported else None,
        failures_by_kind=by_kind, failure_examples=examples,
        structured_checked=tally.structured_checked or None, structured_valid=tally.structured_valid,
        tool_calls=tally.tool_calls or None, tool_call_answers=tally.tool_call_answers,
        client_queue={k: Distribution.of(_exact(groups, k), ask.percentiles) for k in QUEUE_METRICS
                      if k in ask.metrics},
        pooling=tally.records > 0 and tally.pooling_records == tally.records, input_sequences=tally.input_sequences,
        images=tally.images, image_bytes=tally.image_bytes, sends=tally.sends,
        send_mean_ms=1000.0 * tally.send_total / tally.sends if tally.sends else 0.0,
        send_max_ms=1000.0 * tally.send_max,
    )


def _exact(groups: Sequence[_Group], key: str) -> np.ndarray:
    values = _values(groups, key)
    if isinstance(values, LogHistogram):
        raise ValueError("final results need every ITL: use a MetricsAccumulator without itl_exact_limit")
    return values


def _validate(ask: _Ask) -> None:
    if not ask.duration > 0:
        raise ConfigError(f"benchmark duration must be > 0 s, got {ask.duration}")
    for name in ask.metrics:
        if name not in PERCENTILE_METRIC_NAMES:
            raise ConfigError(f"--percentile-metrics: unknown metric {name!r} (use "
                              f"{', '.join(PERCENTILE_METRIC_NAMES)})")
    for p in ask.percentiles:
        if not 0 <= p <= 100:
            raise ConfigError(f"--metric-percentiles: {p} is outside 0..100")
    check_slos(ask.run_slos)
    for part, slos in ask.class_slos.items():
        check_slos(slos, f"--goodput {part}")
    if ask.ttft_rule not in TTFT_RULES:
        raise ConfigError(f"--ttft-rule must be one of {', '.join(TTFT_RULES)}, got {ask.ttft_rule!r}")
