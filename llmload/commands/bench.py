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

from llmload.options import SIM_DEFAULT_PROMPTS, add_bench_arguments

__all__ = ["SIM_DEFAULT_PROMPTS", "add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """bench's flags, generated from llmload's one option table (``llmload/options/table.py``), which also
    gives ``locust -f`` the options both take, under the same names and defaults."""
    add_bench_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from llmload.bench.run import run_bench

    return run_bench(args)
