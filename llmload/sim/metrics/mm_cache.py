"""vLLM's multimodal cache counters, ``vllm:mm_cache_queries_total`` and ``vllm:mm_cache_hits_total``.

vLLM counts, per engine, the multimodal items (images) its processor cache looked up and those it held already.
The simulator keeps the same counts per worker (:class:`llmload.sim.images.ImageCache`, an LRU of image hashes)
in the shared block, and serves the two families once any worker has seen an image: a text-only simulator's
``/metrics`` keeps the families it always had. SGLang's names have no such counters.
"""

from __future__ import annotations

from prometheus_client.utils import floatToGoString

from llmload.sim.metrics.shared import SharedStats
from llmload.sim.metrics.spec import engine_labels

#: (exposition name, help, scalar of the worker block), as vLLM registers them
FAMILIES = (
    ("vllm:mm_cache_queries_total", "Multi-modal cache queries, in terms of number of queried items.", "mm_queries"),
    ("vllm:mm_cache_hits_total", "Multi-modal cache hits, in terms of number of cached items.", "mm_hits"),
)


def render_mm_cache(shared: SharedStats, dialect: str, model: str) -> bytes:
    """The two counter families, one series per worker; nothing before the first image or for SGLang."""
    workers = range(shared.workers)
    if dialect == "sglang" or not any(shared.scalar(i, "mm_queries") for i in workers):
        return b""
    out: list[str] = []
    for name, help_text, source in FAMILIES:
        out.append(f"# HELP {name} {help_text}\n# TYPE {name} counter\n")
        for i in workers:
            labels = engine_labels(dialect, model, i, shared.workers)
            out.append(f"{name}{{{labels}}} {floatToGoString(shared.scalar(i, source))}\n")
    return "".join(out).encode()
