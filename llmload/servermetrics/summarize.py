"""What the server's metrics say about one run: the summary keys and the printed ``Server metrics`` block.

The run's window is ``[start, end]`` on the records' clock. Gauges (running, waiting, KV-cache usage) are
averaged and maxed over the scrapes inside it. A counter's increase runs from the last scrape at or before
``start`` to the first at or after ``end`` (the run's own ramp and tail), reset-safe: a value lower than the one
before means the server restarted, and counts from zero, as Prometheus's ``increase()`` does. Rates divide an
increase by the window's length. A histogram's mean is its sum's increase over its count's. A series the server
does not export leaves its keys out: absent means unknown, never zero.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import pairwise
from typing import Any

from llmload.servermetrics.snapshot import Snapshot
from llmload.summary.lines import EXAMPLE_CHARS, WIDTH, float_line, heading, int_line

#: counter -> summary key of its increase over the window
_COUNTERS = {
    "preemptions_total": "preemptions",
    "prompt_tokens_total": "prompt_tokens",
    "generation_tokens_total": "generation_tokens",
    "requests_finished_total": "requests_finished",
}
#: histogram -> summary key of its mean (milliseconds)
_MEANS = {
    "ttft_seconds": "mean_ttft_ms",
    "queue_time_seconds": "mean_queue_time_ms",
    "e2e_seconds": "mean_e2el_ms",
    "itl_seconds": "mean_itl_ms",
    "tpot_seconds": "mean_tpot_ms",
}


def increase(values: Sequence[float]) -> float:
    """How much a counter grew over ``values`` (in time order), a drop counted as a restart from zero."""
    total = 0.0
    for before, after in pairwise(values):
        total += after - before if after >= before else after
    return total


def _span(snapshots: Sequence[Snapshot], start: float, end: float) -> tuple[list[Snapshot], list[Snapshot]]:
    """``(inside, span)``: the scrapes in ``[start, end]``, and those from the last at or before ``start`` to
    the first at or after ``end``."""
    ordered = sorted(snapshots, key=lambda s: s.t)
    inside = [s for s in ordered if start <= s.t <= end]
    first = max((i for i, s in enumerate(ordered) if s.t <= start), default=0)
    last = min((i for i, s in enumerate(ordered) if s.t >= end), default=len(ordered) - 1)
    return inside, ordered[first : last + 1]


def _values(snapshots: Sequence[Snapshot], name: str) -> list[float]:
    return [s.series[name] for s in snapshots if name in s.series]


def _gauges(out: dict[str, Any], inside: Sequence[Snapshot]) -> None:
    for name, key in (("running", "running"), ("waiting", "waiting"), ("kv_cache_usage", "kv_cache_usage")):
        values = _values(inside, name)
        if values:
            out[f"mean_{key}"] = sum(values) / len(values)
            out[f"peak_{key}"] = max(values)
    fullest = _values(inside, "kv_cache_usage_max")
    if fullest:  # the fullest engine's peak, when there are several
        out["peak_kv_cache_usage"] = max(fullest)


def _counters(out: dict[str, Any], span: Sequence[Snapshot], duration: float) -> None:
    for name, key in _COUNTERS.items():
        values = _values(span, name)
        if len(values) >= 2:
            out[key] = increase(values)
    if duration > 0:
        for key in ("prompt_tokens", "generation_tokens"):
            if key in out:
                out[f"{key}_per_s"] = out[key] / duration


def _hit_rate(out: dict[str, Any], inside: Sequence[Snapshot], span: Sequence[Snapshot]) -> None:
    hits = _values(span, "prefix_cache_hits_total")
    queries = _values(span, "prefix_cache_queries_total")
    if len(hits) >= 2 and len(queries) >= 2 and increase(queries) > 0:
        out["prefix_cache_hit_rate"] = increase(hits) / increase(queries)
        out["prefix_cache_hit_rate_source"] = "tokens"
        return
    rates = _values(inside, "prefix_cache_hit_rate")
    if rates:
        out["prefix_cache_hit_rate"] = sum(rates) / len(rates)
        out["prefix_cache_hit_rate_source"] = "engine"


def _histogram_means(out: dict[str, Any], span: Sequence[Snapshot]) -> None:
    for name, key in _MEANS.items():
        pairs = [(s.series[f"{name}_sum"], s.series[f"{name}_count"]) for s in span
                 if f"{name}_sum" in s.series and f"{name}_count" in s.series]
        if len(pairs) < 2:
            continue
        count = increase([c for _, c in pairs])
        if count > 0:
            out[key] = increase([t for t, _ in pairs]) / count * 1000.0


def _engine(snapshots: Sequence[Snapshot]) -> str | None:
    engines = [s.engine for s in snapshots if s.engine]
    return max(set(engines), key=engines.count) if engines else None


def summarize(
    snapshots: Sequence[Snapshot],
    start: float,
    end: float,
    *,
    failures: Mapping[str, int] | None = None,
    first_error: str = "",
) -> dict[str, Any]:
    """The summary of the run's window ``[start, end]`` (``perf_counter`` seconds, the records' clock).

    Keys: ``scrapes`` (in the window), ``window_s``, ``engine``; ``mean_``/``peak_`` ``running``, ``waiting``,
    ``kv_cache_usage`` (fraction); ``preemptions``, ``prompt_tokens``, ``generation_tokens``,
    ``requests_finished`` (increases), ``prompt_tokens_per_s``, ``generation_tokens_per_s``;
    ``prefix_cache_hit_rate`` with ``prefix_cache_hit_rate_source`` (``"tokens"``: hits over queries in the
    window; ``"engine"``: the mean of the engine's own rate); ``mean_ttft_ms``, ``mean_queue_time_ms``,
    ``mean_e2el_ms``, ``mean_itl_ms``, ``mean_tpot_ms``; ``failures`` (by kind) and ``first_error`` when a
    scrape failed. A key whose series the server does not export is absent."""
    inside, span = _span(snapshots, start, end)
    out: dict[str, Any] = {"scrapes": len(inside), "window_s": max(0.0, end - start)}
    engine = _engine(span)
    if engine:
        out["engine"] = engine
    _gauges(out, inside)
    _counters(out, span, end - start)
    _hit_rate(out, inside, span)
    _histogram_means(out, span)
    failed = {k: int(n) for k, n in sorted((failures or {}).items()) if n}
    if failed:
        out["failures"] = failed
        if first_error:
            out["first_error"] = first_error
    return out


def _short(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= EXAMPLE_CHARS else flat[: EXAMPLE_CHARS - 3] + "..."


#: (key, label, scale, as integer) of the block's lines, in order
_LINES = (
    ("mean_running", "Mean running requests:", 1.0, False),
    ("peak_running", "Peak running requests:", 1.0, False),
    ("mean_waiting", "Mean waiting requests:", 1.0, False),
    ("peak_waiting", "Peak waiting requests:", 1.0, False),
    ("mean_kv_cache_usage", "Mean KV-cache usage (%):", 100.0, False),
    ("peak_kv_cache_usage", "Peak KV-cache usage (%):", 100.0, False),
    ("preemptions", "Preemptions:", 1.0, True),
    ("prefix_cache_hit_rate", "Prefix-cache hit rate (%):", 100.0, False),
    ("prompt_tokens", "Server prompt tokens:", 1.0, True),
    ("generation_tokens", "Server generated tokens:", 1.0, True),
    ("prompt_tokens_per_s", "Server prompt throughput (tok/s):", 1.0, False),
    ("generation_tokens_per_s", "Server output throughput (tok/s):", 1.0, False),
    ("requests_finished", "Server finished requests:", 1.0, True),
    ("mean_ttft_ms", "Server mean TTFT (ms):", 1.0, False),
    ("mean_queue_time_ms", "Server mean queue time (ms):", 1.0, False),
    ("mean_e2el_ms", "Server mean E2EL (ms):", 1.0, False),
    ("mean_itl_ms", "Server mean ITL (ms):", 1.0, False),
    ("mean_tpot_ms", "Server mean TPOT (ms):", 1.0, False),
)


def format_block(summary: Mapping[str, Any]) -> str:
    """The ``Server metrics`` block in the style of :mod:`llmload.summary` (``""`` for a summary with neither
    a scrape nor a failure: nothing to show)."""
    if not summary.get("scrapes") and not summary.get("failures"):
        return ""
    lines = [heading(" Server metrics ")]
    if summary.get("engine"):
        lines.append(int_line("Engine:", summary["engine"]))
    lines.append(int_line("Scrapes during the run:", summary.get("scrapes", 0)))
    for key, label, scale, integer in _LINES:
        if key in summary:
            value = summary[key] * scale
            lines.append(int_line(label, round(value)) if integer else float_line(label, value))
    if summary.get("prefix_cache_hit_rate_source") == "engine":
        lines.append(int_line("Prefix-cache hit rate from:", "the engine's own gauge"))
    failures = summary.get("failures") or {}
    if failures:
        lines.append(heading("Scrape failures", "-"))
        for kind, n in sorted(failures.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(int_line(f"{kind}:", n))
        if summary.get("first_error"):
            lines.append(f"First error: {_short(summary['first_error'])}")
    lines.append("=" * WIDTH)
    return "\n".join(lines)
