"""Simulator settings and the named timing profiles."""

from __future__ import annotations

from dataclasses import dataclass, field

DIALECTS = ("vllm", "sglang", "max", "transformers")


@dataclass(frozen=True, slots=True)
class Profile:
    """A continuous-batching engine's capacity and step-time model.

    Step time (ms) = ``base_ms`` + ``prefill_ms_per_1k`` · prefill tokens / 1000
    + ``seq_ms`` · sequences in the batch + ``kv_ms_per_1k`` · KV tokens in use / 1000.
    A decode step is memory bound (weights + KV read); prefill adds compute per prompt token.
    """

    name: str
    description: str
    base_ms: float
    prefill_ms_per_1k: float
    seq_ms: float
    kv_ms_per_1k: float
    #: most sequences decoding at once (vLLM ``max_num_seqs``)
    max_num_seqs: int
    #: KV cache capacity in tokens; a request reserves prompt + max_tokens on admission
    kv_capacity: int
    #: prefill tokens per step (chunked prefill, vLLM ``max_num_batched_tokens``)
    prefill_budget: int
    #: hold a new request's first decode step until no more waiting requests can be admitted
    first_decode_stall: bool = False
    #: longest such hold, so a trickle of arrivals cannot starve a request
    stall_max_ms: float = 5000.0


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile(
            name="l40-qwen3-8b",
            description="Qwen3-8B on one L40 under vLLM: 500 ShareGPT prompts at unlimited rate in ~55 s",
            base_ms=27.0,
            prefill_ms_per_1k=28.0,
            seq_ms=0.06,
            kv_ms_per_1k=0.1,
            max_num_seqs=256,
            kv_capacity=160_000,
            prefill_budget=2048,
        ),
        Profile(
            name="l40-qwen3-8b-stall",
            description="the same engine with MAX/SGLang's behaviour: a new request's 2nd token waits for the batch",
            base_ms=27.0,
            prefill_ms_per_1k=28.0,
            seq_ms=0.06,
            kv_ms_per_1k=0.1,
            max_num_seqs=256,
            kv_capacity=160_000,
            prefill_budget=8192,
            first_decode_stall=True,
        ),
        Profile(
            name="h100-llama-8b",
            description="a faster GPU: roughly 2.5x the L40 profile's throughput",
            base_ms=9.0,
            prefill_ms_per_1k=10.0,
            seq_ms=0.03,
            kv_ms_per_1k=0.035,
            max_num_seqs=512,
            kv_capacity=450_000,
            prefill_budget=8192,
        ),
        Profile(
            name="tiny",
            description="a small fast engine for tests: 2 ms steps, 32 sequences",
            base_ms=2.0,
            prefill_ms_per_1k=4.0,
            seq_ms=0.05,
            kv_ms_per_1k=0.02,
            max_num_seqs=32,
            kv_capacity=40_000,
            prefill_budget=4096,
        ),
    )
}
DEFAULT_PROFILE = "l40-qwen3-8b"


@dataclass(slots=True)
class Faults:
    """Fractions of requests that get each fault (decided per request, seeded)."""

    error_rate: float = 0.0
    error_codes: tuple[int, ...] = (500, 503, 429)
    retry_after_s: int = 1
    disconnect_rate: float = 0.0
    stall_rate: float = 0.0
    stall_s: float = 120.0
    malformed_rate: float = 0.0
    slow_headers_rate: float = 0.0
    slow_headers_s: float = 5.0
    #: answer a streaming request with one JSON body (a server or proxy that ignores ``stream``)
    not_streamed_rate: float = 0.0

    @property
    def rates(self) -> tuple[float, ...]:
        """The rate of each kind in :data:`llmload.sim.faults.FAULT_KINDS`, in that order."""
        return (self.error_rate, self.disconnect_rate, self.stall_rate, self.malformed_rate, self.slow_headers_rate,
                self.not_streamed_rate)

    @property
    def any(self) -> bool:
        return any(r > 0 for r in self.rates)


@dataclass(frozen=True, slots=True)
class GpuModel:
    """The simulated GPUs behind ``/dcgm/metrics`` and their power model (:mod:`llmload.sim.power`).

    ``count`` GPUs per engine replica (tensor parallel: the engine's work is split evenly over them; the timing
    does not change); ``--workers N`` replicas have ``N * count`` GPUs. Joules are the whole engine's (all
    ``count`` GPUs together): a prefill token's compute and a decode step's read of the weights and the KV.
    """

    count: int = 1
    idle_watts: float = 70.0
    max_watts: float = 700.0
    joules_per_prefill_token: float = 0.02
    joules_per_decode_step: float = 1.5
    name: str = "NVIDIA H100 80GB HBM3"
    memory_mib: int = 81559
    hostname: str = "llmload-sim"
    driver_version: str = "550.54.15"
    #: the energy (and violation) counters restart from 0 this many seconds after start, once (None: never)
    energy_reset_after_s: float | None = None


@dataclass(slots=True)
class SimConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    model: str = "llmload-sim"
    #: more model names served the same way (``--model a,b,c``: the first is ``model``)
    extra_models: tuple[str, ...] = ()
    #: LoRA adapters served as model names (``--lora-modules``); at most ``max_loras`` loaded, loading one costs
    #: ``lora_load_ms`` (:mod:`llmload.sim.lora`)
    lora_modules: tuple[str, ...] = ()
    max_loras: int = 1
    lora_load_ms: float = 20.0
    #: ``--num-speculative-tokens``: serve vLLM's spec-decode counters for drafts of this many tokens (0: none),
    #: each position accepted with probability ``spec_acceptance ** (i + 1)`` (:mod:`llmload.sim.metrics.spec_decode`)
    num_speculative_tokens: int = 0
    spec_acceptance: float = 0.7
    dialect: str = "vllm"
    profile: Profile = field(default_factory=lambda: PROFILES[DEFAULT_PROFILE])
    #: fixed-timing mode when both are set: every request gets exactly these times
    ttft_ms: float | None = None
    itl_ms: float | None = None
    tokens_per_chunk: int = 1
    seed: int = 0
    #: per-token chance of an early end of sequence when the request does not ask for ignore_eos
    eos_prob: float = 0.0
    default_max_tokens: int = 256
    max_model_len: int = 32768
    faults: Faults = field(default_factory=Faults)
    trace_file: str | None = None
    #: one JSON line per published scheduler state (``--engine-trace``): the ground truth for ``/metrics``
    engine_trace: str | None = None
    workers: int = 1
    #: a tokenizer to count prompt tokens exactly (else ~4 characters per token)
    tokenizer: str | None = None
    #: prefix cache capacity in tokens per process (0: no cache); blocks of ``prefix_cache_block`` tokens
    prefix_cache_tokens: int = 0
    prefix_cache_block: int = 16
    #: fixed-timing mode: extra time to first token per prompt token that is not in the prefix cache
    prefill_ms_per_token: float = 0.0
    #: chat, responses, messages: the first N generated tokens are reasoning (chat's
    #: ``delta.reasoning_content``, a Responses ``reasoning`` item, a Messages ``thinking`` block)
    reasoning_tokens: int = 0
    #: the request header whose value the trace records as ``session`` (any case)
    session_header: str = "X-Session-ID"
    #: the trace also records each request's messages or prompt
    trace_prompts: bool = False
    #: the trace also records each request's headers (no credentials) and JSON body
    trace_requests: bool = False
    #: a server that slows down: from this many seconds after the first request on, every time (TTFT, ITL,
    #: engine step) is ``degrade_factor`` times as long (None: never)
    degrade_after_s: float | None = None
    degrade_factor: float = 2.0
    #: structured output: the share of answers to a ``response_format`` that are broken (unclosed JSON), drawn
    #: from the seed and the request (:mod:`llmload.sim.structured`)
    invalid_json_rate: float = 0.0
    #: tool calls: the share of chat requests with ``tools`` and ``tool_choice`` ``auto`` (the default) whose
    #: answer is a tool call, drawn from the seed and the request (:mod:`llmload.sim.tools`)
    tool_call_rate: float = 0.5
    #: pooling routes (:mod:`llmload.sim.pooling`): the length of an embedding when the request names no
    #: ``dimensions``
    embedding_dim: int = 64
    #: the simulated GPUs and their power model (``--gpus``, ``--gpu-*``): ``/dcgm/metrics``
    gpu: GpuModel = field(default_factory=GpuModel)

    @property
    def served_names(self) -> tuple[str, ...]:
        """Every name a request may give as its ``model``: the models, then the adapters."""
        return (self.model, *self.extra_models, *self.lora_modules)

    @property
    def fixed_timing(self) -> bool:
        return self.ttft_ms is not None or self.itl_ms is not None

    @property
    def prefix_cache(self) -> bool:
        return self.prefix_cache_tokens > 0
