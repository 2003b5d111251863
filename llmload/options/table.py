"""Every llmload option, once: ``llmload bench``'s flags and ``locust -f``'s options are both generated from
:data:`OPTIONS` (:mod:`llmload.options.build`), and ``docs/options.md`` is written from it too.

Order matters: within a group it is the order of ``llmload bench --help``.
"""

from __future__ import annotations

import math

import llmload.options.argtypes as argtypes
from llmload.client.backends import BACKENDS
from llmload.common.choices import (
    ARRIVALS,
    CONTEXT_POLICIES,
    HISTORY_MODES,
    RAMP_UP_STRATEGIES,
    RECORDS_FORMATS,
    TRACE_FORMATS,
    TTFT_RULES,
)
from llmload.datasets import DATASET_NAMES
from llmload.options.energy_options import ENERGY_OPTIONS
from llmload.options.request_options import REQUEST_OPTIONS
from llmload.options.run_options import RUN_OPTIONS
from llmload.options.spec import Option, Scope
from llmload.options.vllm_dataset_options import VLLM_DATASET_OPTIONS

#: the number of prompts without ``--num-prompts``, and against the built-in simulator
DEFAULT_PROMPTS = 1000
SIM_DEFAULT_PROMPTS = 200

BENCH, LOCUST, BOTH = Scope.BENCH, Scope.LOCUST, Scope.BOTH

_TARGET = (
    Option(("--backend",), "backend", BOTH, "target", "wire dialect (default: %(default)s)", default="vllm",
           choices=BACKENDS),
    Option(("--base-url",), "base_url", BENCH, "target",
           "server base URL, e.g. http://127.0.0.1:8000 (http://user:password@host sends Basic auth; the "
           "password is never shown)"),
    Option(("--host",), "host", BENCH, "target", "server host (default 127.0.0.1 when --port is given)"),
    Option(("--port",), "port", BENCH, "target", "server port (default 8000 when --host is given)",
           type=argtypes.port),
    Option(("--endpoint",), "endpoint", BOTH, "target", "request path (default: the backend's, e.g. /v1/completions)"),
    Option(("--model",), "model", BOTH, "target",
           "model name (default: the first one the server lists at /v1/models); several, comma-separated, spread "
           "the requests over them (--model-selection)"),
    Option(("--model-selection",), "model_selection", BOTH, "target",
           "with --model a,b,c: which model each request names (default: round-robin; weighted with "
           "--model-weights)", choices=("round-robin", "random", "weighted")),
    Option(("--model-weights",), "model_weights", BOTH, "target",
           "with --model a,b,c: relative weights, one per model, e.g. 3,1,1", metavar="W1,W2,..."),
    Option(("--lora-modules",), "lora_modules", BOTH, "target",
           "LoRA adapters: each request names one as its model (vLLM bench serve's meaning)", nargs="+",
           metavar="NAME"),
    Option(("--lora-assignment",), "lora_assignment", BOTH, "target",
           "with --lora-modules: random (default) or round-robin", choices=("random", "round-robin")),
    Option(("--served-model-name",), "served_model_name", BOTH, "target",
           "model name sent in requests, if it differs from --model"),
    Option(("--api-key-file",), "api_key_file", BOTH, "target", "file holding the API key (else $OPENAI_API_KEY)",
           locust_help="file holding the API key (else $LLMLOAD_API_KEY, else $OPENAI_API_KEY)", web_ui=False),
    Option(("--sim-args",), "sim_args", BENCH, "target",
           "extra 'llmload sim' flags for the built-in simulator, e.g. \"--profile tiny\"", default=""),
)

_WORKLOAD = (
    Option(("--dataset-name",), "dataset_name", BOTH, "workload", "(default: %(default)s)", default="sharegpt",
           choices=DATASET_NAMES),
    Option(("--dataset-path",), "dataset_path", BOTH, "workload",
           "dataset file (default for sharegpt: the shipped synthetic sample)"),
    Option(("--num-prompts",), "num_prompts", BOTH, "workload",
           f"number of requests (default {DEFAULT_PROMPTS}; {SIM_DEFAULT_PROMPTS} against the built-in simulator)",
           type=argtypes.positive_int,
           locust_help=f"requests in the run (default {DEFAULT_PROMPTS}; {SIM_DEFAULT_PROMPTS} against llmload sim); "
                       "headless runs end once all are answered, the web UI cycles through them"),
    Option(("--tokenizer",), "tokenizer", BOTH, "workload",
           "tokenizer name or local dir ('builtin': the shipped one; default: the model's own, or builtin against "
           "the simulator)"),
    # off the web form: a field anyone who reaches the UI could tick to run a model repository's code
    Option(("--trust-remote-code",), "trust_remote_code", BOTH, "workload", action="store_true", default=False,
           web_ui=False),
    Option(("--seed",), "seed", BOTH, "workload", type=argtypes.integer, default=0),
    Option(("--sharegpt-output-len",), "sharegpt_output_len", BOTH, "workload",
           "fix every output length (with --multi-turn: every turn's max_tokens)", type=argtypes.positive_int),
    Option(("--input-len",), "input_len", BOTH, "workload",
           "vllm bench serve's: the random dataset's --random-input-len", type=argtypes.positive_int),
    Option(("--output-len",), "output_len", BOTH, "workload",
           "vllm bench serve's: the output length of every dataset that has one (--random-output-len, "
           "--sharegpt-output-len, --custom-output-len, --prefix-repetition-output-len)",
           type=argtypes.positive_int),
    Option(("--random-input-len",), "random_input_len", BOTH, "workload", type=argtypes.positive_int, default=1024),
    Option(("--random-output-len",), "random_output_len", BOTH, "workload", type=argtypes.positive_int,
           default=128),
    Option(("--random-range-ratio",), "random_range_ratio", BOTH, "workload",
           'in [0, 1), or {"input": R, "output": R} (default: %(default)s)', type=argtypes.range_ratios,
           default=0.0),
    Option(("--random-prefix-len",), "random_prefix_len", BOTH, "workload", type=argtypes.non_negative_int,
           default=0),
    Option(("--prefix-repetition-prefix-len",), "prefix_repetition_prefix_len", BOTH, "workload",
           "prefix_repetition: tokens of each shared prefix (default: %(default)s)", type=argtypes.positive_int,
           default=256),
    Option(("--prefix-repetition-suffix-len",), "prefix_repetition_suffix_len", BOTH, "workload",
           "prefix_repetition: tokens of each prompt's own suffix (default: %(default)s)",
           type=argtypes.positive_int, default=256),
    Option(("--prefix-repetition-num-prefixes",), "prefix_repetition_num_prefixes", BOTH, "workload",
           "prefix_repetition: distinct prefixes, each shared by num-prompts / N prompts (default: %(default)s)",
           type=argtypes.positive_int, default=10),
    Option(("--prefix-repetition-output-len",), "prefix_repetition_output_len", BOTH, "workload",
           "prefix_repetition: output tokens (default: %(default)s)", type=argtypes.positive_int, default=128),
    Option(("--custom-output-len",), "custom_output_len", BOTH, "workload",
           "output length for custom JSONL rows without output_len", type=argtypes.positive_int, default=256),
    Option(("--ignore-eos",), "ignore_eos", BOTH, "workload", "ask the server to ignore EOS", action="store_true",
           default=False),
)

_TRACE = (
    Option(("--trace-format",), "trace_format", BOTH, "trace", "(default: detected from the file's header)",
           choices=TRACE_FORMATS),
    Option(("--time-scale",), "time_scale", BOTH, "trace",
           "replay speed; 2 = twice as fast (traces: arrivals; weka_trace: every recorded pause)",
           type=argtypes.positive, default=1.0),
    Option(("--trace-start",), "trace_start", BOTH, "trace", "window start, seconds into the trace",
           type=argtypes.seconds, default=0.0),
    Option(("--trace-duration",), "trace_duration", BOTH, "trace",
           "window length in trace seconds (default: to the end)", type=argtypes.positive_seconds),
    Option(("--trace-prompts",), "trace_prompts", BOTH, "trace",
           "take prompt text from this dataset, trimmed/padded to each length (default: synthetic)",
           metavar="SHAREGPT_FILE"),
    Option(("--trace-block-size", "--timed-trace-chunk-hash-size"), "trace_block_size", BOTH, "trace",
           "Mooncake traces: tokens per hash id; equal ids become identical blocks of this many tokens "
           "(default: %(default)s)", type=argtypes.positive_int, default=512, metavar="TOKENS"),
    Option(("--timed-trace-sec-multiplier",), "timed_trace_sec_multiplier", BOTH, "trace",
           "Mooncake traces: seconds per timestamp unit (default: 0.001, Mooncake's milliseconds)",
           type=argtypes.positive, metavar="X"),
    Option(("--timed-trace-label-timestamp",), "timed_trace_label_timestamp", BOTH, "trace",
           "Mooncake traces: the key of the arrival time (default: timestamp)", metavar="KEY"),
    Option(("--timed-trace-label-input-length",), "timed_trace_label_input_length", BOTH, "trace",
           "Mooncake traces: the key of the prompt length (default: input_length)", metavar="KEY"),
    Option(("--timed-trace-label-output-length",), "timed_trace_label_output_length", BOTH, "trace",
           "Mooncake traces: the key of the output length (default: output_length)", metavar="KEY"),
    Option(("--timed-trace-label-hash-ids",), "timed_trace_label_hash_ids", BOTH, "trace",
           "Mooncake traces: the key of the prefix block ids (default: hash_ids)", metavar="KEY"),
)

_SESSIONS = (
    Option(("--max-idle",), "max_idle", BOTH, "sessions",
           "agentic sessions: cap on each pause (think time, tool time, the wait for a sub-agent's spawn), in "
           "seconds after --time-scale (default: %(default)s)", type=argtypes.seconds, default=60.0,
           metavar="SECONDS"),
    Option(("--stream-all",), "stream_all", BOTH, "sessions",
           "agentic sessions: stream every call (default: the trace's n calls go out non-streamed, its s calls "
           "streamed)", action="store_true", default=False),
)

_CONVERSATIONS = (
    Option(("--multi-turn",), "multi_turn", BOTH, "conversations",
           "replay whole ShareGPT conversations turn by turn, each turn carrying the history so far (chat "
           "backends; --num-prompts counts conversations, the same ones first-turn sampling picks)",
           action="store_true", default=False),
    Option(("--max-turns",), "max_turns", BOTH, "conversations", "keep each conversation's first N user turns",
           type=argtypes.positive_int, metavar="N"),
    Option(("--history",), "history", BOTH, "conversations",
           "recorded: append the dataset's reply (prompts identical run to run); live: the server's reply "
           "(default: %(default)s)", default="recorded", choices=HISTORY_MODES),
    Option(("--max-context-tokens",), "max_context_tokens", BOTH, "conversations",
           "cap on a turn's prompt (the sum of its messages' tokens) plus max_tokens (default: none)",
           type=argtypes.positive_int, metavar="TOKENS"),
    Option(("--context-policy",), "context_policy", BOTH, "conversations",
           "over --max-context-tokens: end the conversation, or truncate its oldest turns (default: %(default)s)",
           default="end", choices=CONTEXT_POLICIES),
    Option(("--turn-think-time",), "turn_think_time", BOTH, "conversations",
           "pause between a turn's end and the next turn: fixed:S, exp:MEAN, uniform:LOW,HIGH or "
           "lognormal:MEDIAN,SIGMA (default: none)", metavar="SPEC"),
    Option(("--reading-speed",), "reading_speed", BOTH, "conversations",
           "add reading time to each pause: reply tokens / this many tokens per second (default: off)",
           type=argtypes.positive, metavar="TOKENS_PER_S"),
    Option(("--session-header",), "session_header", BOTH, "conversations",
           "header carrying each conversation's id, for session-affine routers; '' sends none "
           "(default: %(default)s)", default="X-Session-ID", metavar="NAME"),
    Option(("--system-prompt-len",), "system_prompt_len", BOTH, "conversations",
           "a shared system prompt of N tokens before every conversation (the prefix a prefix cache reuses)",
           type=argtypes.positive_int, metavar="N"),
    Option(("--keep-reasoning",), "keep_reasoning", BOTH, "conversations",
           "--history live: put the reply's reasoning back into the history (default: left out, as chat "
           "templates do)", action="store_true", default=False),
)

_ARRIVALS = (
    Option(("--request-rate",), "request_rate", BOTH, "arrivals",
           "requests/s, Poisson (gamma with --burstiness) open loop; inf sends all at once",
           type=argtypes.rate, default=math.inf,
           locust_help="--arrival open: requests/s for the whole test (all users and workers), Poisson (gamma "
                       "with --burstiness); default inf: no pacing"),
    Option(("--burstiness",), "burstiness", BOTH, "arrivals", "gamma shape; 1 = Poisson, < 1 burstier",
           type=argtypes.positive, default=1.0),
    Option(("--max-concurrency",), "max_concurrency", BOTH, "arrivals", "cap on requests in flight",
           type=argtypes.positive_int,
           locust_help="--arrival open: most requests in flight over the whole test, all workers together "
                       "(default: no cap); closed loop: -u is the concurrency"),
    Option(("--constant-rate",), "constant_rate", BOTH, "arrivals",
           "send exactly 1/--request-rate apart instead of Poisson/gamma", action="store_true", default=False),
    Option(("--rate-shape",), "rate_shape", BOTH, "arrivals",
           "open-loop rate over time, e.g. 'steps:5@0,10@30;duration=60', 'sine:mean=10,amplitude=5,period=60;"
           "duration=300' (docs/arrivals.md)", metavar="SPEC|FILE"),
    Option(("--think-time",), "think_time", BOTH, "arrivals",
           "closed loop: --max-concurrency users each send, wait for the stream, think, repeat",
           metavar="fixed:S|exp:S",
           locust_help="closed loop: each user's pause between requests, fixed:SECONDS or exp:MEAN_SECONDS"),
    Option(("--cancel-rate",), "cancel_rate", BOTH, "arrivals",
           "share of requests the client cancels mid-answer, drawn per request from --seed (a cancelled request "
           "is its own outcome, left out of the latency statistics)", type=argtypes.fraction, metavar="P"),
    Option(("--cancel-after",), "cancel_after", BOTH, "arrivals",
           "when a cancelled request is cancelled: SECONDS after it went out, exp:MEAN, uniform:LOW:HIGH, or "
           "tokens:N (after N stream events; tokens:uniform:10:200)", metavar="SPEC"),
    Option(("--ramp-up-strategy",), "ramp_up_strategy", BOTH, "arrivals", choices=RAMP_UP_STRATEGIES),
    Option(("--ramp-up-start-rps",), "ramp_up_start_rps", BOTH, "arrivals", type=argtypes.non_negative,
           metavar="RPS"),
    Option(("--ramp-up-end-rps",), "ramp_up_end_rps", BOTH, "arrivals", type=argtypes.non_negative,
           metavar="RPS"),
)

# the list-valued ones stay off the web form: Locust's form hands lists back as lists of strings
_METRICS = (
    Option(("--goodput",), "goodput", BOTH, "metrics",
           "SLOs for goodput, e.g. ttft:500 tpot:50 (metrics ttft, tpot, e2el); CLASS:METRIC:MS for one user class, "
           "model=NAME:METRIC:MS for one model or adapter", nargs="+", metavar="METRIC:MS",
           web_ui=False),
    Option(("--percentile-metrics",), "percentile_metrics", BOTH, "metrics",
           "metrics reported with percentiles: ttft,tpot,itl,e2el (default: %(default)s)",
           type=argtypes.metric_names, default="ttft,tpot,itl", web_ui=False),
    Option(("--metric-percentiles",), "metric_percentiles", BOTH, "metrics", "e.g. 25,50,99 (default: %(default)s)",
           type=argtypes.percentiles, default="99", web_ui=False),
    Option(("--ttft-rule",), "ttft_rule", BOTH, "metrics",
           "content: first event with text (default); vllm: first event with choices", default="content",
           choices=TTFT_RULES),
    Option(("--slice-duration",), "slice_duration", BOTH, "metrics",
           "also report TTFT, ITL, TPOT, E2E, throughput and goodput per slice of this many seconds of the run "
           "(result JSON 'slices', the report's figure over the run)", type=argtypes.positive_seconds,
           metavar="SECONDS"),
    Option(("--gpus",), "gpus", BOTH, "metrics",
           "GPUs the server runs on: throughput is also reported per GPU (default: %(default)s)",
           type=argtypes.positive_int, default=1),
    Option(("--gpu-type",), "gpu_type", BOTH, "metrics", "the GPUs' name, a label for results, e.g. H100",
           metavar="NAME"),
    Option(("--gpu-hour-cost",), "gpu_hour_cost", BOTH, "metrics",
           "USD per GPU-hour: report the cost per million output (and total) tokens", type=argtypes.non_negative,
           metavar="USD"),
)

_TIMEOUTS = (
    Option(("--connect-timeout",), "connect_timeout", BOTH, "timeouts",
           "seconds to open a connection (default: %(default)s)", type=argtypes.positive_seconds, default=30.0),
    Option(("--read-timeout",), "read_timeout", BOTH, "timeouts",
           "a request fails when no data arrives for this many seconds, queueing before the first token included "
           "(default: %(default)s)", type=argtypes.positive_seconds, default=600.0),
    Option(("--request-timeout",), "request_timeout", BOTH, "timeouts",
           "a request fails when it takes longer than this in all (default: no limit)",
           type=argtypes.positive_seconds),
    Option(("--stop-timeout",), "stop_timeout", BENCH, "timeouts",
           "when stopped early (Ctrl-C, SIGTERM), seconds requests in flight get before they are cut off "
           "(default: %(default)s)", type=argtypes.seconds, default=10.0),
    Option(("--no-initial-test",), "no_initial_test", BENCH, "timeouts",
           "skip the single test request sent before the run", action="store_true", default=False),
)

_DISTRIBUTED = (
    Option(("--processes",), "processes", BENCH, "distributed",
           "run N local worker processes under an in-process master; auto: one per core this process may use, "
           "less one for the master when there are more than two", type=argtypes.process_count, metavar="N|auto"),
    Option(("--master",), "master", BENCH, "distributed", "run as master; workers connect to it",
           action="store_true", default=False),
    Option(("--expect-workers",), "expect_workers", BENCH, "distributed", "with --master: workers to wait for",
           type=argtypes.positive_int),
    Option(("--expect-workers-max-wait",), "expect_workers_max_wait", BENCH, "distributed",
           "seconds (default: %(default)s)", type=argtypes.positive_seconds, default=120.0),
    Option(("--master-bind-host",), "master_bind_host", BENCH, "distributed",
           "interface the master listens on, e.g. 10.0.0.5 (default: all)", default="*"),
    Option(("--master-bind-port",), "master_bind_port", BENCH, "distributed", "(default: %(default)s)",
           type=argtypes.port, default=5557),
    Option(("--worker",), "worker", BENCH, "distributed", "run as a worker: every run option comes from the master",
           action="store_true", default=False),
    Option(("--master-host",), "master_host", BENCH, "distributed", "with --worker: the master's address",
           default="127.0.0.1"),
    Option(("--master-port",), "master_port", BENCH, "distributed", "with --worker: the master's port",
           type=argtypes.port, default=5557),
    Option(("--cluster-token-file",), "cluster_token_file", BOTH, "distributed",
           "file ('-': stdin, llmload bench only) holding the token workers must prove they know before they get a "
           "job (or the API key) and before their records count (default: $LLMLOAD_CLUSTER_TOKEN; none: every "
           "worker is trusted)", metavar="FILE"),
)

_SERVER = (
    Option(("--server-metrics-url",), "server_metrics_url", BOTH, "server",
           "the server's Prometheus endpoint, scraped during the run off the streaming path (default: "
           "<base-url>/metrics when it answers)", metavar="URL"),
    Option(("--server-metrics-interval",), "server_metrics_interval", BOTH, "server",
           "seconds between two scrapes (default: %(default)s)", type=argtypes.positive_seconds, default=1.0),
    Option(("--no-server-metrics",), "no_server_metrics", BOTH, "server", "do not scrape the server's metrics",
           action="store_true", default=False),
    Option(("--stop-on-saturation",), "stop_on_saturation", BOTH, "server",
           "open loop: end the run early once the server is saturated (requests pile up while throughput stays "
           "flat); the result says so", action="store_true", default=False),
    Option(("--saturation-window",), "saturation_window", BOTH, "server",
           "seconds per window of the saturation test; it needs 3 windows in a row (default: %(default)s)",
           type=argtypes.positive_seconds, default=5.0),
)

_OUTPUT = (
    Option(("--save-result",), "save_result", BENCH, "output", "write the result JSON and the records file",
           action="store_true", default=False),
    Option(("--save-detailed",), "save_detailed", BENCH, "output",
           "also put per-request lists (ttfts, itls, ...) into the result JSON", action="store_true", default=False),
    Option(("--append-result",), "append_result", BENCH, "output",
           "append the result as one JSON line to the result file (vllm bench serve's: repeated runs make a JSON "
           "Lines file; wins over --save-result's rewrite)", action="store_true", default=False),
    Option(("--result-dir",), "result_dir", BENCH, "output", "(default: current directory)", default="."),
    Option(("--result-filename",), "result_filename", BENCH, "output",
           "(default: vLLM's {label}-{rate}qps-{model}-{date}.json)"),
    Option(("--records-format",), "records_format", BENCH, "output", default="jsonl", choices=RECORDS_FORMATS),
    Option(("--metadata",), "metadata", BENCH, "output", "extra keys for the result JSON", nargs="*",
           metavar="KEY=VALUE"),
    Option(("--label",), "label", BENCH, "output", "label in the result file name (default: the backend)"),
    Option(("--disable-tqdm",), "disable_tqdm", BENCH, "output", "no progress line on stderr", action="store_true",
           default=False),
    # off the web form: the port is bound at start-up, before any form is filled in
    Option(("--prometheus-port",), "prometheus_port", BOTH, "output",
           "serve llmload's live metrics at http://HOST:PORT/metrics for Prometheus (0: a free port, logged; "
           "default: off; docs/observability.md)", type=argtypes.port_or_zero, metavar="PORT", web_ui=False),
    Option(("--prometheus-host",), "prometheus_host", BOTH, "output",
           "interface --prometheus-port listens on (default: %(default)s, this host only; 0.0.0.0 for a scraper "
           "on another host or pod)", default="127.0.0.1", metavar="HOST", web_ui=False),
    Option(("--prometheus-linger",), "prometheus_linger", BOTH, "output",
           "after the run, with every request counted: keep /metrics up until it is scraped once more, at most "
           "this many seconds, before the summary (default: %(default)s)", type=argtypes.seconds, default=0.0,
           metavar="SECONDS", web_ui=False),
)

_GATES = (
    Option(("--fail-on-error-rate",), "fail_on_error_rate", BENCH, "gates",
           "fail when more than this share of the requests sent failed, e.g. 0.01", type=argtypes.fraction,
           metavar="SHARE"),
    Option(("--fail-on-slo",), "fail_on_slo", BENCH, "gates",
           "fail when fewer than SHARE (default 1: all) of the requests sent met every --goodput SLO",
           type=argtypes.fraction, nargs="?", const=1.0, metavar="SHARE"),
)

_LOCUST_ONLY = (
    Option(("--arrival",), "arrival", LOCUST, "locust",
           "closed: each user sends, waits for the stream, repeats; open: Poisson arrivals at --request-rate for "
           "the whole test, independent of responses", default="closed", choices=ARRIVALS),
    Option(("--max-tokens",), "max_tokens", LOCUST, "locust",
           "alias: fix every output length, whatever --dataset-name (it wins over --sharegpt-output-len, "
           "--random-output-len and --custom-output-len); 0: the dataset's own", type=argtypes.non_negative_int,
           default=0),
    Option(("--user-shape",), "user_shape", LOCUST, "locust",
           "closed loop: user count over time, e.g. 'ramp:1->50;duration=120' (docs/arrivals.md)", default=""),
    Option(("--llm-records",), "llm_records", LOCUST, "locust",
           "write one JSON line per request to this file at the end", default="", env="LLMLOAD_RECORDS"),
    Option(("--llm-result",), "llm_result", LOCUST, "locust",
           "write the run's result JSON (llmload bench --save-result's keys and meanings) to this file at the end",
           default="", env="LLMLOAD_RESULT"),
    # The start form's API key field. There is no command-line flag for a key (ps shows every command line to
    # every user of the host): --api-key on the command line is refused with a pointer to the ways that are safe.
    Option(("--api-key",), "api_key", LOCUST, "locust",
           "API key for this test, typed into the web UI's start form only (else --api-key-file, "
           "$LLMLOAD_API_KEY, $OPENAI_API_KEY)", default="", secret=True, cli=False),
)

_WEB_UI = (
    Option(("--llm-web-credentials",), "llm_web_credentials", LOCUST, "webui",
           "with --web-login: USER:PASSWORD for the login page and for HTTP basic auth on /llm/* routes",
           default="", env="LLMLOAD_WEB_CREDENTIALS", secret=True, web_ui=False),
)

#: every llmload option, in ``llmload bench --help`` order within each group
OPTIONS: tuple[Option, ...] = (*_TARGET, *_WORKLOAD, *VLLM_DATASET_OPTIONS, *REQUEST_OPTIONS, *_TRACE, *_SESSIONS, *_CONVERSATIONS, *_ARRIVALS, *_METRICS, *_TIMEOUTS, *RUN_OPTIONS,
                               *_DISTRIBUTED, *_SERVER, *ENERGY_OPTIONS, *_OUTPUT, *_GATES, *_LOCUST_ONLY, *_WEB_UI)


def options_for(scope: Scope) -> tuple[Option, ...]:
    """The options one way in gets (``Scope.BENCH`` or ``Scope.LOCUST``)."""
    return tuple(o for o in OPTIONS if scope in o.scope)


def option(dest: str) -> Option:
    """The option with this ``dest`` (KeyError if there is none)."""
    for o in OPTIONS:
        if o.dest == dest:
            return o
    raise KeyError(dest)
