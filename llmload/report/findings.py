"""Automatic findings: what an engineer would spot on the plots, each with the numbers behind it.

    first_itl_stall   median ITL₁ > 3x the median of later ITLs, and per request ITL₁ > 2x the median of ITL₂..ITL₄
                      (the second test keeps a slow prefill phase, which lengthens ITL₁ and ITL₂ alike, from
                      counting as a stall)
    itl_vs_tpot       mean ITL and mean TPOT differ by more than 15%: ITL is pooled per chunk (long requests
                      weigh more), TPOT is averaged per request; shown with the token-weighted TPOT and TPOT
                      of short vs long requests, or with tokens per chunk when chunks carry several tokens
    ttft_tail         TTFT p99 > 3x the median
    client_saturated  the client was the bottleneck (``client_health.bottleneck`` in our result JSON)
    failures          failed or cut-off requests, with the most common errors
    tpot_gap_is_itl1  (compare) a run's TPOT differs from the baseline's far more than its TPOT excl. 1st ITL
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from llmload.metrics import linear_percentiles
from llmload.report.stats import RunStats

STALL_RATIO = 3.0
STALL_PER_REQUEST_RATIO = 2.0
ITL_TPOT_GAP = 0.15
TTFT_TAIL_RATIO = 3.0
#: compare: TPOT and TPOT-excl.-ITL₁ differences (vs baseline) further apart than this
TPOT_GAP_POINTS = 0.10


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str
    #: the run it is about (None: across runs)
    run: str | None
    title: str
    detail: str

    def text(self) -> str:
        who = f"[{self.run}] " if self.run else ""
        return f"{who}{self.title}: {self.detail}"


def _pct(x: float) -> str:
    """A signed whole percentage without "-0%": 0.123 -> "+12%"."""
    value = round(x * 100)
    return f"{value:+d}%" if value else "+0%"


def _ms(x: float) -> str:
    return f"{x * 1000.0:.1f} ms"


def first_itl_stall(s: RunStats) -> Finding | None:
    itl1, per_req = s.itl1, s.itl1_vs_next
    if len(itl1) < 5 or s.itl_later_count < 5 or len(per_req) < 5:
        return None
    m1, ml = float(np.median(itl1)), s.itl_later_median
    per = float(np.median(per_req))
    if ml <= 0 or m1 <= STALL_RATIO * ml or per <= STALL_PER_REQUEST_RATIO:
        return None
    m = s.metrics
    tpot, steady = m.tpot.mean_ms, m.tpot_steady.mean_ms
    extra = f"; mean TPOT {tpot:.2f} ms vs {steady:.2f} ms excluding the first ITL"
    if steady > 0:
        extra += f" ({_pct((tpot - steady) / steady)})"
    return Finding(
        "first_itl_stall", s.run.label, "first-ITL stall (the 2nd token waits)",
        f"median ITL₁ {_ms(m1)} vs {_ms(ml)} for later ITLs ({m1 / ml:.1f}x); per request, ITL₁ is a median "
        f"{per:.1f}x the next ITLs; p99 ITL₁ {_ms(linear_percentiles(itl1, (99.0,))[0])}{extra}. "
        "Compare TPOT excl. 1st ITL across engines.",
    )


def itl_vs_tpot(s: RunStats) -> Finding | None:
    m = s.metrics
    itl, tpot = m.itl.mean_ms, m.tpot.mean_ms
    if tpot <= 0 or itl <= 0 or abs(itl - tpot) / tpot <= ITL_TPOT_GAP:
        return None
    c = s.columns
    e2el, ttft = c.end - c.start, c.first_token - c.start  # the records' own e2el and ttft
    rows = c.completed & (c.output_tokens > 1) & ~np.isnan(e2el) & ~np.isnan(ttft)
    if rows.sum() < 2:
        return None
    decode = (e2el - ttft)[rows]
    tokens = c.output_tokens[rows] - 1
    gaps = np.maximum(c.chunks[rows] - 1, 0)
    weighted = float(decode.sum() / tokens.sum()) * 1000.0
    per_chunk = float(tokens.sum() / gaps.sum()) if gaps.sum() else 1.0
    head = f"mean ITL {itl:.2f} ms vs mean TPOT {tpot:.2f} ms ({_pct((itl - tpot) / tpot)})"
    if per_chunk > 1.1:
        return Finding(
            "itl_vs_tpot", s.run.label, "ITL and TPOT differ: chunks carry several tokens",
            f"{head}; a chunk carries {per_chunk:.2f} tokens on average and ITL is measured per chunk, "
            f"TPOT per token (token-weighted TPOT {weighted:.2f} ms).",
        )
    tpots = decode / tokens
    cut = float(np.median(tokens + 1))
    short, long_ = tpots[tokens + 1 <= cut], tpots[tokens + 1 > cut]
    split = ""
    if len(short) and len(long_):
        split = (f"; requests with <= {cut:.0f} output tokens average TPOT {short.mean() * 1000:.2f} ms, "
                 f"longer ones {long_.mean() * 1000:.2f} ms")
    return Finding(
        "itl_vs_tpot", s.run.label, "ITL and TPOT differ: length weighting",
        f"{head}. ITL is pooled over all gaps, so long requests weigh more; TPOT averages requests equally. "
        f"Token-weighted TPOT Σ(E2EL−TTFT)/Σ(out−1) = {weighted:.2f} ms, close to the ITL mean{split}.",
    )


def ttft_tail(s: RunStats) -> Finding | None:
    t = s.ttft
    if len(t) < 5:
        return None
    med, p99 = linear_percentiles(t, (50.0, 99.0))
    if med <= 0 or p99 <= TTFT_TAIL_RATIO * med:
        return None
    share = float(np.mean(t > 2 * med)) * 100
    why = ""
    if str(s.run.summary.get("request_rate")) == "inf":
        why = " All requests were sent at once (request rate inf): the tail is time queued for a batch slot."
    return Finding(
        "ttft_tail", s.run.label, "heavy TTFT tail",
        f"p99 TTFT {_ms(p99)} is {p99 / med:.1f}x the median {_ms(med)} (std {_ms(float(np.std(t)))}); "
        f"{share:.0f}% of requests wait more than twice the median.{why}",
    )


def client_saturated(s: RunStats) -> Finding | None:
    health = s.run.client_health
    if not health or not health.get("bottleneck"):
        return None
    return Finding(
        "client_saturated", s.run.label, "the client was the bottleneck",
        f"{health.get('reason') or 'client health check failed'} (CPU mean {health.get('cpu_percent_mean', 0)}%, "
        f"event-loop lag p99 {health.get('loop_lag_p99_ms', 0)} ms): latencies include client delay; "
        "add --processes or lower the load.",
    )


def failures(s: RunStats) -> Finding | None:
    m = s.metrics
    if not m.failed and not m.cut_off:
        return None
    errors = Counter((r.error or "unknown error") for r in s.failed)
    top = "; ".join(f"{n}x {msg[:120]}" for msg, n in errors.most_common(3))
    parts = [f"{m.failed} of {m.total_requests} requests failed ({m.failed / max(m.total_requests, 1) * 100:.1f}%)"]
    if m.cut_off:
        parts.append(f"{m.cut_off} cut off by the end of the run")
    return Finding("failures", s.run.label, "failed requests",
                   ", ".join(parts) + (f"; most common: {top}" if top else ""))


RULES = (first_itl_stall, itl_vs_tpot, ttft_tail, client_saturated, failures)


def run_findings(s: RunStats) -> list[Finding]:
    return [f for rule in RULES if (f := rule(s)) is not None]


def compare_findings(stats: list[RunStats], baseline: int) -> list[Finding]:
    """Cross-run findings: a TPOT difference that is really a first-ITL difference."""
    out = []
    base = stats[baseline].metrics
    for i, s in enumerate(stats):
        if i == baseline or base.tpot.mean_ms <= 0 or base.tpot_steady.mean_ms <= 0:
            continue
        m = s.metrics
        d_tpot = (m.tpot.mean_ms - base.tpot.mean_ms) / base.tpot.mean_ms
        d_steady = (m.tpot_steady.mean_ms - base.tpot_steady.mean_ms) / base.tpot_steady.mean_ms
        if abs(d_tpot - d_steady) > TPOT_GAP_POINTS:
            out.append(Finding(
                "tpot_gap_is_itl1", None, f"{s.run.label} vs {stats[baseline].run.label}: the TPOT gap is the first ITL",
                f"mean TPOT {_pct(d_tpot)} ({m.tpot.mean_ms:.2f} vs {base.tpot.mean_ms:.2f} ms) but "
                f"TPOT excl. 1st ITL {_pct(d_steady)} ({m.tpot_steady.mean_ms:.2f} vs "
                f"{base.tpot_steady.mean_ms:.2f} ms)",
            ))
    return out
