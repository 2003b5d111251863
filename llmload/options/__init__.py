"""llmload's options, declared once (:data:`OPTIONS`, in :mod:`llmload.options.table`) and generated into both
ways in: ``llmload bench``'s argparse flags (:func:`add_bench_arguments`) and Locust's parser for
``locust -f`` (:func:`add_options`, which ``llmload.plugin`` registers on ``events.init_command_line_parser``:
``LLMLOAD_*`` environment variables, the web UI's start form, secrets). ``docs/options.md`` lists them.

What the values mean, for both: :func:`api_key`, :func:`prompt_count`, :func:`normalize_options` (after the web
form).
"""

from __future__ import annotations

from llmload.common.choices import ARRIVALS, RAMP_UP_STRATEGIES, RECORDS_FORMATS, TRACE_FORMATS, TTFT_RULES
from llmload.options.build import add_bench_arguments, add_locust_options, add_options, add_table_arguments
from llmload.options.spec import ENV_PREFIX, GROUPS, Option, Scope
from llmload.options.table import DEFAULT_PROMPTS, OPTIONS, SIM_DEFAULT_PROMPTS, option, options_for
from llmload.options.values import (
    API_KEY_ENV,
    CLUSTER_TOKEN_ENV,
    api_key,
    cluster_token,
    normalize_options,
    option_value,
    prompt_count,
)

__all__ = [
    "API_KEY_ENV",
    "ARRIVALS",
    "CLUSTER_TOKEN_ENV",
    "DEFAULT_PROMPTS",
    "ENV_PREFIX",
    "GROUPS",
    "OPTIONS",
    "RAMP_UP_STRATEGIES",
    "RECORDS_FORMATS",
    "SIM_DEFAULT_PROMPTS",
    "TRACE_FORMATS",
    "TTFT_RULES",
    "Option",
    "Scope",
    "add_bench_arguments",
    "add_locust_options",
    "add_options",
    "add_table_arguments",
    "api_key",
    "cluster_token",
    "normalize_options",
    "option",
    "option_value",
    "options_for",
    "prompt_count",
]
