"""vLLM's speculative-decoding counters for ``llmload sim --num-speculative-tokens K``: a model of the counters
only (the simulator's timing does not change), derived from the tokens generated so far so every scrape is
consistent with the generation counter.

Each decode step is one draft of ``K`` tokens; draft position ``i`` (from 0) is accepted with probability
``a ** (i + 1)`` (``--spec-acceptance a``: a draft is accepted up to its first rejection). A step yields
``1 + accepted`` tokens, so ``G`` generated tokens took ``drafts = floor(G / (1 + Σ a^(i+1)))`` steps, and

    accepted at position i = floor(drafts * a ** (i + 1)),   draft tokens = drafts * K.
"""

from __future__ import annotations

import math

NAMES = ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens",
         "vllm:spec_decode_num_accepted_tokens")
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"


def spec_decode_counts(generated: float, k: int, acceptance: float) -> tuple[int, int, list[int]]:
    """``(drafts, draft tokens, accepted per position)`` after ``generated`` tokens (module docstring)."""
    rates = [acceptance ** (i + 1) for i in range(k)]
    drafts = math.floor(generated / (1.0 + sum(rates)))
    return drafts, drafts * k, [math.floor(drafts * r) for r in rates]


def render_spec_decode(generated: float, k: int, acceptance: float, model: str) -> bytes:
    """The four counter families in the exposition format, labelled as vLLM labels them."""
    drafts, draft_tokens, per_position = spec_decode_counts(generated, k, acceptance)
    labels = f'engine="0",model_name="{model}"'
    lines = []
    for name, value, what in zip(NAMES, (drafts, draft_tokens, sum(per_position)),
                                 ("drafts", "draft tokens", "accepted tokens"), strict=True):
        lines += [f"# HELP {name}_total Number of spec decoding {what}.", f"# TYPE {name}_total counter",
                  f"{name}_total{{{labels}}} {value}.0"]
    lines += [f"# HELP {PER_POSITION}_total Accepted tokens per draft position.",
              f"# TYPE {PER_POSITION}_total counter"]
    lines += [f'{PER_POSITION}_total{{{labels},position="{i}"}} {n}.0' for i, n in enumerate(per_position)]
    return ("\n".join(lines) + "\n").encode()
