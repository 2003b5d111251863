"""Findings that read the server's metrics next to the client's records, each with the numbers behind it.

    stall_is_admission  of the requests whose ITL₁ > 3x the median later ITL (at least 5 inside the scraped
                        span), at least half had a scrape interval overlapping that first gap, or the scrape
                        interval before it (a sampled gauge shows a batch admitted just before), in which queued
                        requests entered the batch (the server's waiting queue dropped by ≥1 while running rose,
                        held, or fell by less than the requests that finished: ``ServerSeries.admissions``), and
                        that share is at least twice the share for an equally long window later in the same
                        requests (the control: with admissions in nearly every interval, the coincidence says
                        nothing)
    server_saturated    the result JSON's ``saturation`` verdict says saturated: onset, backlog growth,
                        throughput, and the median TTFT of requests sent after the onset vs before
    kv_pressure         the server preempted requests, or its KV-cache usage peaked above 90%: when, how often,
                        and the ITLs that ended in scrape intervals with preemptions vs the others
"""

from __future__ import annotations

import numpy as np

from llmload.metrics.definitions import itl_array
from llmload.report.columns import gap_sample
from llmload.report.findings import Finding
from llmload.report.server import number, saturation
from llmload.report.stats import RunStats

#: a request's ITL₁ over the run's median later ITL above which its first gap is a stall
ADMIT_ITL_RATIO = 3.0
#: stalled requests inside the scraped span needed to say anything
ADMIT_MIN_REQUESTS = 5
#: share of stalled requests whose first gap saw an admission
ADMIT_MIN_SHARE = 0.5
#: ... and how many times the control windows' share it must be
ADMIT_MIN_LIFT = 2.0
#: KV-cache usage above this fraction is "full"
KV_FULL = 0.90
#: requests (or gaps) needed on each side of a before/after comparison
MIN_SIDE = 3


def _ms(x: float) -> str:
    return f"{x * 1000.0:.1f} ms"


def _stall_windows(s: RunStats, threshold: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(start, end, control_start)`` (report time axis) of each request's first gap above ``threshold``; the
    control window, as long, starts at a chunk in the second half of the request (ITL₂ on)."""
    starts, ends, controls = [], [], []
    for r in s.done:
        times = r.chunk_times
        if len(times) < 3 or itl_array(r)[0] <= threshold:  # the first ITL, by its one definition
            continue
        starts.append(times[0] - s.t0)
        ends.append(times[1] - s.t0)
        controls.append(times[max(2, len(times) // 2)] - s.t0)
    return np.asarray(starts), np.asarray(ends), np.asarray(controls)


def stall_is_admission(s: RunStats) -> Finding | None:
    series = s.server
    if series is None or not (series.has("running") and series.has("waiting")) or s.itl_later_count < 5:
        return None
    median_later = s.itl_later_median
    if median_later <= 0:
        return None
    a, b, c = _stall_windows(s, ADMIT_ITL_RATIO * median_later)
    admitted = series.admissions()
    # a gauge is sampled: a batch admitted just before the first token (its prefills then hold the first
    # decode, as in llmload sim --first-decode-stall) shows in the scrape interval before the stall
    back = series.interval_s
    covered, hit = series.overlapping(admitted, a - back, b)
    n = int(covered.sum())
    if n < ADMIT_MIN_REQUESTS:
        return None
    share = float(hit.sum()) / n
    control_covered, control_hit = series.overlapping(admitted, c - back, c + (b - a))
    control = float(control_hit.sum()) / max(int(control_covered.sum()), 1)
    if share < ADMIT_MIN_SHARE or share < ADMIT_MIN_LIFT * control:
        return None
    return Finding(
        "stall_is_admission", s.run.label, "the first-ITL stall is the server admitting a new batch",
        f"in {share * 100:.0f}% of the {n} requests whose ITL₁ exceeded {ADMIT_ITL_RATIO:g}x the median later "
        f"ITL ({_ms(median_later)}), the server's waiting queue dropped by ≥1 and running rose or held in the "
        f"same or the preceding scrape interval (scrapes every {series.interval_s:.2g} s; "
        f"{int(admitted.sum())} such intervals in {len(series.t) - 1}); in an equally long window later in the "
        f"same requests, {control * 100:.0f}%: "
        "the engine was admitting a new batch, whose prefill holds back the running requests' next token.",
    )


def _ttft_split(s: RunStats, since: float) -> str:
    """``"; median TTFT X of requests sent after the onset vs Y before (Zx)"`` when both sides have requests."""
    c = s.columns
    has = c.completed & ~np.isnan(c.ttft)
    sent, ttft = c.start[has] - s.t0, c.ttft[has]
    before, after = ttft[sent < since], ttft[sent >= since]
    if len(before) < MIN_SIDE or len(after) < MIN_SIDE:
        return ""
    b, a = float(np.median(before)), float(np.median(after))
    ratio = f" ({a / b:.1f}x)" if b > 0 else ""
    return f"; median TTFT {_ms(a)} for the {len(after)} requests sent after it vs {_ms(b)} before{ratio}"


def _peak_waiting_after(s: RunStats, since: float) -> str:
    series = s.server
    if series is None or not series.has("waiting"):
        return ""
    after = series.waiting[(series.t >= since) & np.isfinite(series.waiting)]
    at = series.waiting[(series.t <= since) & np.isfinite(series.waiting)]
    if not len(after):
        return ""
    if len(at) and after.max() > at[-1]:
        return f"; the server's waiting queue rose from {at[-1]:.0f} at the onset to {after.max():.0f}"
    return f"; the server's waiting queue peaked at {after.max():.0f} after it"


def server_saturated(s: RunStats) -> Finding | None:
    verdict = saturation(s)
    if not verdict or verdict.get("saturated") is not True:
        return None
    since = number(verdict, "since_s")
    signal = {"waiting": "the server's waiting queue", "in_flight": "the requests in flight at the client"}.get(
        str(verdict.get("signal")), "the backlog")
    growth, rate = number(verdict, "backlog_growth"), number(verdict, "throughput_rps")
    head = f"from {since:.1f} s on" if since is not None else "during the run"
    detail = f"{head}, {signal} grew"
    if growth is not None:
        detail += f" by {growth:.0f} requests over the test's windows"
    if rate is not None:
        detail += f" while completions stayed at {rate:.2f} req/s"
    if since is not None:
        detail += _peak_waiting_after(s, since) + _ttft_split(s, since)
    if verdict.get("stopped_run"):
        detail += ". The run was stopped there (--stop-on-saturation)."
    else:
        detail += ". Latencies after the onset measure the queue, not the engine: lower the request rate."
    return Finding("server_saturated", s.run.label, "the server was saturated", detail)


def _kv_detail(s: RunStats, peak: float, mean: float | None) -> str:
    detail = f"peak KV-cache usage {peak * 100:.1f}%"
    if mean is not None:
        detail += f" (mean {mean * 100:.1f}%)"
    series = s.server
    if series is not None and series.has("kv"):
        # the run's scrapes, with the observer's first (at the start) and last (at the end) ones
        slack = series.interval_s / 2
        inside = (series.t >= -slack) & (series.t <= s.run.duration + slack)
        with np.errstate(invalid="ignore"):
            full = inside & (series.kv > KV_FULL)
        if full.any():
            times = series.t[full]
            detail += (f", above {KV_FULL * 100:.0f}% in {int(full.sum())} scrapes from {times[0]:.1f} s to "
                       f"{times[-1]:.1f} s")
    return detail


def _preemption_itls(s: RunStats) -> str:
    """The ITLs that ended in scrape intervals with preemptions vs the others, when both have gaps."""
    series = s.server
    if series is None or not series.has("preemptions"):
        return ""
    flags = series.preempting() & series.during(s.run.duration)
    if not flags.any():
        return ""
    k = int(np.argmax(flags))
    detail = f", first between {series.t[k - 1]:.1f} s and {series.t[k]:.1f} s"
    ends, gaps = gap_sample(s.done, len(s.columns.itl), s.t0)  # a long run: every k-th request's ITLs
    covered, hit = series.overlapping(flags, ends, ends)
    inside, outside = gaps[hit], gaps[covered & ~hit]
    if len(inside) >= MIN_SIDE and len(outside) >= MIN_SIDE:
        detail += (f"; ITLs ending in those scrape intervals: median {_ms(float(np.median(inside)))} vs "
                   f"{_ms(float(np.median(outside)))} elsewhere")
    return detail


def kv_pressure(s: RunStats) -> Finding | None:
    summary = s.server_summary
    preempted = number(summary, "preemptions") or 0.0
    peak = number(summary, "peak_kv_cache_usage")
    full = peak is not None and peak > KV_FULL
    if preempted <= 0 and not full:
        return None
    parts = [_kv_detail(s, peak, number(summary, "mean_kv_cache_usage"))] if peak is not None else []
    if preempted > 0:
        parts.append(f"the server preempted {preempted:.0f} requests{_preemption_itls(s)}")
        why = ("A preempted request gives up its KV blocks and is recomputed (or swapped) before its next token: "
               "fewer concurrent sequences or more KV-cache memory avoid it.")
        title = "the server preempted requests"
    else:
        why = "No preemptions yet, but a burst or longer outputs will wait for KV blocks or preempt requests."
        title = "the KV cache ran nearly full"
    return Finding("kv_pressure", s.run.label, title, "; ".join(parts) + ". " + why)


SERVER_RULES = (stall_is_admission, server_saturated, kv_pressure)


def server_findings(s: RunStats) -> list[Finding]:
    """The findings that need the server's metrics (none for a run without them)."""
    return [f for rule in SERVER_RULES if (f := rule(s)) is not None]
