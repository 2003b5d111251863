"""llmload's options for ``locust -f locustfiles/...``: command line, ``LLMLOAD_*`` environment variables and
the web UI's start form (Locust's ``init_command_line_parser``)."""

from __future__ import annotations

import os
from typing import Any

from llmload.backends import BACKENDS
from llmload.datasets import DATASET_NAMES


def add_options(parser: Any) -> None:
    """Add llmload's options to Locust's (configargparse) parser."""
    # Locust's own add_argument (not a group's) knows is_secret and puts options in the web UI's form.
    group = parser
    group.add_argument("--backend", choices=BACKENDS, default="vllm", env_var="LLMLOAD_BACKEND",
                       help="wire dialect (default: vllm)")
    group.add_argument("--endpoint", default="", env_var="LLMLOAD_ENDPOINT",
                       help="request path (default: the backend's, e.g. /v1/completions)")
    group.add_argument("--model", default="", env_var="LLMLOAD_MODEL",
                       help="model name sent in requests (default: the first one at /v1/models)")
    group.add_argument("--dataset-name", choices=DATASET_NAMES, default="sharegpt", env_var="LLMLOAD_DATASET_NAME")
    group.add_argument("--dataset-path", default="", env_var="LLMLOAD_DATASET_PATH",
                       help="dataset file (default: the shipped synthetic ShareGPT sample)")
    group.add_argument("--num-prompts", type=int, default=1000, env_var="LLMLOAD_NUM_PROMPTS",
                       help="prompts sampled from the dataset; users cycle through them")
    group.add_argument("--tokenizer", default="", env_var="LLMLOAD_TOKENIZER",
                       help="tokenizer name or dir ('builtin' ships with llmload; default: the model's)")
    group.add_argument("--seed", type=int, default=0, env_var="LLMLOAD_SEED")
    group.add_argument("--max-tokens", type=int, default=0, env_var="LLMLOAD_MAX_TOKENS",
                       help="fix every output length (0: the dataset's reference length)")
    group.add_argument("--ignore-eos", action="store_true", default=False, env_var="LLMLOAD_IGNORE_EOS",
                       help="ask the server to ignore EOS")
    group.add_argument("--ttft-rule", choices=("content", "vllm"), default="content", env_var="LLMLOAD_TTFT_RULE")
    group.add_argument("--api-key", default="", env_var="LLMLOAD_API_KEY", is_secret=True,
                       help="bearer token (default: $OPENAI_API_KEY); never printed")
    group.add_argument("--arrival", choices=("closed", "open"), default="closed", env_var="LLMLOAD_ARRIVAL",
                       help="closed: each user sends, waits for the stream, repeats; open: Poisson arrivals at "
                            "--request-rate for the whole test, independent of responses")
    group.add_argument("--request-rate", type=float, default=1.0, env_var="LLMLOAD_REQUEST_RATE",
                       help="open loop: requests/s over all users and workers (default 1)")
    group.add_argument("--burstiness", type=float, default=1.0, env_var="LLMLOAD_BURSTINESS",
                       help="open loop: gamma shape, 1 = Poisson")
    group.add_argument("--max-concurrency", type=int, default=0, env_var="LLMLOAD_MAX_CONCURRENCY",
                       help="open loop: most requests in flight per user (0: unbounded)")
    group.add_argument("--think-time", default="", env_var="LLMLOAD_THINK_TIME",
                       help="closed loop: pause between requests, fixed:SECONDS or exp:MEAN_SECONDS")
    group.add_argument("--user-shape", default="", env_var="LLMLOAD_USER_SHAPE",
                       help="closed loop: user count over time, e.g. 'ramp:1->50;duration=120' (docs/arrivals.md)")
    group.add_argument("--llm-records", default="", env_var="LLMLOAD_RECORDS",
                       help="write one JSON line per request to this file at the end")


def api_key(options: Any) -> str | None:
    return getattr(options, "api_key", "") or os.environ.get("OPENAI_API_KEY") or None

