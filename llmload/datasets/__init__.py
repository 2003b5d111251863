"""Workloads: prompts with token lengths, built before the test starts.

    load_samples(name, path, tokenizer, num_prompts, seed, **options) -> list[SampleRequest]

``sharegpt`` (vLLM's sampling rules; the synthetic sample when no path is given; with ``multi_turn``
whole conversations, :mod:`llmload.datasets.conversations`), ``random`` (vLLM's RandomDataset),
``random-mm`` (random images too, :mod:`llmload.datasets.random_mm`), ``random-rerank`` (a query and documents a
request, :mod:`llmload.datasets.pooling`), ``prefix_repetition`` (vLLM's PrefixRepetitionRandomDataset), ``custom`` (JSONL), vLLM's ``sonnet``,
``burstgpt`` and ``spec_bench``, and ``trace`` (replay of
an Azure / BurstGPT / JSONL trace; each sample carries its send offset in ``arrival_s``), and ``weka_trace``
(agentic sessions from WEKA / Claude Code traces, one sample a session:
:mod:`llmload.datasets.traces.weka_replay`). Malformed input raises ``DatasetError``.

Names load on first use (as :mod:`llmload.metrics`'s do): the option table reads :data:`DATASET_NAMES`, and the
simulator and ``llmload report`` start without the readers and numpy.
"""

from __future__ import annotations

from llmload.common.choices import SESSION_DATASETS, TRACE_DATASETS, TRACE_FORMATS
from llmload.common.lazy import lazy_names
from llmload.datasets.base import SampleRequest, Tokenizer, token_len

DATASET_NAMES = ("sharegpt", "random", "random-mm", "random-rerank", "prefix_repetition", "custom", "sonnet", "burstgpt", "spec_bench", "hf",
                 *TRACE_DATASETS, *SESSION_DATASETS)

_EXPORTS = {
    "loading": ("load_samples",),
    "conversations": ("sample_conversations",),
    "custom": ("sample_custom",),
    "prefix_repetition": ("sample_prefix_repetition",),
    "random_dataset": ("sample_random",),
    "sharegpt": ("default_sharegpt_path", "load_conversations", "sample_sharegpt"),
    "traces": ("sample_trace",),
}

__all__ = [
    "DATASET_NAMES",
    "TRACE_FORMATS",
    "SampleRequest",
    "Tokenizer",
    "default_sharegpt_path",
    "load_conversations",
    "load_samples",
    "sample_conversations",
    "sample_custom",
    "sample_prefix_repetition",
    "sample_random",
    "sample_sharegpt",
    "sample_trace",
    "token_len",
]


__getattr__, __dir__ = lazy_names(__name__, _EXPORTS, globals(), __all__)
