"""Today's ``vllm bench serve``'s speculative-decoding keys, from the server's ``/metrics`` read before and
after the run: the ``vllm:spec_decode_*_total`` counters' growth over it (summed over engines and models).

    acceptance_rate   = 100 * accepted tokens / draft tokens          (%)
    acceptance_length = 1 + accepted tokens / drafts
    per_position[i]   = accepted tokens at draft position i / drafts  (fractions)

Present only when both reads found the counters and draft tokens grew (docs/vllm-compat.md)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from llmload.servermetrics.parse import Sample

DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"


def spec_decode_counters(samples: Iterable[Sample]) -> dict[str, Any] | None:
    """``{drafts, draft_tokens, accepted, per_position: {i: n}}`` summed over label sets; None when the page
    has no spec-decode counters."""
    totals = {DRAFTS: 0.0, DRAFT_TOKENS: 0.0, ACCEPTED: 0.0}
    per_position: dict[int, float] = {}
    found = False
    for s in samples:
        if s.name in totals:
            totals[s.name] += s.value
            found = True
        elif s.name == PER_POSITION and s.labels.get("position", "").isdigit():
            position = int(s.labels["position"])
            per_position[position] = per_position.get(position, 0.0) + s.value
    if not found:
        return None
    return {"drafts": totals[DRAFTS], "draft_tokens": totals[DRAFT_TOKENS], "accepted": totals[ACCEPTED],
            "per_position": per_position}


def spec_decode_keys(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, Any]:
    """The ``spec_decode_*`` result keys over the run ({} unless both reads had the counters and draft tokens
    grew)."""
    if before is None or after is None:
        return {}
    drafts = int(after["drafts"] - before["drafts"])
    draft_tokens = int(after["draft_tokens"] - before["draft_tokens"])
    accepted = int(after["accepted"] - before["accepted"])
    if draft_tokens <= 0:
        return {}
    positions = sorted(after["per_position"])
    per_position = [(after["per_position"][i] - before["per_position"].get(i, 0.0)) / drafts if drafts else 0.0
                    for i in positions]
    return {"spec_decode_acceptance_rate": 100.0 * accepted / draft_tokens,
            "spec_decode_acceptance_length": 1.0 + accepted / drafts if drafts else 0.0,
            "spec_decode_num_drafts": drafts, "spec_decode_draft_tokens": draft_tokens,
            "spec_decode_accepted_tokens": accepted, "spec_decode_per_position_acceptance_rates": per_position}


def read_spec_decode(base_url: str, headers: dict[str, str] | None = None, timeout_s: float = 5.0
                     ) -> dict[str, Any] | None:
    """One read of ``base_url``'s ``/metrics`` for the counters; None when the page is missing, unreadable or
    has none (a server without ``/metrics`` is not an error here)."""
    from llmload.servermetrics.fetch import ScrapeError, fetch, metrics_url
    from llmload.servermetrics.parse import ExpositionError, parse_exposition

    try:
        page = fetch(metrics_url(base_url), timeout_s, headers)
        return spec_decode_counters(parse_exposition(page.text))
    except (ScrapeError, ExpositionError):
        return None
