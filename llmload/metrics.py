"""Benchmark metrics from raw :class:`RequestRecord` values, with vLLM's ``benchmark_serving`` semantics.

Per request (seconds; reported in ms):

    TTFT        = first_token - start
    ITL         = chunk_times[k] - chunk_times[k-1]                 pooled over all requests
    E2EL        = chunk_times[-1] - start
    TPOT        = (E2EL - TTFT) / (out - 1)                          only when out > 1
    TPOT steady = (E2EL - TTFT - ITL_1) / (out - 2)                  only when out > 2 and ITL_1 exists
    queue time  = start - intended_send                              open loop only, every request sent

Totals over completed requests (``success`` and not ``cut_off``); failed and cut-off requests count 0
output tokens and are left out of every latency list. Every request sent is counted once:
``sent = completed + failed + cut_off``, and ``failures_by_kind`` (kinds of :mod:`llmload.failures`, cut-off
ones as ``cut_off``) adds up to ``failed + cut_off``.

    request_throughput     = completed / duration
    request_goodput        = good / duration    good: every given SLO holds, metric_ms <= slo_ms
                                                (TPOT counts as 0 when out <= 1, as vLLM)
    output_throughput      = sum(out) / duration
    total_token_throughput = (sum(in) + sum(out)) / duration          in = server prompt_tokens, else dataset

Statistics: numpy mean, median, population std, ``np.percentile`` (linear); an empty list gives 0.
``max_output_tokens_per_s`` / ``max_concurrent_requests``: vLLM's 1-second buckets from the earliest start.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llmload.errors import ConfigError
from llmload.failures import kind_of
from llmload.records import RequestRecord

#: vLLM's ``--percentile-metrics`` names, in the order vLLM reports them
METRIC_NAMES = ("ttft", "tpot", "itl", "e2el")
#: metrics ``--goodput`` accepts
GOODPUT_METRICS = ("ttft", "tpot", "e2el")
TTFT_RULES = ("content", "vllm")
#: the ``--save-detailed`` lists, as vLLM names them
DETAILED_KEYS = ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors")


def percentile_label(p: float) -> str:
    """vLLM's percentile word: 99.0 -> "99", 99.9 -> "99.9"."""
    return str(int(p)) if int(p) == p else str(p)


@dataclass(frozen=True, slots=True)
class Distribution:
    """Summary statistics of one latency list, in milliseconds."""

    count: int
    mean_ms: float
    median_ms: float
    std_ms: float
    max_ms: float
    percentiles_ms: tuple[tuple[float, float], ...]

    @classmethod
    def of(cls, values_s: Sequence[float], percentiles: Sequence[float]) -> Distribution:
        """Statistics of ``values_s`` (seconds); an empty list gives zeros, as vLLM's ``np.mean(x or 0)``."""
        arr = np.asarray(values_s, dtype=float) * 1000.0 if len(values_s) else np.zeros(1)
        return cls(
            count=len(values_s),
            mean_ms=float(np.mean(arr)),
            median_ms=float(np.median(arr)),
            std_ms=float(np.std(arr)),
            max_ms=float(np.max(arr)),
            percentiles_ms=tuple((float(p), float(np.percentile(arr, p))) for p in percentiles),
        )

    def keys(self, name: str, *, with_max: bool = False) -> dict[str, float]:
        """Result keys in vLLM's order: ``mean_``, ``median_``, ``std_``, ``p{p}_{name}_ms`` (+ ``max_``)."""
        out = {
            f"mean_{name}_ms": self.mean_ms,
            f"median_{name}_ms": self.median_ms,
            f"std_{name}_ms": self.std_ms,
        }
        for p, value in self.percentiles_ms:
            out[f"p{percentile_label(p)}_{name}_ms"] = value
        if with_max:
            out[f"max_{name}_ms"] = self.max_ms
        return out


@dataclass(slots=True)
class BenchmarkMetrics:
    """Everything the summary block and the result JSON report."""

    duration: float
    completed: int
    failed: int
    cut_off: int
    total_requests: int
    total_input: int
    total_output: int
    request_throughput: float
    #: None when no ``--goodput`` SLOs were given (vLLM writes null then)
    request_goodput: float | None
    output_throughput: float
    total_token_throughput: float
    max_output_tokens_per_s: float
    max_concurrent_requests: int
    ttft: Distribution
    tpot: Distribution
    itl: Distribution
    e2el: Distribution
    tpot_steady: Distribution
    queue_time: Distribution
    schedule_lag: Distribution
    late_sends: int
    late_send_threshold_ms: float
    selected_metrics: tuple[str, ...]
    selected_percentiles: tuple[float, ...]
    goodput_slos: dict[str, float] | None
    ttft_rule: str
    output_tokens_source: dict[str, int]
    prompt_tokens_mismatch: int
    prompt_tokens_server_minus_dataset: int
    #: per record, in input order: counted output tokens (0 unless completed), as vLLM's ``actual_output_lens``
    output_lens: list[int] = field(default_factory=list)
    #: failed and cut-off requests by kind (:data:`llmload.failures.KINDS`), most frequent first
    failures_by_kind: dict[str, int] = field(default_factory=dict)
    #: one error message per kind in ``failures_by_kind`` (the first one seen)
    failure_examples: dict[str, str] = field(default_factory=dict)

    @property
    def sent(self) -> int:
        """Requests sent (or due and cut off): completed + failed + cut off."""
        return self.completed + self.failed + self.cut_off

    def to_result_dict(self) -> dict[str, Any]:
        """The result JSON: vLLM's keys first (selected metrics only), then llmload's own keys."""
        result: dict[str, Any] = {
            "duration": self.duration,
            "completed": self.completed,
            "total_input_tokens": self.total_input,
            "total_output_tokens": self.total_output,
            "request_throughput": self.request_throughput,
            "request_goodput": self.request_goodput,
            "output_throughput": self.output_throughput,
            "total_token_throughput": self.total_token_throughput,
            "max_output_tokens_per_s": self.max_output_tokens_per_s,
            "max_concurrent_requests": self.max_concurrent_requests,
        }
        for name in METRIC_NAMES:
            if name in self.selected_metrics:
                result.update(getattr(self, name).keys(name))
        result.update(
            {
                "failed": self.failed,
                "cut_off": self.cut_off,
                "total_requests": self.total_requests,
                "sent": self.sent,
                "failures_by_kind": dict(self.failures_by_kind),
                "failure_examples": dict(self.failure_examples),
                "ttft_rule": self.ttft_rule,
                "output_tokens_source": dict(self.output_tokens_source),
                "prompt_tokens_mismatch": self.prompt_tokens_mismatch,
                "prompt_tokens_server_minus_dataset": self.prompt_tokens_server_minus_dataset,
                "goodput_slos_ms": dict(self.goodput_slos) if self.goodput_slos else None,
            }
        )
        result.update(self.tpot_steady.keys("tpot_steady"))
        result.update(self.queue_time.keys("queue_time", with_max=True))
        result.update(self.schedule_lag.keys("schedule_lag", with_max=True))
        result["late_sends"] = self.late_sends
        result["late_send_threshold_ms"] = self.late_send_threshold_ms
        return result


def input_tokens(record: RequestRecord) -> int:
    """Prompt tokens of a request: the server's ``usage.prompt_tokens`` when given, else the dataset's."""
    return record.prompt_len if record.server_prompt_tokens is None else record.server_prompt_tokens


def is_completed(record: RequestRecord) -> bool:
    """Counted as a completed request: successful and not cut off by the end of the run."""
    return record.success and not record.cut_off


def tpot_s(record: RequestRecord) -> float | None:
    """(E2EL - TTFT) / (out - 1) in seconds; None unless out > 1 and both latencies exist."""
    ttft, e2el, out = record.ttft, record.e2el, record.output_tokens
    if out <= 1 or ttft is None or e2el is None:
        return None
    return (e2el - ttft) / (out - 1)


def tpot_steady_s(record: RequestRecord) -> float | None:
    """(E2EL - TTFT - ITL_1) / (out - 2) in seconds; None unless out > 2 and a first ITL exists."""
    ttft, e2el, out = record.ttft, record.e2el, record.output_tokens
    if out <= 2 or ttft is None or e2el is None or len(record.chunk_times) < 2:
        return None
    return (e2el - ttft - record.itls[0]) / (out - 2)


def failure_counts(records: Sequence[RequestRecord]) -> tuple[dict[str, int], dict[str, str]]:
    """``(count per kind, first message per kind)`` over the records that did not complete, most frequent first
    (ties by name)."""
    counts: Counter[str] = Counter()
    examples: dict[str, str] = {}
    for r in records:
        if is_completed(r):
            continue
        kind = kind_of(r)
        counts[kind] += 1
        examples.setdefault(kind, r.error)
    order = sorted(counts, key=lambda k: (-counts[k], k))
    return {k: counts[k] for k in order}, {k: examples[k] for k in order}


def _validate(
    duration_s: float,
    goodput_slos: dict[str, float] | None,
    selected_percentiles: Sequence[float],
    selected_metrics: Sequence[str],
    ttft_rule: str,
) -> None:
    if not duration_s > 0:
        raise ConfigError(f"benchmark duration must be > 0 s, got {duration_s}")
    for name in selected_metrics:
        if name not in METRIC_NAMES:
            raise ConfigError(
                f"--percentile-metrics: unknown metric {name!r} (use {', '.join(METRIC_NAMES)})"
            )
    for p in selected_percentiles:
        if not 0 <= p <= 100:
            raise ConfigError(f"--metric-percentiles: {p} is outside 0..100")
    for name, slo in (goodput_slos or {}).items():
        if name not in GOODPUT_METRICS:
            raise ConfigError(f"--goodput: unknown metric {name!r} (use {', '.join(GOODPUT_METRICS)})")
        if slo < 0:
            raise ConfigError(f"--goodput: the SLO for {name} must be non-negative, got {slo}")
    if ttft_rule not in TTFT_RULES:
        raise ConfigError(f"--ttft-rule must be one of {', '.join(TTFT_RULES)}, got {ttft_rule!r}")


def _is_good(record: RequestRecord, slos_ms: dict[str, float]) -> bool:
    """vLLM's goodput test: every given SLO holds (``metric_s <= slo_ms / 1000``); TPOT is 0 when out <= 1."""
    for name, slo in slos_ms.items():
        if name == "ttft":
            value = record.ttft
        elif name == "e2el":
            value = record.e2el
        else:
            value = tpot_s(record) or 0.0
        if value is None or value > slo / 1000.0:
            return False
    return True


def _token_times(record: RequestRecord) -> list[float]:
    """vLLM's reconstruction: start + TTFT, then + each ITL."""
    if record.first_token is None:
        return []
    times = [record.first_token]
    for gap in record.itls:
        times.append(times[-1] + gap)
    return times


def peak_per_second(records: Sequence[RequestRecord]) -> tuple[float, int]:
    """vLLM's ``max_output_tokens_per_s`` and ``max_concurrent_requests`` (1-second buckets from the
    earliest start; one token per counted event; a request is active from its start to its end bucket)."""
    done = [r for r in records if r.e2el is not None]
    if not done:
        return 0.0, 0
    t0 = min(r.start for r in done)
    t1 = max(r.start + r.e2el for r in done)
    buckets = int(np.ceil(t1 - t0)) + 1
    tokens = np.zeros(buckets)
    active = np.zeros(buckets)
    for r in done:
        for t in _token_times(r):
            k = int(t - t0)
            if 0 <= k < buckets:
                tokens[k] += 1
        for k in range(int(r.start - t0), min(int(r.start + r.e2el - t0) + 1, buckets)):
            active[k] += 1
    return float(np.max(tokens)), int(np.max(active))


def compute_metrics(
    records: list[RequestRecord],
    duration_s: float,
    *,
    goodput_slos: dict[str, float] | None = None,
    selected_percentiles: Sequence[float] = (99.0,),
    selected_metrics: Sequence[str] = ("ttft", "tpot", "itl"),
    ttft_rule: str = "content",
    schedule_lags_s: Sequence[float] | None = None,
    late_send_threshold_ms: float = 10.0,
) -> BenchmarkMetrics:
    """Compute every reported metric from raw records (formulas in the module docstring).

    ``schedule_lags_s``: how late the dispatcher fired each open-loop send; defaults to the records'
    queue times (the same thing when no concurrency limit holds requests back).
    """
    _validate(duration_s, goodput_slos, selected_percentiles, selected_metrics, ttft_rule)
    done = [r for r in records if is_completed(r)]
    output_lens = [r.output_tokens if is_completed(r) else 0 for r in records]

    ttfts = [t for r in done if (t := r.ttft) is not None]
    e2els = [t for r in done if (t := r.e2el) is not None]
    # pooled as one float64 array: the run's biggest list (a Python list of floats is 4x the memory)
    gaps = [np.diff(np.asarray(r.chunk_times, dtype=float)) for r in done if len(r.chunk_times) > 1]
    itls = np.concatenate(gaps) if gaps else np.zeros(0)
    tpots = [t for r in done if (t := tpot_s(r)) is not None]
    steady = [t for r in done if (t := tpot_steady_s(r)) is not None]
    queue = [q for r in records if (q := r.queue_time) is not None]
    lags = list(queue if schedule_lags_s is None else schedule_lags_s)

    total_input = sum(input_tokens(r) for r in done)
    total_output = sum(output_lens)
    prompt_diffs = [input_tokens(r) - r.prompt_len for r in done if input_tokens(r) != r.prompt_len]
    goodput = None
    if goodput_slos:
        goodput = sum(_is_good(r, goodput_slos) for r in done) / duration_s
    peak_tokens, peak_active = peak_per_second(done)
    by_kind, examples = failure_counts(records)
    pcts = tuple(float(p) for p in selected_percentiles)

    return BenchmarkMetrics(
        duration=duration_s,
        completed=len(done),
        failed=sum(1 for r in records if not r.success and not r.cut_off),
        cut_off=sum(1 for r in records if r.cut_off),
        total_requests=len(records),
        total_input=total_input,
        total_output=total_output,
        request_throughput=len(done) / duration_s,
        request_goodput=goodput,
        output_throughput=total_output / duration_s,
        total_token_throughput=(total_input + total_output) / duration_s,
        max_output_tokens_per_s=peak_tokens,
        max_concurrent_requests=peak_active,
        ttft=Distribution.of(ttfts, pcts),
        tpot=Distribution.of(tpots, pcts),
        itl=Distribution.of(itls, pcts),
        e2el=Distribution.of(e2els, pcts),
        tpot_steady=Distribution.of(steady, pcts),
        queue_time=Distribution.of(queue, pcts),
        schedule_lag=Distribution.of(lags, pcts),
        late_sends=sum(1 for lag in lags if lag * 1000.0 > late_send_threshold_ms),
        late_send_threshold_ms=late_send_threshold_ms,
        selected_metrics=tuple(selected_metrics),
        selected_percentiles=pcts,
        goodput_slos=dict(goodput_slos) if goodput_slos else None,
        ttft_rule=ttft_rule,
        output_tokens_source=dict(Counter(r.output_tokens_source for r in done)),
        prompt_tokens_mismatch=len(prompt_diffs),
        prompt_tokens_server_minus_dataset=sum(prompt_diffs),
        output_lens=output_lens,
        failures_by_kind=by_kind,
        failure_examples=examples,
    )


def detailed_lists(records: list[RequestRecord], metrics: BenchmarkMetrics | None = None) -> dict[str, list]:
    """vLLM's ``--save-detailed`` lists, one entry per request in input order (times in seconds;
    ``ttfts`` is 0.0 where no first token arrived, as vLLM's default)."""
    output_lens = metrics.output_lens if metrics is not None else None
    if output_lens is None or len(output_lens) != len(records):
        output_lens = [r.output_tokens if is_completed(r) else 0 for r in records]
    return {
        "input_lens": [input_tokens(r) for r in records],
        "output_lens": list(output_lens),
        "ttfts": [r.ttft if r.ttft is not None else 0.0 for r in records],
        "itls": [r.itls for r in records],
        "generated_texts": [r.generated_text for r in records],
        "errors": [r.error for r in records],
    }


def parse_goodput(items: list[str] | None) -> dict[str, float] | None:
    """``--goodput ttft:500 tpot:50`` -> {"ttft": 500.0, "tpot": 50.0} (milliseconds)."""
    if not items:
        return None
    slos: dict[str, float] = {}
    for item in items:
        name, sep, value = item.partition(":")
        if not sep or name not in ("ttft", "tpot", "e2el"):
            raise ConfigError(f"--goodput: expected METRIC:MS with METRIC one of ttft, tpot, e2el, got {item!r}")
        try:
            slos[name] = float(value)
        except ValueError:
            raise ConfigError(f"--goodput: {item!r}: {value!r} is not a number of milliseconds") from None
        if slos[name] < 0:
            raise ConfigError(f"--goodput: {item!r}: the SLO must be >= 0 ms")
    return slos
