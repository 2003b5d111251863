"""Run the simulated LLM inference engine: an OpenAI-compatible streaming server (plus SGLang's /generate,
TGI's /generate_stream and TensorRT-LLM's generate_stream) whose timing follows a continuous-batching model
or fixed per-request times.

examples:
  llmload sim                                   # vLLM-like engine on 127.0.0.1:8000, profile l40-qwen3-8b
  llmload sim --profile l40-qwen3-8b-stall      # 2nd token waits for the batch to fill (MAX/SGLang)
  llmload sim --ttft-ms 50 --itl-ms 10          # fixed timing, for measurement-accuracy tests
  llmload sim --dialect transformers --error-rate 0.05 --trace-file trace.jsonl
  llmload sim --prefix-cache-tokens 200000 --reasoning-tokens 32   # cache hits cut TTFT; chat streams think first
  llmload sim --dialect sglang --engine-trace engine.jsonl         # /metrics in SGLang's names, with its ground truth
  llmload sim --gpus 2 --gpu-energy-reset-after 60                 # /dcgm/metrics for 2 GPUs; energy resets at 60 s
"""

from __future__ import annotations

import argparse
import sys

from llmload.options import argtypes
from llmload.sim.config import DEFAULT_PROFILE, DIALECTS, PROFILES, Faults, GpuModel, SimConfig

_FAULT_FLAGS = ("error_rate", "disconnect_rate", "stall_rate", "malformed_rate", "slow_headers_rate",
                "not_streamed_rate")
#: the GPU flags' defaults (an immutable instance)
_GPU = GpuModel()


def _codes(text: str) -> tuple[int, ...]:
    try:
        codes = tuple(int(c) for c in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated HTTP status codes, got {text!r}") from None
    if not codes or any(not 400 <= c <= 599 for c in codes):
        raise argparse.ArgumentTypeError(f"status codes must be 4xx or 5xx, got {text!r}")
    return codes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    _server_and_timing(parser)
    _cache_and_generation(parser)
    _faults_and_trace(parser)
    _gpus(parser)


def _server_and_timing(parser: argparse.ArgumentParser) -> None:
    net = parser.add_argument_group("server")
    net.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    net.add_argument("--port", type=argtypes.port_or_zero, default=8000, help="port to bind; 0 picks a free one (default: %(default)s)")
    net.add_argument("--workers", type=argtypes.positive_int, default=1,
                     help="processes sharing the port with SO_REUSEPORT; each is an independent engine replica")
    net.add_argument("--model", default="llmload-sim",
                     help="model name served and required in requests; several, comma-separated, all served")
    net.add_argument("--lora-modules", default="", metavar="A,B,...",
                     help="LoRA adapters served as model names of their own (docs/simulator.md, \"LoRA adapters\")")
    net.add_argument("--max-loras", type=argtypes.positive_int, default=1, metavar="N",
                     help="adapters loaded at a time, least recently used out first (default: %(default)s)")
    net.add_argument("--lora-load-ms", type=argtypes.non_negative, default=20.0, metavar="MS",
                     help="what loading an adapter that is not loaded adds before its prefill (default: %(default)s)")
    net.add_argument("--num-speculative-tokens", type=argtypes.non_negative_int, default=0, metavar="K",
                     help="serve vLLM's vllm:spec_decode_* counters for drafts of K tokens (counters only: the "
                          "timing does not change; default: none)")
    net.add_argument("--spec-acceptance", type=argtypes.range_ratio, default=0.7, metavar="A",
                     help="with --num-speculative-tokens: draft position i is accepted with probability "
                          "A^(i+1) (default: %(default)s)")
    net.add_argument("--dialect", choices=DIALECTS, default="vllm",
                     help="stream quirks of which engine to reproduce (default: %(default)s)")
    net.add_argument("--max-model-len", type=argtypes.positive_int, default=32768, help="prompt + max_tokens limit")

    timing = parser.add_argument_group("timing")
    profiles = ", ".join(f"{name} ({p.description})" for name, p in PROFILES.items())
    timing.add_argument("--profile", choices=sorted(PROFILES), default=DEFAULT_PROFILE, metavar="NAME",
                        help=f"continuous-batching profile: {profiles}. Default: %(default)s")
    timing.add_argument("--max-num-seqs", type=argtypes.positive_int, metavar="N",
                        help="requests the engine runs at once (default: the profile's); fewer give a lower, known "
                             "capacity, e.g. for saturation tests")
    timing.add_argument("--first-decode-stall", action="store_true",
                        help="hold a new request's first decode step until waiting prefills are done")
    timing.add_argument("--ttft-ms", type=argtypes.non_negative, help="fixed-timing mode: time to first token")
    timing.add_argument("--itl-ms", type=argtypes.non_negative, help="fixed-timing mode: gap between chunks")
    timing.add_argument("--tokens-per-chunk", type=argtypes.positive_int, default=1,
                        help="tokens per streamed chunk after the first (speculative decoding emits several)")
    timing.add_argument("--degrade-after", type=argtypes.non_negative, metavar="SECONDS",
                        help="a server that slows down: this long after the first request, every time (TTFT, ITL, "
                             "engine step) becomes --degrade-factor times as long")
    timing.add_argument("--degrade-factor", type=argtypes.positive, default=2.0, metavar="F",
                        help="with --degrade-after: how much slower (default: %(default)s)")
    timing.add_argument("--prefill-ms-per-token", type=argtypes.non_negative, default=0.0, metavar="MS",
                        help="fixed-timing mode: add this to the TTFT for every prompt token not in the prefix "
                             "cache (default 0; profiles charge prefill per token themselves)")


def _cache_and_generation(parser: argparse.ArgumentParser) -> None:
    cache = parser.add_argument_group("prefix cache (vLLM-style automatic prefix caching, one cache per worker)")
    cache.add_argument("--prefix-cache-tokens", type=argtypes.non_negative_int, default=0, metavar="N",
                       help="cache up to N prompt tokens in full blocks (LRU); cached blocks are not prefilled "
                            "again, usage reports prompt_tokens_details.cached_tokens (default 0: off)")
    cache.add_argument("--prefix-cache-block", type=argtypes.positive_int, default=16, metavar="TOKENS",
                       help="tokens per cache block (default: %(default)s, vLLM's block size)")

    gen = parser.add_argument_group("generation")
    gen.add_argument("--seed", type=argtypes.integer, default=0, help="seed for generated text and fault selection")
    gen.add_argument("--eos-prob", type=argtypes.fraction, default=0.0,
                     help="per-token chance of an early EOS when a request does not set ignore_eos (default 0)")
    gen.add_argument("--default-max-tokens", type=argtypes.positive_int, default=256, help="chat max tokens when none is given")
    gen.add_argument("--tokenizer", help="count prompt tokens with this tokenizer ('builtin', a dir or a name) "
                                         "instead of ~4 characters per token")
    gen.add_argument("--reasoning-tokens", type=argtypes.non_negative_int, default=0, metavar="N",
                     help="chat, responses, messages: send the first N generated tokens as reasoning "
                          "(reasoning_content, a reasoning item, a thinking block), the rest as the answer "
                          "(default 0; completions never reason)")
    gen.add_argument("--invalid-json-rate", type=argtypes.fraction, default=0.0, metavar="P",
                     help="structured output (a request's response_format): break this share of the JSON answers "
                          "(the last token becomes a word, the JSON is left unclosed), drawn from --seed and the "
                          "request (default 0)")
    gen.add_argument("--tool-call-rate", type=argtypes.fraction, default=0.5, metavar="P",
                     help="tool calls (a chat request's tools): with tool_choice auto (the default), answer this "
                          "share with a call to one of the tools, drawn from --seed and the request; required "
                          "and a named tool always call, none never (default: %(default)s)")


def _faults_and_trace(parser: argparse.ArgumentParser) -> None:
    faults = parser.add_argument_group("faults (fractions of requests, seeded, at most one fault per request)")
    faults.add_argument("--error-rate", type=argtypes.fraction, default=0.0, help="answer with an HTTP error")
    faults.add_argument("--error-codes", type=_codes, default=(500, 503, 429),
                        help="status codes to pick from (default: 500,503,429; 429/503 carry Retry-After; "
                             "422 answers FastAPI's extra_forbidden body for the request's last field)")
    faults.add_argument("--disconnect-rate", type=argtypes.fraction, default=0.0, help="drop the connection mid-stream")
    faults.add_argument("--stall-rate", type=argtypes.fraction, default=0.0, help="pause mid-stream for --stall-s")
    faults.add_argument("--stall-s", type=argtypes.non_negative, default=120.0, help="stall length (default: %(default)s s)")
    faults.add_argument("--malformed-rate", type=argtypes.fraction, default=0.0, help="send one malformed JSON chunk")
    faults.add_argument("--slow-headers-rate", type=argtypes.fraction, default=0.0, help="delay the response headers")
    faults.add_argument("--slow-headers-s", type=argtypes.non_negative, default=5.0, help="header delay (default: %(default)s s)")
    faults.add_argument("--not-streamed-rate", type=argtypes.fraction, default=0.0,
                        help="answer a streaming request with one JSON body, as a server ignoring \"stream\" does")

    out = parser.add_argument_group("ground truth")
    out.add_argument("--trace-file", metavar="F",
                     help="append one JSON line per request with the monotonic send time of every chunk, "
                          "cached and prefilled prompt tokens, reasoning tokens and the session")
    out.add_argument("--engine-trace", metavar="F",
                     help="append one JSON line each time the engine's scheduler state changes (t, running, "
                          "waiting, kv_usage, worker pid): the ground truth behind /metrics' gauges")
    out.add_argument("--trace-requests", action="store_true",
                     help="the trace also records each request's headers (credentials left out) and JSON body")
    out.add_argument("--trace-prompts", action="store_true",
                     help="also record each request's messages (chat) or prompt in the trace (big traces)")
    out.add_argument("--session-header", default="X-Session-ID", metavar="NAME",
                     help="request header recorded as the trace's session (default: %(default)s)")


def _gpus(parser: argparse.ArgumentParser) -> None:
    gpu = parser.add_argument_group("GPUs (GET /dcgm/metrics: dcgm-exporter's page, from a power model of the "
                                    "engine's work; docs/simulator.md, \"GPU telemetry\")")
    gpu.add_argument("--gpus", type=argtypes.positive_int, default=_GPU.count, metavar="N",
                     help="GPUs each engine replica runs on, tensor parallel: its work's energy is split evenly "
                          "over them; the timing does not change (default: %(default)s; --workers W: W*N GPUs)")
    gpu.add_argument("--gpu-idle-watts", type=argtypes.non_negative, default=_GPU.idle_watts, metavar="W",
                     help="what each GPU draws with no work (default: %(default)s, an H100 idling)")
    gpu.add_argument("--gpu-max-watts", type=argtypes.positive, default=_GPU.max_watts, metavar="W",
                     help="each GPU's power limit: the power gauge never shows more; steps that ask for more "
                          "count as power violation (default: %(default)s, an H100 SXM's)")
    gpu.add_argument("--gpu-joules-per-prefill-token", type=argtypes.non_negative,
                     default=_GPU.joules_per_prefill_token, metavar="J",
                     help="energy of one prefilled prompt token, all GPUs together (default: %(default)s: "
                          "an 8B model's 16 GFLOP a token on an H100)")
    gpu.add_argument("--gpu-joules-per-decode-step", type=argtypes.non_negative,
                     default=_GPU.joules_per_decode_step, metavar="J",
                     help="energy of one engine step that decodes, all GPUs together (default: %(default)s: "
                          "reading an 8B model's weights from HBM once)")
    gpu.add_argument("--gpu-name", default=_GPU.name, metavar="NAME", help="modelName label (default: %(default)s)")
    gpu.add_argument("--gpu-memory-mib", type=argtypes.positive_int, default=_GPU.memory_mib, metavar="MIB",
                     help="each GPU's framebuffer, FB_USED + FB_FREE (default: %(default)s, an H100 80GB's)")
    gpu.add_argument("--gpu-hostname", default=_GPU.hostname, metavar="NAME",
                     help="Hostname label (default: %(default)s)")
    gpu.add_argument("--gpu-driver-version", default=_GPU.driver_version, metavar="V",
                     help="DCGM_FI_DRIVER_VERSION label (default: %(default)s)")
    gpu.add_argument("--gpu-energy-reset-after", type=argtypes.non_negative, metavar="SECONDS",
                     help="a driver reload: this long after the start, the energy and violation counters restart "
                          "from 0, once (default: never)")


def _gpu_model(args: argparse.Namespace) -> GpuModel:
    from llmload.common.errors import ConfigError

    if args.gpu_max_watts < args.gpu_idle_watts:
        raise ConfigError("--gpu-max-watts must be at least --gpu-idle-watts")
    return GpuModel(
        count=args.gpus, idle_watts=args.gpu_idle_watts, max_watts=args.gpu_max_watts,
        joules_per_prefill_token=args.gpu_joules_per_prefill_token,
        joules_per_decode_step=args.gpu_joules_per_decode_step, name=args.gpu_name, memory_mib=args.gpu_memory_mib,
        hostname=args.gpu_hostname, driver_version=args.gpu_driver_version,
        energy_reset_after_s=args.gpu_energy_reset_after,
    )


def config_from_args(args: argparse.Namespace) -> SimConfig:
    from dataclasses import replace

    from llmload.common.errors import ConfigError

    if (args.ttft_ms is None) != (args.itl_ms is None):
        raise ConfigError("fixed-timing mode needs both --ttft-ms and --itl-ms")
    if args.tokens_per_chunk < 1:
        raise ConfigError("--tokens-per-chunk must be at least 1")
    if args.workers < 1:
        raise ConfigError("--workers must be at least 1")
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port must be 0-65535, got {args.port}")
    if sum(getattr(args, f) for f in _FAULT_FLAGS) > 1.0:
        raise ConfigError("the fault rates (--error-rate, --disconnect-rate, ...) add up to more than 1")
    if not args.session_header.strip():
        raise ConfigError("--session-header needs a header name")
    if 0 < args.prefix_cache_tokens < args.prefix_cache_block:
        raise ConfigError("--prefix-cache-tokens must hold at least one block (--prefix-cache-block tokens)")
    profile = PROFILES[args.profile]
    if args.first_decode_stall:
        profile = replace(profile, first_decode_stall=True)
    if args.max_num_seqs:
        profile = replace(profile, max_num_seqs=args.max_num_seqs)
    return SimConfig(
        host=args.host, port=args.port, model=args.model.split(",")[0].strip(), dialect=args.dialect, profile=profile,
        extra_models=tuple(m.strip() for m in args.model.split(",")[1:] if m.strip()),
        lora_modules=tuple(m.strip() for m in args.lora_modules.split(",") if m.strip()), max_loras=args.max_loras,
        lora_load_ms=args.lora_load_ms, num_speculative_tokens=args.num_speculative_tokens,
        spec_acceptance=args.spec_acceptance,
        ttft_ms=args.ttft_ms, itl_ms=args.itl_ms, tokens_per_chunk=args.tokens_per_chunk, seed=args.seed,
        eos_prob=args.eos_prob, default_max_tokens=args.default_max_tokens, max_model_len=args.max_model_len,
        faults=Faults(
            error_rate=args.error_rate, error_codes=args.error_codes, disconnect_rate=args.disconnect_rate,
            stall_rate=args.stall_rate, stall_s=args.stall_s, malformed_rate=args.malformed_rate,
            slow_headers_rate=args.slow_headers_rate, slow_headers_s=args.slow_headers_s,
            not_streamed_rate=args.not_streamed_rate,
        ),
        trace_file=args.trace_file, engine_trace=args.engine_trace, workers=args.workers, tokenizer=args.tokenizer,
        prefix_cache_tokens=args.prefix_cache_tokens, prefix_cache_block=args.prefix_cache_block,
        prefill_ms_per_token=args.prefill_ms_per_token, reasoning_tokens=args.reasoning_tokens,
        session_header=args.session_header.strip(), trace_prompts=args.trace_prompts,
        trace_requests=args.trace_requests,
        degrade_after_s=args.degrade_after, degrade_factor=args.degrade_factor,
        invalid_json_rate=args.invalid_json_rate, tool_call_rate=args.tool_call_rate, gpu=_gpu_model(args),
    )


def run(args: argparse.Namespace) -> int:
    from llmload.common.errors import ConfigError
    from llmload.sim.server import serve

    config = config_from_args(args)
    mode = (f"fixed timing (ttft {config.ttft_ms} ms, itl {config.itl_ms} ms)" if config.fixed_timing
            else f"profile {config.profile.name}")
    if config.prefix_cache:
        mode += f", prefix cache {config.prefix_cache_tokens} tokens"

    def ready(url: str) -> None:
        print(f"llmload sim listening on {url} (model {config.model}, dialect {config.dialect}, {mode}, "
              f"{config.workers} worker(s))", flush=True)

    try:
        serve(config, ready)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {config.host}:{config.port}: {exc.strerror or exc}") from None
    except KeyboardInterrupt:
        pass
    print("llmload sim stopped", file=sys.stderr)
    return 0
