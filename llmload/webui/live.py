"""Live statistics for the LLM tab, computed from raw :class:`RequestRecord` values (never Locust's rounded stats).

Every number comes from :class:`llmload.metrics.MetricsAccumulator` and so has the definitions of
:mod:`llmload.metrics.definitions` (the same as ``llmload bench``'s summary): linear-interpolation percentiles
over raw values, ITLs pooled, failed and cut-off requests left out, TPOT only for outputs > 1 token, TPOT excl.
1st ITL for outputs > 2; queue time and schedule lag over every open-loop request sent; goodput = requests
meeting every SLO / duration (TPOT counts as 0 when out <= 1, as vLLM).

A request belongs to the window when it *ended* (last counted event; failures: their start) within the last
``window_s`` seconds. Rates are completion-based: ``output_tokens_per_s = Σout(window) / window_s``,
``requests_per_s = completed(window) / window_s``; over the whole run they divide by the run's duration, the
time from the first request's start to the last one's end (as the result JSON).

Run-wide ITL percentiles are exact up to :data:`ITL_EXACT_LIMIT` values, then come from
:class:`llmload.metrics.LogHistogram` (1 % buckets; ``itl_exact`` says which). With more than one user class
``window`` and ``run`` also hold ``by_class``: ``{class: the same numbers over that class's requests}``; with more
than one model or LoRA adapter named (``--model a,b``, ``--lora-modules``), ``by_model`` likewise. When some
request was a turn of a conversation (``turn > 0``), ``window`` and ``run`` also hold ``turns``: one row per turn
index (``turn``, ``label``, ``requests``, ``completed``, ``ttft_p50_ms``, ``tpot_p50_ms``, ``cached_fraction``;
:meth:`llmload.metrics.ConversationTally.live_rows`, turns from 16 on pooled as ``"16+"``).
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from time import perf_counter
from typing import Any

from llmload.client.records import RequestRecord
from llmload.common.errors import ConfigError
from llmload.metrics import GOODPUT_METRICS, METRICS, MetricsAccumulator, form_items, parse_goodput

#: latency metrics, in display order: key -> label
LATENCIES = {key: metric.label for key, metric in METRICS.items()}
#: metrics the SLO form accepts (as ``--goodput``)
SLO_METRICS = GOODPUT_METRICS
#: run-wide ITLs kept exactly up to this many values (8 bytes each); beyond it a histogram takes over
ITL_EXACT_LIMIT = 2_000_000
#: how long a record stays in the recent buffer (the longest window the tab offers)
RECENT_S = 60.0
#: time-series points kept (one a second: the last hour)
SERIES_POINTS = 3600
#: keys of :meth:`MetricsAccumulator.live` that only the run-wide numbers show
_RUN_ONLY = ("total_input_tokens", "itl_exact")


class LiveStats:
    """Aggregates the records of one test as they arrive; :meth:`window` and :meth:`run` give the tab's numbers.

    ``source`` is the append-only sequence of the environment's run (``environment.llmload.records``, which reads
    its records back from the journal); only records that started at or after :meth:`reset` time are counted, so
    a new test from the UI starts from zero. The test's records are remembered by their place in ``source``, not
    held (:meth:`test_records` reads them back).
    """

    def __init__(self, source: Sequence[RequestRecord], clock: Callable[[], float] = perf_counter) -> None:
        self.source = source
        self.clock = clock
        #: goodput SLOs (ms) in :func:`llmload.metrics.parse_goodput`'s structure; empty: none
        self.slos_ms: dict[str, Any] = {}
        self.reset()

    def reset(self) -> None:
        self.test_start = self.clock()
        self._seen = len(self.source)
        #: the places in ``source`` of this test's records
        self.taken = array("q")
        self.recent: deque[tuple[float, RequestRecord]] = deque()
        self.first_start: float | None = None
        self.last_end: float | None = None
        self.acc = MetricsAccumulator(itl_exact_limit=ITL_EXACT_LIMIT)
        self.series: deque[dict[str, Any]] = deque(maxlen=SERIES_POINTS)

    @property
    def errors(self) -> dict[str, int]:
        """Failed and cut-off requests of the test by kind (:mod:`llmload.client.failures`)."""
        return _kinds(self.acc.total.failures)

    @property
    def classes(self) -> list[str]:
        """The test's user classes; more than one gives ``by_class`` numbers."""
        return self.acc.classes

    @property
    def models(self) -> list[str]:
        """The models (or LoRA adapters) the test's requests named; more than one gives ``by_model`` numbers."""
        return self.acc.models

    # -- ingest ---------------------------------------------------------------------------------------------

    def ingest(self) -> int:
        """Take the records appended to ``source`` since the last call; returns how many were new."""
        first = self._seen
        new = self.source[first:]
        self._seen += len(new)
        taken = 0
        for place, record in enumerate(new, first):
            if record.start and record.start < self.test_start - 1.0:
                continue  # a late batch from an earlier test
            self.taken.append(place)
            self._add(record)
            taken += 1
        self._prune()
        return taken

    def test_records(self) -> Sequence[RequestRecord]:
        """This test's records so far (read back from the run's journal where ``source`` keeps them there)."""
        view = getattr(self.source, "view", None)
        if view is not None:
            return view(self.taken)  # type: ignore[no-any-return]
        return [self.source[i] for i in self.taken]

    def _add(self, r: RequestRecord) -> None:
        end = r.end if r.end is not None else r.start
        self.first_start = r.start if self.first_start is None else min(self.first_start, r.start)
        if r.chunk_times and r.end is not None:  # as core.outcome.run_span, the result JSON's duration
            self.last_end = r.end if self.last_end is None else max(self.last_end, r.end)
        self.recent.append((end, r))
        self.acc.add(r)

    def _prune(self) -> None:
        horizon = self.clock() - RECENT_S
        while self.recent and self.recent[0][0] < horizon:
            self.recent.popleft()

    # -- numbers --------------------------------------------------------------------------------------------

    def window(self, window_s: float, *, settle_s: float = 0.0, slos_ms: Mapping[str, Any] | None = None
               ) -> dict[str, Any]:
        """Numbers over requests that ended in ``[now - settle - window, now - settle]``; ``settle_s`` leaves
        time for records still on their way from workers. With more than one user class in the test,
        ``by_class`` holds the same numbers per class."""
        end = self.clock() - settle_s
        begin = end - window_s
        acc = MetricsAccumulator()
        acc.extend(r for t, r in self.recent if begin <= t <= end)
        # a run younger than the window: rates over the time it has run
        span = window_s if self.first_start is None else max(1e-9, min(window_s, end - self.first_start))
        slos = self._slos(slos_ms)

        def numbers(user_class: str | None, model: str | None) -> dict[str, Any]:
            out = acc.live(span, slos=slos, user_class=user_class, model=model)
            for key in _RUN_ONLY:
                del out[key]
            out["errors"] = _kinds(out["errors"])
            return out | {"window_s": window_s, "span_s": span}

        return self._with_classes(numbers, acc)

    def run(self, *, slos_ms: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Numbers over every request of the test so far (exact, up to :data:`ITL_EXACT_LIMIT` ITLs); with more
        than one user class, ``by_class`` holds the same numbers per class."""
        duration = self.duration()
        slos = self._slos(slos_ms)

        def numbers(user_class: str | None, model: str | None) -> dict[str, Any]:
            out = self.acc.live(duration, slos=slos, user_class=user_class, model=model)
            del out["errors"]
            return {"duration_s": duration, **out}

        return self._with_classes(numbers, self.acc)

    def _with_classes(self, numbers: Callable[[str | None, str | None], dict[str, Any]], acc: MetricsAccumulator
                      ) -> dict[str, Any]:
        out = numbers(None, None)
        turns = acc.conversations.live_rows()
        if turns is not None:
            out["turns"] = turns
        sessions = acc.conversations.sessions.live_rows()
        if sessions is not None:
            out["sessions"] = sessions
        if len(self.classes) > 1:
            out["by_class"] = {c: numbers(c, None) for c in self.classes}
        if len(self.models) > 1:
            out["by_model"] = {m: numbers(None, m) for m in self.models}
        return out

    def _slos(self, slos_ms: Mapping[str, Any] | None) -> Mapping[str, Any]:
        return slos_ms if slos_ms is not None else self.slos_ms

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


def _kinds(counts: Mapping[str, int]) -> dict[str, int]:
    """Failure counts by kind, a kind that could not be told shown as ``unknown``."""
    out: dict[str, int] = {}
    for kind, n in counts.items():
        out[kind or "unknown"] = out.get(kind or "unknown", 0) + n
    return out


def parse_slos(items: Mapping[str, Any]) -> dict[str, Any]:
    """The tab's SLO form or query (``{"ttft": "500", "tpot": "", "Chat:e2el": "900", "model=a:ttft": "200"}``)
    through :func:`llmload.metrics.parse_goodput`: ``{"ttft": 500.0, "Chat": {"e2el": 900.0}, "model=a": {"ttft":
    200.0}}``; empty fields are left out; raises ValueError naming a bad entry."""
    try:
        return parse_goodput(form_items(items)) or {}
    except ConfigError as exc:
        raise ValueError(str(exc).replace("--goodput: ", "SLO ", 1)) from None

