"""``load_samples``: one table of which options each dataset takes, and one dispatch to its reader.

Imported on first use through :mod:`llmload.datasets` (the readers bring numpy, ~0.25 s of CPU), so that the
option table, which only needs :data:`~llmload.datasets.DATASET_NAMES`, and the simulator start without them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llmload.common.choices import SESSION_DATASETS, TRACE_DATASETS
from llmload.common.errors import ConfigError, DatasetError
from llmload.datasets import DATASET_NAMES
from llmload.datasets.base import SampleRequest, Tokenizer
from llmload.datasets.burstgpt import sample_burstgpt
from llmload.datasets.conversations import sample_conversations
from llmload.datasets.custom import sample_custom
from llmload.datasets.hf import sample_hf
from llmload.datasets.prefix_repetition import sample_prefix_repetition
from llmload.datasets.random_dataset import sample_random
from llmload.datasets.sharegpt import default_sharegpt_path, sample_sharegpt
from llmload.datasets.sonnet import default_sonnet_path, sample_sonnet
from llmload.datasets.spec_bench import sample_spec_bench
from llmload.datasets.traces import sample_trace
from llmload.datasets.traces.blocks import default_mooncake_path


def load_samples(
    dataset_name: str,
    dataset_path: str | Path | None,
    tokenizer: Tokenizer,
    num_prompts: int | None,
    seed: int = 0,
    **options: Any,
) -> Sequence[SampleRequest]:
    """Build the workload for ``--dataset-name`` (``random``'s prompts are made when read). Long on purpose: one
    table of which options each dataset takes, and one dispatch.

    Options: sharegpt ``fixed_output_len``, ``multi_turn`` (whole conversations), ``max_turns`` and
    ``system_prompt_len`` (both only with ``multi_turn``); random ``input_len``, ``output_len``,
    ``range_ratio``, ``prefix_len``; prefix_repetition ``prefix_len``, ``suffix_len``, ``num_prefixes``,
    ``output_len``; custom ``default_output_len``; trace ``trace_format``, ``time_scale``,
    ``trace_start``, ``trace_duration``, ``prompt_path``, and for a Mooncake trace ``block_size`` and
    ``mooncake`` (its keys, :class:`~llmload.datasets.traces.formats.MooncakeKeys`) (``num_prompts`` ``None`` =
    the whole window). ``mooncake`` and ``timed_trace`` are ``trace`` with ``trace_format="mooncake"``.
    ``None`` values mean "use the default".
    """
    options = {k: v for k, v in options.items() if v is not None}
    allowed = {
        "sharegpt": {"fixed_output_len", "multi_turn", "max_turns", "system_prompt_len", "shuffle"},
        "random": {"input_len", "output_len", "range_ratio", "prefix_len", "batch_size"},
        "random-mm": {"input_len", "output_len", "range_ratio", "prefix_len", "mm"},
        "random-rerank": {"input_len", "output_len", "range_ratio", "batch_size", "reranker"},
        "prefix_repetition": {"prefix_len", "suffix_len", "num_prefixes", "output_len", "shuffle"},
        "custom": {"default_output_len"},
        "sonnet": {"input_len", "output_len", "prefix_len"},
        "burstgpt": set(),
        "spec_bench": {"output_len", "category", "shuffle"},
        "hf": {"subset", "split", "name", "output_len", "shuffle"},
        "trace": {"trace_format", "time_scale", "trace_start", "trace_duration", "prompt_path", "block_size",
                  "mooncake"},
        "weka_trace": {"prompt_path"},
    }
    if dataset_name in TRACE_DATASETS and dataset_name != "trace":
        # Mooncake's JSONL (vLLM's timed_trace reads the same files): --dataset-name trace --trace-format mooncake
        options.setdefault("trace_format", "mooncake")
        dataset_name = "trace"
        if dataset_path is None:
            dataset_path = default_mooncake_path()
    if dataset_name not in allowed:
        raise ConfigError(f"--dataset-name {dataset_name!r} is not one of {', '.join(DATASET_NAMES)}")
    unknown = set(options) - allowed[dataset_name]
    if unknown:
        raise ConfigError(f"options {sorted(unknown)} do not apply to --dataset-name {dataset_name}")
    if dataset_name == "sharegpt":
        path = dataset_path if dataset_path is not None else default_sharegpt_path()
        return _sharegpt(path, tokenizer, num_prompts, seed, options)
    if dataset_name.startswith("random"):
        return _random(dataset_name, tokenizer, num_prompts, seed, options)
    if dataset_name == "prefix_repetition":
        return sample_prefix_repetition(tokenizer, num_prompts, seed, **options)
    if dataset_name in SESSION_DATASETS:
        return _sessions(dataset_path, tokenizer, num_prompts, seed, options)
    if dataset_name == "trace":
        if dataset_path is None:
            raise DatasetError(
                "--dataset-name trace needs --dataset-path pointing at an Azure, BurstGPT or JSONL trace"
            )
        return sample_trace(dataset_path, tokenizer, num_prompts, seed, **options)
    return _from_file(dataset_name, dataset_path, tokenizer, num_prompts, seed, options)


def _random(dataset_name: str, tokenizer: Tokenizer, num_prompts: int | None, seed: int,
            options: dict[str, Any]) -> Sequence[SampleRequest]:
    """``random`` (batched into embeddings requests with ``batch_size``), ``random-mm`` and ``random-rerank``."""
    n = num_prompts if num_prompts is not None else 1000
    if dataset_name == "random-mm":
        from llmload.datasets.random_mm import sample_random_mm

        return sample_random_mm(tokenizer, n, seed, **options)
    if dataset_name == "random-rerank":
        from llmload.datasets.pooling import sample_random_rerank

        return sample_random_rerank(tokenizer, n, seed, **options)
    batch_size = int(options.pop("batch_size", 1))
    samples = sample_random(tokenizer, n, seed, **options)  # n: --num-prompts, never None for random
    if batch_size == 1:
        return samples
    from llmload.datasets.pooling import batched

    return batched(samples, batch_size)


def _sessions(dataset_path: str | Path | None, tokenizer: Tokenizer, num_prompts: int | None, seed: int,
              options: dict[str, Any]) -> list[SampleRequest]:
    """``weka_trace``: one sample per agentic session."""
    if dataset_path is None:
        raise DatasetError("--dataset-name weka_trace needs --dataset-path: a folder of WEKA / Claude Code .json "
                           "traces or a .jsonl file of them")
    from llmload.datasets.traces.weka_replay import sample_weka

    return sample_weka(dataset_path, tokenizer, num_prompts, seed, **options)


#: what ``--dataset-path`` must name for the datasets that have no default file
_NEEDS = {"burstgpt": "a BurstGPT CSV", "spec_bench": "a SpecBench question.jsonl", "custom": "a JSONL file",
          "hf": "a local copy of a Hugging Face dataset (a data file, its directory, or an id in the local cache)"}


def _from_file(dataset_name: str, dataset_path: str | Path | None, tokenizer: Tokenizer, num_prompts: int | None,
               seed: int, options: dict[str, Any]) -> list[SampleRequest]:
    """The datasets read from one file: sonnet (the shipped sample by default), burstgpt, spec_bench, custom."""
    if dataset_name == "sonnet":
        return sample_sonnet(dataset_path or default_sonnet_path(), tokenizer, num_prompts, seed, **options)
    if dataset_path is None:
        raise DatasetError(f"--dataset-name {dataset_name} needs --dataset-path pointing at {_NEEDS[dataset_name]}")
    if dataset_name == "burstgpt":
        return sample_burstgpt(dataset_path, tokenizer, num_prompts, seed)
    if dataset_name == "spec_bench":
        return sample_spec_bench(dataset_path, tokenizer, num_prompts, seed, **options)
    if dataset_name == "hf":
        return sample_hf(dataset_path, tokenizer, num_prompts, seed, **options)
    return sample_custom(dataset_path, tokenizer, num_prompts, **options)


def _sharegpt(
    path: str | Path, tokenizer: Tokenizer, num_prompts: int | None, seed: int, options: dict[str, Any]
) -> list[SampleRequest]:
    """First turns, or whole conversations with ``multi_turn``; the multi-turn options need it."""
    if options.pop("multi_turn", False):
        if not options.pop("shuffle", True):
            raise ConfigError("--disable-shuffle applies to first turns: whole conversations are sampled by seed")
        return sample_conversations(path, tokenizer, num_prompts, seed, **options)
    for name, flag in (("max_turns", "--max-turns"), ("system_prompt_len", "--system-prompt-len")):
        if options.pop(name, 0):
            raise ConfigError(f"{flag} applies to whole conversations only: add --multi-turn")
    return sample_sharegpt(path, tokenizer, num_prompts, seed, **options)
