"""Live statistics for the LLM tab, computed from raw :class:`RequestRecord` values (never Locust's rounded stats).

A request belongs to the window when it *ended* (last counted event; failures: their start) within the last
``window_s`` seconds. Rates are completion-based: ``output_tokens_per_s = Σout(window) / window_s``,
``requests_per_s = completed(window) / window_s``; over the whole run they divide by the run's duration, the
time from the first request's start to the last one's end (as the result JSON). Latencies follow
:mod:`llmload.metrics` (linear-interpolation percentiles over raw values, ITLs pooled, failed and cut-off
requests left out, TPOT only for outputs > 1 token, TPOT excl. 1st ITL for outputs > 2):

    TTFT, ITL, TPOT, TPOT excl. 1st ITL, E2E        completed requests
    queue time   = start - intended_send            every open-loop request sent
    schedule lag = dispatched_at - intended_send    every open-loop request dispatched
    goodput      = requests meeting every SLO / duration   (TPOT counts as 0 when out <= 1, as vLLM)

Run-wide ITL percentiles are exact up to :data:`ITL_EXACT_LIMIT` values, then come from a log histogram with
1 % buckets (``itl_exact`` says which).
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from time import perf_counter
from typing import Any

import numpy as np

from llmload.metrics import input_tokens, is_completed, tpot_s, tpot_steady_s
from llmload.records import RequestRecord

#: percentiles shown in the tab
PERCENTILES = (50.0, 90.0, 99.0)
#: latency metrics, in display order: key -> label
LATENCIES = {
    "ttft": "TTFT",
    "itl": "ITL",
    "tpot": "TPOT",
    "tpot_steady": "TPOT excl. 1st ITL",
    "e2el": "E2E latency",
    "queue_time": "Queue time",
    "schedule_lag": "Schedule lag",
}
#: metrics the SLO form accepts (as ``--goodput``)
SLO_METRICS = ("ttft", "tpot", "e2el")
#: run-wide ITLs kept exactly up to this many values (8 bytes each); beyond it a histogram takes over
ITL_EXACT_LIMIT = 2_000_000
#: how long a record stays in the recent buffer (the longest window the tab offers)
RECENT_S = 60.0
#: time-series points kept (one a second: the last hour)
SERIES_POINTS = 3600


def error_kind(record: RequestRecord) -> str:
    """The failure kind to group by, the same as ``llmload bench`` reports (:mod:`llmload.failures`)."""
    from llmload.failures import kind_of

    return kind_of(record) or "unknown"


def summarize(values: Sequence[float] | np.ndarray) -> dict[str, float]:
    """Seconds -> ``{count, mean, p50, p90, p99}`` in ms; zeros for an empty list (as vLLM)."""
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return {"count": 0, "mean": 0.0, **{f"p{int(p)}": 0.0 for p in PERCENTILES}}
    ms = arr * 1000.0
    pct = np.percentile(ms, PERCENTILES)
    return {"count": int(arr.size), "mean": float(ms.mean()), **{f"p{int(p)}": float(v) for p, v in
                                                                  zip(PERCENTILES, pct, strict=True)}}


class LogHistogram:
    """Mergeable histogram with 1 % relative buckets from 1 µs (for run-wide ITLs past the exact limit)."""

    BASE = 1e-6
    GROWTH = math.log(1.01)

    def __init__(self) -> None:
        self.counts = np.zeros(0, dtype=np.int64)
        self.total = 0
        self.sum = 0.0

    def add(self, values: np.ndarray) -> None:
        if values.size == 0:
            return
        idx = np.floor(np.log(np.maximum(values, self.BASE) / self.BASE) / self.GROWTH).astype(np.int64)
        counts = np.bincount(idx)
        if counts.size > self.counts.size:
            counts[: self.counts.size] += self.counts
            self.counts = counts
        else:
            self.counts[: counts.size] += counts
        self.total += int(values.size)
        self.sum += float(values.sum())

    def summarize(self) -> dict[str, float]:
        if self.total == 0:
            return summarize([])
        cum = np.cumsum(self.counts)
        out: dict[str, float] = {"count": self.total, "mean": self.sum / self.total * 1000.0}
        for p in PERCENTILES:
            k = int(np.searchsorted(cum, p / 100.0 * (self.total - 1), side="right"))
            mid = self.BASE * math.exp((k + 0.5) * self.GROWTH)
            out[f"p{int(p)}"] = mid * 1000.0
        return out


class _Column:
    """A float column grown in chunks (append is O(1), reading concatenates once)."""

    def __init__(self) -> None:
        self._parts: list[np.ndarray] = []
        self._pending: list[float] = []
        self.size = 0

    def append(self, value: float) -> None:
        self._pending.append(value)
        self.size += 1

    def extend(self, values: np.ndarray) -> None:
        self._flush()
        self._parts.append(values)
        self.size += int(values.size)

    def _flush(self) -> None:
        if self._pending:
            self._parts.append(np.asarray(self._pending, dtype=float))
            self._pending = []

    def array(self) -> np.ndarray:
        self._flush()
        if len(self._parts) > 1:
            self._parts = [np.concatenate(self._parts)]
        return self._parts[0] if self._parts else np.zeros(0)


class LiveStats:
    """Aggregates the records of one test as they arrive; :meth:`snapshot` gives the tab's numbers.

    ``source`` is the append-only list the plugin fills (``llmload.plugin.records``); only records that
    started at or after :meth:`reset` time are counted, so a new test from the UI starts from zero.
    """

    def __init__(self, source: list[RequestRecord], clock: Callable[[], float] = perf_counter) -> None:
        self.source = source
        self.clock = clock
        self.slos_ms: dict[str, float] = {}
        self.reset()

    def reset(self) -> None:
        self.test_start = self.clock()
        self._seen = len(self.source)
        self.records: list[RequestRecord] = []
        self.recent: deque[tuple[float, RequestRecord]] = deque()
        self.first_start: float | None = None
        self.last_end: float | None = None
        self.completed = 0
        self.failed = 0
        self.cut_off = 0
        self.total_output = 0
        self.total_input = 0
        self.errors: Counter[str] = Counter()
        # per completed request, aligned (NaN where a metric does not apply)
        self.ttft = _Column()
        self.tpot = _Column()
        self.tpot_steady = _Column()
        self.e2el = _Column()
        self.queue_time = _Column()
        self.schedule_lag = _Column()
        self.itl = _Column()
        self.itl_exact = True
        self.itl_hist = LogHistogram()
        self.series: deque[dict[str, Any]] = deque(maxlen=SERIES_POINTS)

    # -- ingest ---------------------------------------------------------------------------------------------

    def ingest(self) -> int:
        """Take the records appended to ``source`` since the last call; returns how many were new."""
        new = self.source[self._seen:]
        self._seen += len(new)
        taken = 0
        for record in new:
            if record.start and record.start < self.test_start - 1.0:
                continue  # a late batch from an earlier test
            self._add(record)
            taken += 1
        self._prune()
        return taken

    def _add(self, r: RequestRecord) -> None:
        self.records.append(r)
        end = r.end if r.end is not None else r.start
        self.first_start = r.start if self.first_start is None else min(self.first_start, r.start)
        if r.end is not None:
            self.last_end = r.end if self.last_end is None else max(self.last_end, r.end)
        self.recent.append((end, r))
        if (q := r.queue_time) is not None:
            self.queue_time.append(q)
        if (lag := r.schedule_lag) is not None:
            self.schedule_lag.append(lag)
        if not is_completed(r):
            if r.cut_off:
                self.cut_off += 1
            else:
                self.failed += 1
            self.errors[error_kind(r)] += 1
            return
        self.completed += 1
        self.total_output += r.output_tokens
        self.total_input += input_tokens(r)
        self.ttft.append(_nan(r.ttft))
        self.tpot.append(_nan(tpot_s(r)))
        self.tpot_steady.append(_nan(tpot_steady_s(r)))
        self.e2el.append(_nan(r.e2el))
        if len(r.chunk_times) > 1:
            gaps = np.diff(np.asarray(r.chunk_times, dtype=float))
            self.itl_hist.add(gaps)
            if self.itl_exact and self.itl.size + gaps.size <= ITL_EXACT_LIMIT:
                self.itl.extend(gaps)
            elif self.itl_exact:
                self.itl_exact = False  # past the limit: the histogram alone; free the exact values
                self.itl = _Column()

    def _prune(self) -> None:
        horizon = self.clock() - RECENT_S
        while self.recent and self.recent[0][0] < horizon:
            self.recent.popleft()

    # -- numbers --------------------------------------------------------------------------------------------

    def window(self, window_s: float, *, settle_s: float = 0.0, slos_ms: dict[str, float] | None = None
               ) -> dict[str, Any]:
        """Numbers over requests that ended in ``[now - settle - window, now - settle]``; ``settle_s`` leaves
        time for records still on their way from workers."""
        end = self.clock() - settle_s
        begin = end - window_s
        # a run younger than the window: rates over the time it has run
        span = window_s if self.first_start is None else max(1e-9, min(window_s, end - self.first_start))
        chosen = [r for t, r in self.recent if begin <= t <= end]
        return _numbers(chosen, span, slos_ms if slos_ms is not None else self.slos_ms) | {
            "window_s": window_s, "span_s": span}

    def run(self, *, slos_ms: dict[str, float] | None = None) -> dict[str, Any]:
        """Numbers over every request of the test so far (exact, from the stored columns)."""
        slos = slos_ms if slos_ms is not None else self.slos_ms
        duration = self.duration()
        ttft, tpot, e2el = self.ttft.array(), self.tpot.array(), self.e2el.array()
        itl_exact = self.itl_exact
        out: dict[str, Any] = {
            "duration_s": duration,
            "requests": len(self.records),
            "completed": self.completed,
            "failed": self.failed,
            "cut_off": self.cut_off,
            "total_output_tokens": self.total_output,
            "total_input_tokens": self.total_input,
            "requests_per_s": self.completed / duration if duration else 0.0,
            "output_tokens_per_s": self.total_output / duration if duration else 0.0,
            "ttft_ms": summarize(_finite(ttft)),
            "itl_ms": summarize(self.itl.array()) if itl_exact else self.itl_hist.summarize(),
            "itl_exact": itl_exact,
            "tpot_ms": summarize(_finite(tpot)),
            "tpot_steady_ms": summarize(_finite(self.tpot_steady.array())),
            "e2el_ms": summarize(_finite(e2el)),
            "queue_time_ms": summarize(self.queue_time.array()),
            "schedule_lag_ms": summarize(self.schedule_lag.array()),
        }
        good = _good_mask(ttft, tpot, e2el, slos)
        out["good"] = None if good is None else int(good.sum())
        out["goodput_per_s"] = None if good is None else (int(good.sum()) / duration if duration else 0.0)
        return out

    def duration(self) -> float:
        if self.first_start is None or self.last_end is None:
            return 0.0
        return max(self.last_end - self.first_start, 1e-9)

    def sample(self, extra: dict[str, Any], window_s: float = 5.0, settle_s: float = 0.0) -> dict[str, Any]:
        """Append one time-series point (trailing ``window_s``) and return it."""
        w = self.window(window_s, settle_s=settle_s)
        point = {
            "t": round(self.clock() - self.test_start, 3),
            "output_tokens_per_s": w["output_tokens_per_s"],
            "requests_per_s": w["requests_per_s"],
            "ttft_p50": w["ttft_ms"]["p50"], "ttft_p99": w["ttft_ms"]["p99"],
            "tpot_p50": w["tpot_ms"]["p50"], "tpot_p99": w["tpot_ms"]["p99"],
            **extra,
        }
        self.series.append(point)
        return point


def _nan(value: float | None) -> float:
    return math.nan if value is None else float(value)


def _finite(arr: np.ndarray) -> np.ndarray:
    return arr[~np.isnan(arr)]


def _good_mask(ttft: np.ndarray, tpot: np.ndarray, e2el: np.ndarray, slos_ms: dict[str, float]
               ) -> np.ndarray | None:
    if not slos_ms:
        return None
    good = np.ones(ttft.shape, dtype=bool)
    for name, values in (("ttft", ttft), ("tpot", np.nan_to_num(tpot, nan=0.0)), ("e2el", e2el)):
        if name in slos_ms:
            with np.errstate(invalid="ignore"):
                good &= values <= slos_ms[name] / 1000.0
    return good


def _numbers(records: Iterable[RequestRecord], span_s: float, slos_ms: dict[str, float]) -> dict[str, Any]:
    """Every tab number over a small set of records (the window), computed directly."""
    done: list[RequestRecord] = []
    failed = cut = 0
    queue: list[float] = []
    lags: list[float] = []
    errors: Counter[str] = Counter()
    for r in records:
        if (q := r.queue_time) is not None:
            queue.append(q)
        if (lag := r.schedule_lag) is not None:
            lags.append(lag)
        if is_completed(r):
            done.append(r)
        else:
            errors[error_kind(r)] += 1
            if r.cut_off:
                cut += 1
            else:
                failed += 1
    ttft = np.array([_nan(r.ttft) for r in done], dtype=float)
    tpot = np.array([_nan(tpot_s(r)) for r in done], dtype=float)
    e2el = np.array([_nan(r.e2el) for r in done], dtype=float)
    steady = [t for r in done if (t := tpot_steady_s(r)) is not None]
    itls = [g for r in done for g in r.itls]
    out_tokens = sum(r.output_tokens for r in done)
    good = _good_mask(ttft, tpot, e2el, slos_ms)
    return {
        "requests": len(done) + failed + cut,
        "completed": len(done),
        "failed": failed,
        "cut_off": cut,
        "total_output_tokens": out_tokens,
        "requests_per_s": len(done) / span_s,
        "output_tokens_per_s": out_tokens / span_s,
        "ttft_ms": summarize(_finite(ttft)),
        "itl_ms": summarize(itls),
        "tpot_ms": summarize(_finite(tpot)),
        "tpot_steady_ms": summarize(steady),
        "e2el_ms": summarize(_finite(e2el)),
        "queue_time_ms": summarize(queue),
        "schedule_lag_ms": summarize(lags),
        "good": None if good is None else int(good.sum()),
        "goodput_per_s": None if good is None else int(good.sum()) / span_s,
        "errors": dict(errors),
    }


def parse_slos(items: dict[str, Any]) -> dict[str, float]:
    """``{"ttft": "500", "tpot": "", ...}`` -> ``{"ttft": 500.0}``; raises ValueError naming a bad entry."""
    slos: dict[str, float] = {}
    for name in SLO_METRICS:
        raw = items.get(name)
        if raw in (None, ""):
            continue
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise ValueError(f"SLO {name}: expected milliseconds, got {raw!r}") from None
        if not value >= 0 or not math.isfinite(value):
            raise ValueError(f"SLO {name}: must be a non-negative number of milliseconds, got {raw!r}")
        slos[name] = value
    return slos
