"""The request-shaping options, as today's ``vllm bench serve`` names them (sampling, extra body, headers,
request ids) and the ``--vllm-compat`` switch: part of the one option table (:mod:`llmload.options.table`);
what they do: :mod:`llmload.core.shaping`."""

from __future__ import annotations

import llmload.options.argtypes as argtypes
from llmload.options.spec import Option, Scope

BOTH = Scope.BOTH

REQUEST_OPTIONS = (
    Option(("--temperature",), "temperature", BOTH, "request",
           "sampling temperature (default: not sent, the server's default, as vllm bench serve; --vllm-compat 0.7: "
           "0)", type=float),
    Option(("--top-p",), "top_p", BOTH, "request", "nucleus sampling (default: not sent)", type=float),
    Option(("--top-k",), "top_k", BOTH, "request", "top-k sampling (default: not sent)", type=int),
    Option(("--min-p",), "min_p", BOTH, "request", "min-p sampling (default: not sent)", type=float),
    Option(("--frequency-penalty",), "frequency_penalty", BOTH, "request", "(default: not sent)", type=float),
    Option(("--presence-penalty",), "presence_penalty", BOTH, "request", "(default: not sent)", type=float),
    Option(("--repetition-penalty",), "repetition_penalty", BOTH, "request", "(default: not sent)", type=float),
    Option(("--logprobs",), "logprobs", BOTH, "request", "log probabilities per token (completions; default: not "
           "sent)", type=int),
    Option(("--extra-body",), "extra_body", BOTH, "request",
           "a JSON object merged into every request body, over everything else, e.g. '{\"top_p\": 0.9}'",
           metavar="JSON"),
    Option(("--response-format",), "response_format", BOTH, "request",
           "structured output: json_object, or json_schema:FILE (a JSON Schema, or OpenAI's {name, schema, strict}); "
           "sent as OpenAI's response_format on chat and completions, every answer checked: it parses, it "
           "matches the schema (docs/metrics.md, \"Structured output\")", metavar="json_object|json_schema:FILE"),
    Option(("--tools",), "tools", BOTH, "request",
           "OpenAI tool definitions (a JSON list) sent in every chat request; answers' tool calls are counted, and "
           "a --multi-turn replay answers them with simulated tool results (docs/conversations.md, \"Tool calls\")",
           metavar="FILE"),
    Option(("--tool-choice",), "tool_choice", BOTH, "request",
           "with --tools: auto, required, none, or a tool's name (default: the server's, auto)",
           metavar="auto|required|none|NAME"),
    Option(("--tool-latency",), "tool_latency", BOTH, "request",
           "--multi-turn with --tools: how long a tool takes before its result goes back: SECONDS, exp:MEAN or "
           "uniform:LOW:HIGH (default: 0)", metavar="SPEC"),
    Option(("--max-tool-rounds",), "max_tool_rounds", BOTH, "request",
           "--multi-turn with --tools: most follow-up requests after tool results in one turn (default: "
           "%(default)s)", type=argtypes.positive_int, default=4, metavar="N"),
    Option(("--header",), "header", BOTH, "request", "extra request headers, e.g. X-Tenant=a (the request id "
           "header wins over one of its name)", nargs="*", metavar="KEY=VALUE", web_ui=False),
    Option(("--request-id-prefix",), "request_id_prefix", BOTH, "request",
           "prefix of every request's X-Request-Id (default: none: the record's request id as it is)"),
    Option(("--insecure",), "insecure", BOTH, "request",
           "https without checking the server's certificate or host name (a self-signed test server)",
           action="store_true", default=False),
    Option(("--vllm-compat",), "vllm_compat", BOTH, "request",
           "0.7: the meanings of vLLM 0.7's benchmark_serving.py (temperature 0 sent, total_input_tokens the "
           "dataset's sum, max_concurrent_requests per 1-second bucket) for comparison with old results",
           choices=("0.7",)),
)

#: ``vllm bench serve`` flags that drive vLLM itself, not a load test: refused with one line (exit 2), never
#: silently ignored (docs/vllm-compat.md)
VLLM_INTERNAL_FLAGS = {
    "--profile": "starts vLLM's torch profiler on the server (POST /start_profile): use vLLM's own tooling",
    "--plot-timeline": "vLLM's HTML timeline: llmload report draws the per-request timeline from the records",
    "--timeline-itl-thresholds": "belongs to --plot-timeline (see llmload report)",
    "--plot-dataset-stats": "vLLM's dataset plot: llmload report has the input and output lengths figure",
    "--tokenizer-mode": "vLLM's tokenizer loader modes (mistral, deepseek_v32...): llmload loads tokenizers with "
                        "transformers (--tokenizer, --trust-remote-code)",
    "--use-beam-search": "vllm bench serve parses it and never uses it",
    "--enable-multimodal-chat": "multimodal requests are not supported",
}
