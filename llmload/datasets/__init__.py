"""Workloads: prompts with token lengths, built before the test starts.

    load_samples(name, path, tokenizer, num_prompts, seed, **options) -> list[SampleRequest]

``sharegpt`` (vLLM's sampling rules; the synthetic sample when no path is given), ``random``
(vLLM's RandomDataset) and ``custom`` (JSONL). Malformed input raises ``DatasetError``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmload.datasets.base import SampleRequest, Tokenizer, token_len
from llmload.datasets.custom import sample_custom
from llmload.datasets.random_dataset import sample_random
from llmload.datasets.sharegpt import default_sharegpt_path, load_conversations, sample_sharegpt
from llmload.errors import ConfigError, DatasetError

DATASET_NAMES = ("sharegpt", "random", "custom")

__all__ = [
    "DATASET_NAMES",
    "SampleRequest",
    "Tokenizer",
    "default_sharegpt_path",
    "load_conversations",
    "load_samples",
    "sample_custom",
    "sample_random",
    "sample_sharegpt",
    "token_len",
]


def load_samples(
    dataset_name: str,
    dataset_path: str | Path | None,
    tokenizer: Tokenizer,
    num_prompts: int,
    seed: int = 0,
    **options: Any,
) -> list[SampleRequest]:
    """Build the workload for ``--dataset-name``.

    Options: sharegpt ``fixed_output_len``; random ``input_len``, ``output_len``, ``range_ratio``,
    ``prefix_len``; custom ``default_output_len``. ``None`` values mean "use the default".
    """
    options = {k: v for k, v in options.items() if v is not None}
    allowed = {
        "sharegpt": {"fixed_output_len"},
        "random": {"input_len", "output_len", "range_ratio", "prefix_len"},
        "custom": {"default_output_len"},
    }
    if dataset_name not in allowed:
        raise ConfigError(f"--dataset-name {dataset_name!r} is not one of {', '.join(DATASET_NAMES)}")
    unknown = set(options) - allowed[dataset_name]
    if unknown:
        raise ConfigError(f"options {sorted(unknown)} do not apply to --dataset-name {dataset_name}")
    if dataset_name == "sharegpt":
        path = dataset_path if dataset_path is not None else default_sharegpt_path()
        return sample_sharegpt(path, tokenizer, num_prompts, seed, **options)
    if dataset_name == "random":
        return sample_random(tokenizer, num_prompts, seed, **options)
    if dataset_path is None:
        raise DatasetError("--dataset-name custom needs --dataset-path pointing at a JSONL file")
    return sample_custom(dataset_path, tokenizer, num_prompts, **options)
