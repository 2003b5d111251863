"""Benchmark an LLM server headlessly, as vLLM's benchmark_serving.py does: same flags, same summary block,
same result JSON keys, plus exact TPOT excluding the first ITL, queue time, schedule lag and client health.

With no --base-url/--host, the built-in simulated engine (llmload sim) is started on a free loopback port,
benchmarked and stopped: the zero-setup first run.

examples:
  llmload bench                                             # 200 ShareGPT prompts against the simulator
  llmload bench --base-url http://gpu-box:8000 --model Qwen/Qwen3-8B --num-prompts 500 --request-rate 10
  llmload bench --backend openai-chat --endpoint /v1/chat/completions --max-concurrency 64 --save-result

environment:
  OPENAI_API_KEY         sent as 'Authorization: Bearer ...' (or use --api-key-file); never printed or saved
  LLMLOAD_CLUSTER_TOKEN  master and workers: the shared token workers prove they know (or --cluster-token-file)
  LLMLOAD_DEBUG=1        show tracebacks

exit codes (docs/reliability.md):
  0  the run completed and at least one request succeeded
  1  runtime failure: server unreachable, initial test failed, every request failed, results not written
  2  bad usage or input (flags, values, files, dataset, tokenizer), found before the first request
  3  the run completed but missed --fail-on-error-rate or --fail-on-slo
  130 / 143  interrupted by SIGINT / SIGTERM (the partial result is printed and saved)

signals: the first Ctrl-C (or SIGTERM) stops sending; requests in flight get --stop-timeout seconds. A second
one cuts them off at once. Either way what was measured is printed and saved.
"""

from __future__ import annotations

import argparse
import math

from llmload import argtypes
from llmload.backends import BACKENDS
from llmload.datasets import DATASET_NAMES

SIM_DEFAULT_PROMPTS = 200


def add_arguments(parser: argparse.ArgumentParser) -> None:
    target = parser.add_argument_group("target (none given: start the built-in simulator)")
    target.add_argument("--backend", choices=BACKENDS, default="vllm", help="wire dialect (default: %(default)s)")
    target.add_argument("--base-url", help="server base URL, e.g. http://127.0.0.1:8000 (http://user:password@host "
                                           "sends Basic auth; the password is never shown)")
    target.add_argument("--host", help="server host (default 127.0.0.1 when --port is given)")
    target.add_argument("--port", type=argtypes.port, help="server port (default 8000 when --host is given)")
    target.add_argument("--endpoint", help="request path (default: the backend's, e.g. /v1/completions)")
    target.add_argument("--model", help="model name (default: the first one the server lists at /v1/models)")
    target.add_argument("--served-model-name", help="model name sent in requests, if it differs from --model")
    target.add_argument("--api-key-file", help="file holding the API key (else $OPENAI_API_KEY)")
    target.add_argument("--sim-args", default="",
                        help="extra 'llmload sim' flags for the built-in simulator, e.g. \"--profile tiny\"")

    data = parser.add_argument_group("workload")
    data.add_argument("--dataset-name", choices=DATASET_NAMES, default="sharegpt", help="(default: %(default)s)")
    data.add_argument("--dataset-path", help="dataset file (default for sharegpt: the shipped synthetic sample)")
    data.add_argument("--num-prompts", type=argtypes.positive_int,
                      help=f"number of requests (default 1000; {SIM_DEFAULT_PROMPTS} against the built-in simulator)")
    data.add_argument("--tokenizer", help="tokenizer name or local dir ('builtin': the shipped one; default: "
                                          "the model's own, or builtin against the simulator)")
    data.add_argument("--trust-remote-code", action="store_true")
    data.add_argument("--seed", type=argtypes.integer, default=0)
    data.add_argument("--sharegpt-output-len", type=argtypes.positive_int, help="fix every output length")
    data.add_argument("--random-input-len", type=argtypes.positive_int, default=1024)
    data.add_argument("--random-output-len", type=argtypes.positive_int, default=128)
    data.add_argument("--random-range-ratio", type=argtypes.range_ratio, default=0.0, help="in [0, 1) (default: %(default)s)")
    data.add_argument("--random-prefix-len", type=argtypes.non_negative_int, default=0)
    data.add_argument("--custom-output-len", type=argtypes.positive_int, default=256,
                      help="output length for custom JSONL rows without output_len")
    data.add_argument("--ignore-eos", action="store_true", help="ask the server to ignore EOS")

    trace = parser.add_argument_group("trace replay (--dataset-name trace; see docs/arrivals.md)")
    trace.add_argument("--trace-format", choices=("azure", "burstgpt", "jsonl"),
                       help="(default: detected from the file's header)")
    trace.add_argument("--time-scale", type=argtypes.positive, default=1.0, help="replay speed; 2 = twice as fast")
    trace.add_argument("--trace-start", type=argtypes.seconds, default=0.0, help="window start, seconds into the trace")
    trace.add_argument("--trace-duration", type=argtypes.positive_seconds,
                       help="window length in trace seconds (default: to the end)")
    trace.add_argument("--trace-prompts", metavar="SHAREGPT_FILE",
                       help="take prompt text from this dataset, trimmed/padded to each length (default: synthetic)")

    load = parser.add_argument_group("arrivals")
    load.add_argument("--request-rate", type=argtypes.rate, default=math.inf,
                      help="requests/s, Poisson (gamma with --burstiness) open loop; inf sends all at once")
    load.add_argument("--burstiness", type=argtypes.positive, default=1.0, help="gamma shape; 1 = Poisson, < 1 burstier")
    load.add_argument("--max-concurrency", type=argtypes.positive_int, help="cap on requests in flight")
    load.add_argument("--constant-rate", action="store_true",
                      help="send exactly 1/--request-rate apart instead of Poisson/gamma")
    load.add_argument("--rate-shape", metavar="SPEC|FILE",
                      help="open-loop rate over time, e.g. 'steps:5@0,10@30;duration=60', 'sine:mean=10,"
                           "amplitude=5,period=60;duration=300' (docs/arrivals.md)")
    load.add_argument("--think-time", metavar="fixed:S|exp:S",
                      help="closed loop: --max-concurrency users each send, wait for the stream, think, repeat")
    load.add_argument("--ramp-up-strategy", choices=("linear", "exponential"))
    load.add_argument("--ramp-up-start-rps", type=argtypes.non_negative, metavar="RPS")
    load.add_argument("--ramp-up-end-rps", type=argtypes.non_negative, metavar="RPS")

    measure = parser.add_argument_group("metrics")
    measure.add_argument("--goodput", nargs="+", metavar="METRIC:MS",
                         help="SLOs for goodput, e.g. ttft:500 tpot:50 (metrics ttft, tpot, e2el)")
    measure.add_argument("--percentile-metrics", type=argtypes.metric_names, default="ttft,tpot,itl",
                         help="metrics reported with percentiles: ttft,tpot,itl,e2el (default: %(default)s)")
    measure.add_argument("--metric-percentiles", type=argtypes.percentiles, default="99",
                         help="e.g. 25,50,99 (default: %(default)s)")
    measure.add_argument("--ttft-rule", choices=("content", "vllm"), default="content",
                         help="content: first event with text (default); vllm: first event with choices")

    timeouts = parser.add_argument_group("timeouts and stopping")
    timeouts.add_argument("--connect-timeout", type=argtypes.positive_seconds, default=30.0,
                          help="seconds to open a connection (default: %(default)s)")
    timeouts.add_argument("--read-timeout", type=argtypes.positive_seconds, default=600.0,
                          help="a request fails when no data arrives for this many seconds, queueing before the "
                               "first token included (default: %(default)s)")
    timeouts.add_argument("--request-timeout", type=argtypes.positive_seconds,
                          help="a request fails when it takes longer than this in all (default: no limit)")
    timeouts.add_argument("--stop-timeout", type=argtypes.seconds, default=10.0,
                          help="when stopped early (Ctrl-C, SIGTERM), seconds requests in flight get before they "
                               "are cut off (default: %(default)s)")
    timeouts.add_argument("--no-initial-test", action="store_true",
                          help="skip the single test request sent before the run")

    dist = parser.add_argument_group("distributed (Locust's master/worker; docs/distributed.md)")
    dist.add_argument("--processes", type=argtypes.positive_int, help="run N local worker processes under an in-process master")
    dist.add_argument("--master", action="store_true", help="run as master; workers connect to it")
    dist.add_argument("--expect-workers", type=argtypes.positive_int, help="with --master: workers to wait for")
    dist.add_argument("--expect-workers-max-wait", type=argtypes.positive_seconds, default=120.0,
                      help="seconds (default: %(default)s)")
    dist.add_argument("--master-bind-host", default="*",
                      help="interface the master listens on, e.g. 10.0.0.5 (default: all)")
    dist.add_argument("--master-bind-port", type=argtypes.port, default=5557, help="(default: %(default)s)")
    dist.add_argument("--worker", action="store_true",
                      help="run as a worker: every run option comes from the master")
    dist.add_argument("--master-host", default="127.0.0.1", help="with --worker: the master's address")
    dist.add_argument("--master-port", type=argtypes.port, default=5557, help="with --worker: the master's port")
    dist.add_argument("--cluster-token-file", metavar="FILE",
                      help="file ('-': stdin) holding the token workers must prove they know before they get a "
                           "job or the API key (default: $LLMLOAD_CLUSTER_TOKEN; none: every worker is trusted)")

    out = parser.add_argument_group("output")
    out.add_argument("--save-result", action="store_true", help="write the result JSON and the records file")
    out.add_argument("--save-detailed", action="store_true",
                     help="also put per-request lists (ttfts, itls, ...) into the result JSON")
    out.add_argument("--result-dir", default=".", help="(default: current directory)")
    out.add_argument("--result-filename", help="(default: vLLM's {label}-{rate}qps-{model}-{date}.json)")
    out.add_argument("--records-format", choices=("jsonl", "parquet"), default="jsonl")
    out.add_argument("--metadata", nargs="*", metavar="KEY=VALUE", help="extra keys for the result JSON")
    out.add_argument("--label", help="label in the result file name (default: the backend)")
    out.add_argument("--disable-tqdm", action="store_true", help="no progress line on stderr")

    gate = parser.add_argument_group("CI gates (exit 3 when missed)")
    gate.add_argument("--fail-on-error-rate", type=argtypes.fraction, metavar="SHARE",
                      help="fail when more than this share of the requests sent failed, e.g. 0.01")
    gate.add_argument("--fail-on-slo", type=argtypes.fraction, nargs="?", const=1.0, metavar="SHARE",
                      help="fail when fewer than SHARE (default 1: all) of the requests sent met every --goodput SLO")


def run(args: argparse.Namespace) -> int:
    from llmload.bench.run import run_bench

    return run_bench(args)
