"""The dataset flags of today's ``vllm bench serve`` that are not a dataset's own lengths (``--disable-shuffle``,
``--no-oversample``, ``--no-stream``, ``--skip-chat-template``, ``--chat-template-kwargs``,
``--random-batch-size``, ``--skip-tokenizer-init``) and those of ``random-mm`` and ``random-rerank``: part of the one option table
(:mod:`llmload.options.table`); checked by :func:`llmload.core.workload.check_dataset_flags`
(docs/vllm-compat.md)."""

from __future__ import annotations

import llmload.options.argtypes as argtypes
from llmload.options.spec import Option, Scope

BOTH = Scope.BOTH

VLLM_DATASET_OPTIONS = (
    Option(("--sonnet-input-len",), "sonnet_input_len", BOTH, "workload",
           "sonnet: prompt tokens at most (default: %(default)s)", type=argtypes.positive_int, default=550),
    Option(("--sonnet-output-len",), "sonnet_output_len", BOTH, "workload",
           "sonnet: output tokens (default: %(default)s; --output-len does not map to it, as in vLLM)",
           type=argtypes.positive_int, default=150),
    Option(("--sonnet-prefix-len",), "sonnet_prefix_len", BOTH, "workload",
           "sonnet: tokens of the lines every prompt shares (default: %(default)s)", type=argtypes.non_negative_int,
           default=200),
    Option(("--hf-subset",), "hf_subset", BOTH, "workload", "hf: the sub-directory of the dataset to read"),
    Option(("--hf-split",), "hf_split", BOTH, "workload",
           "hf: read the files whose name holds this split (default: train, else every file)"),
    Option(("--hf-name",), "hf_name", BOTH, "workload",
           "hf: the dataset's hub id, when --dataset-path is a local copy (picks vLLM's prompt rule for it)"),
    Option(("--hf-output-len",), "hf_output_len", BOTH, "workload",
           "hf: output tokens (default: the known dataset's, else 256)", type=argtypes.positive_int),
    Option(("--spec-bench-output-len",), "spec_bench_output_len", BOTH, "workload",
           "spec_bench: output tokens (default: %(default)s)", type=argtypes.positive_int, default=256),
    Option(("--spec-bench-category",), "spec_bench_category", BOTH, "workload",
           "spec_bench: only this category's rows (default: all)"),
    Option(("--disable-shuffle",), "disable_shuffle", BOTH, "workload",
           "keep the dataset file's order (sharegpt first turns, prefix_repetition's groups) instead of the seed's "
           "shuffle", action="store_true", default=False),
    Option(("--no-oversample",), "no_oversample", BOTH, "workload",
           "when the dataset gives fewer prompts than --num-prompts, send those (default: fill up with repeats "
           "drawn by --seed, as vllm bench serve)", action="store_true", default=False),
    Option(("--no-stream",), "no_stream", BOTH, "workload",
           "vllm bench serve's: load a Hugging Face dataset whole (llmload reads local files whole always)",
           action="store_true", default=False),
    Option(("--skip-chat-template",), "skip_chat_template", BOTH, "workload",
           "vllm bench serve's: send prompts without a client-side chat template (llmload never applies one: "
           "the server templates chat requests)", action="store_true", default=False),
    Option(("--chat-template-kwargs",), "chat_template_kwargs", BOTH, "workload",
           "vllm bench serve's client-side template arguments: refused (llmload applies no template; send them "
           "to the server with --extra-body '{\"chat_template_kwargs\": {...}}')", metavar="JSON", web_ui=False),
    Option(("--random-batch-size",), "random_batch_size", BOTH, "workload",
           "pooling backends: random prompts per embeddings request, documents per rerank request (default: "
           "%(default)s)", type=argtypes.positive_int, default=1),
    Option(("--no-reranker",), "no_reranker", BOTH, "workload",
           "random-rerank: the model behind /rerank is an embedding model, not a cross-encoder: query and "
           "documents take --random-input-len each, the query fills one --random-batch-size slot",
           action="store_true", default=False),
    Option(("--random-mm-base-items-per-request",), "random_mm_base_items_per_request", BOTH, "workload",
           "random-mm: images per request, the middle of the range (default: %(default)s)",
           type=argtypes.non_negative_int, default=1),
    Option(("--random-mm-num-mm-items-range-ratio",), "random_mm_num_mm_items_range_ratio", BOTH, "workload",
           "random-mm: images per request are uniform in [floor(n(1-r)), ceil(n(1+r))], r in [0, 1] (default: "
           "%(default)s)", type=argtypes.number, default=0.0),
    Option(("--random-mm-limit-mm-per-prompt",), "random_mm_limit_mm_per_prompt", BOTH, "workload",
           'random-mm: JSON, the most items of each modality a request carries (default: {"image": 255, '
           '"video": 1})', type=argtypes.mm_limits, metavar="JSON"),
    Option(("--random-mm-bucket-config",), "random_mm_bucket_config", BOTH, "workload",
           "random-mm: a Python dict of (height, width, frames) to probability, adding up to 1 (default: "
           "{(256, 256, 1): 0.5, (720, 1280, 1): 0.5, (720, 1280, 16): 0.0}; frames > 1 is a video: not yet)",
           type=argtypes.mm_buckets, metavar="DICT"),
    Option(("--skip-tokenizer-init",), "skip_tokenizer_init", BOTH, "workload",
           "vllm bench serve's: no model tokenizer (custom dataset only): lengths are counted with the builtin "
           "tokenizer and input tokens come from the server's usage", action="store_true", default=False),
)
