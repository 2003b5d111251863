"""What a run sends, from its options: the samples (dataset + tokenizer) and the schedule spec. The same
function serves ``llmload bench``'s argparse namespace and Locust's parsed options (one set of dest names,
declared once in :mod:`llmload.options`)."""

from __future__ import annotations

from typing import Any

from llmload.common.choices import SESSION_DATASETS, TRACE_DATASETS
from llmload.common.errors import ConfigError
from llmload.core.conversation import ConversationPolicy
from llmload.core.modalities import check_modalities, multimodal_spec
from llmload.core.schedule import ScheduleSpec
from llmload.core.session import SessionPolicy
from llmload.datasets.traces.formats import MooncakeKeys
from llmload.options import option, option_value

_opt = option_value  # the option's value, or the table's default


def schedule_spec(options: Any) -> ScheduleSpec:
    """The arrival options (``--request-rate``, ``--burstiness``, ramps, ``--constant-rate``, ``--rate-shape``)."""
    return ScheduleSpec(request_rate=float(_opt(options, "request_rate")),
                        burstiness=float(_opt(options, "burstiness")), seed=int(_opt(options, "seed")),
                        ramp_up_strategy=_opt(options, "ramp_up_strategy"),
                        ramp_up_start_rps=_opt(options, "ramp_up_start_rps"),
                        ramp_up_end_rps=_opt(options, "ramp_up_end_rps"),
                        constant_rate=bool(_opt(options, "constant_rate")),
                        rate_shape=_opt(options, "rate_shape"), trace=replays_trace(options))


def dataset_options(options: Any) -> dict[str, Any]:
    """The keyword arguments :func:`llmload.datasets.load_samples` takes for ``--dataset-name``.

    ``--max-tokens`` (the Locust plugin's older spelling) fixes every output length whatever the dataset."""
    name = _opt(options, "dataset_name")
    # --max-tokens, or vllm bench serve's --output-len: every dataset's output length
    fixed = _opt(options, "max_tokens") or getattr(options, "output_len", None) or None
    if name == "sharegpt":
        return {"fixed_output_len": fixed or _opt(options, "sharegpt_output_len"), "shuffle": _shuffles(options),
                "multi_turn": bool(_opt(options, "multi_turn")), "max_turns": _opt(options, "max_turns"),
                "system_prompt_len": _opt(options, "system_prompt_len")}
    if name == "prefix_repetition":
        return {"prefix_len": _opt(options, "prefix_repetition_prefix_len"),
                "suffix_len": _opt(options, "prefix_repetition_suffix_len"),
                "num_prefixes": _opt(options, "prefix_repetition_num_prefixes"),
                "output_len": fixed or _opt(options, "prefix_repetition_output_len"), "shuffle": _shuffles(options)}
    if name in ("random", "random-mm"):
        out = {"input_len": getattr(options, "input_len", None) or _opt(options, "random_input_len"),
               "output_len": fixed or _opt(options, "random_output_len"),
               "range_ratio": _opt(options, "random_range_ratio"),
               "prefix_len": _opt(options, "random_prefix_len")}
        if name == "random":
            return {**out, "batch_size": int(_opt(options, "random_batch_size"))}
        return {**out, "mm": multimodal_spec(options)}
    if name == "random-rerank":
        return {"input_len": getattr(options, "input_len", None) or _opt(options, "random_input_len"),
                "output_len": fixed or _opt(options, "random_output_len"), "range_ratio": _opt(options,
                                                                                               "random_range_ratio"),
                "batch_size": int(_opt(options, "random_batch_size")), "reranker": not _opt(options, "no_reranker")}
    if name == "sonnet":  # vLLM maps neither --input-len nor --output-len here
        return {"input_len": _opt(options, "sonnet_input_len"), "output_len": _opt(options, "sonnet_output_len"),
                "prefix_len": _opt(options, "sonnet_prefix_len")}
    if name == "spec_bench":
        return {"output_len": fixed or _opt(options, "spec_bench_output_len"),
                "category": _opt(options, "spec_bench_category"), "shuffle": _shuffles(options)}
    if name == "burstgpt":
        return {}
    if name == "hf":
        return {"subset": _opt(options, "hf_subset"), "split": _opt(options, "hf_split"),
                "name": _opt(options, "hf_name"), "output_len": fixed or _opt(options, "hf_output_len"),
                "shuffle": _shuffles(options)}
    if name in SESSION_DATASETS:
        return {"prompt_path": _opt(options, "trace_prompts")}
    if name in TRACE_DATASETS:
        return {"trace_format": _opt(options, "trace_format"), "time_scale": _opt(options, "time_scale"),
                "trace_start": _opt(options, "trace_start"), "trace_duration": _opt(options, "trace_duration"),
                "prompt_path": _opt(options, "trace_prompts"), "block_size": _opt(options, "trace_block_size"),
                "mooncake": mooncake_keys(options)}
    return {"default_output_len": fixed or _opt(options, "custom_output_len")}


def _shuffles(options: Any) -> bool | None:
    """``--disable-shuffle``: False (keep the file's order); None: the dataset's default (shuffled)."""
    return False if getattr(options, "disable_shuffle", False) else None


def check_dataset_flags(options: Any) -> None:
    """vLLM's dataset flags llmload takes only where they mean something here (docs/vllm-compat.md): a
    ConfigError (one line) for the rest. ``--skip-tokenizer-init`` counts with the builtin tokenizer."""
    if getattr(options, "chat_template_kwargs", None):
        raise ConfigError("--chat-template-kwargs: llmload applies no client-side chat template; send template "
                          "arguments to the server with --extra-body '{\"chat_template_kwargs\": {...}}'")
    check_modalities(options)
    if getattr(options, "skip_tokenizer_init", False):
        if _opt(options, "dataset_name") != "custom":
            raise ConfigError("--skip-tokenizer-init works with --dataset-name custom only (the other datasets "
                              "build prompts with a tokenizer), as in vllm bench serve")
        if not getattr(options, "tokenizer", None):
            options.tokenizer = "builtin"


def replays_trace(options: Any) -> bool:
    """``--dataset-name`` is a trace (``trace``, ``mooncake``, ``timed_trace``): it brings its own arrivals."""
    return _opt(options, "dataset_name") in TRACE_DATASETS


#: the dialects llmload sends ``ignore_eos`` for with the random dataset, as today's ``vllm bench serve``; vLLM
#: also does for openai and openai-chat, but strict OpenAI-compatible servers (transformers serve, OpenAI)
#: answer the unknown field with 422, so there it takes ``--ignore-eos`` (docs/vllm-compat.md)
_RANDOM_IGNORES_EOS = ("vllm",)


def forces_output_len(options: Any) -> bool:
    """A trace fixes every output length: force it with ``max_tokens`` + ``ignore_eos``; so does the random
    dataset over ``--backend vllm``, as today's ``vllm bench serve`` (not with ``--vllm-compat 0.7``)."""
    random_dataset = (_opt(options, "dataset_name") == "random" and _opt(options, "backend") in _RANDOM_IGNORES_EOS
                      and getattr(options, "vllm_compat", None) != "0.7")
    return bool(_opt(options, "ignore_eos")) or replays_trace(options) or replays_sessions(options) or random_dataset


def conversation_policy(options: Any) -> ConversationPolicy:
    """How conversations replay (``--history``, ``--max-context-tokens``, ``--turn-think-time``, ...); a bad
    value is a :class:`~llmload.common.errors.ConfigError`."""
    return ConversationPolicy(
        history=_opt(options, "history"),
        max_context_tokens=_opt(options, "max_context_tokens"),
        context_policy=_opt(options, "context_policy"),
        think=_opt(options, "turn_think_time") or "",
        reading_speed=float(_opt(options, "reading_speed") or 0.0),
        keep_reasoning=bool(_opt(options, "keep_reasoning")),
        seed=int(_opt(options, "seed")),
        output_len=_opt(options, "max_tokens") or getattr(options, "output_len", None)
        or _opt(options, "sharegpt_output_len"),
        tool_latency=_opt(options, "tool_latency") or "", max_tool_rounds=int(_opt(options, "max_tool_rounds")))


def chat_backend_for_conversations(options: Any) -> str | None:
    """``--multi-turn`` sends chat messages: the backend to use instead of the given one, or None to keep it.
    vLLM's completions dialect (the default) becomes ``openai-chat``; another non-chat dialect is an error."""
    from llmload.client.backends import get_backend

    if not _opt(options, "multi_turn"):
        return None
    backend = _opt(options, "backend")
    if get_backend(backend).chat:
        return None
    if backend in ("vllm", "openai"):
        return "openai-chat"
    raise ConfigError(f"--multi-turn sends chat messages, and --backend {backend} has no chat dialect: use "
                      "--backend openai-chat (or modular-chat)")


#: conversation options that mean nothing without ``--multi-turn`` (their flags and defaults: the option table)
_CONVERSATION_ONLY = ("max_turns", "history", "max_context_tokens", "context_policy", "turn_think_time",
                      "reading_speed", "system_prompt_len", "keep_reasoning", "tool_latency", "max_tool_rounds")


def check_conversation_options(options: Any) -> ConversationPolicy | None:
    """The run's conversation policy (None: a single-request run). A conversation option without
    ``--multi-turn``, or ``--multi-turn`` on a dataset without conversations, is a ConfigError."""
    if not _opt(options, "multi_turn"):
        for dest in _CONVERSATION_ONLY:
            if _opt(options, dest) != option(dest).default:
                raise ConfigError(f"{option(dest).flag} applies to conversations: add --multi-turn")
        return None
    name = _opt(options, "dataset_name")
    if name != "sharegpt":
        raise ConfigError(f"--multi-turn replays ShareGPT conversations; --dataset-name {name} has none")
    if _opt(options, "keep_reasoning") and _opt(options, "history") != "live":
        raise ConfigError("--keep-reasoning puts the server's reasoning into the history: it needs --history live")
    return conversation_policy(options)


def session_policy(options: Any) -> SessionPolicy:
    """How agentic sessions replay (``--time-scale``, ``--max-idle``, ``--stream-all``); a bad value is a
    ConfigError."""
    return SessionPolicy(time_scale=float(_opt(options, "time_scale")), max_idle=float(_opt(options, "max_idle")),
                         stream_all=bool(_opt(options, "stream_all")))


def replays_sessions(options: Any) -> bool:
    """``--dataset-name weka_trace``: agentic sessions, each a sample that makes many calls."""
    return _opt(options, "dataset_name") in SESSION_DATASETS


def mooncake_keys(options: Any) -> MooncakeKeys:
    """A Mooncake trace's field names and timestamp unit (vLLM's ``--timed-trace-label-*`` and
    ``--timed-trace-sec-multiplier``; the defaults are Mooncake's)."""
    default = MooncakeKeys()
    return MooncakeKeys(timestamp=_opt(options, "timed_trace_label_timestamp") or default.timestamp,
                        input_length=_opt(options, "timed_trace_label_input_length") or default.input_length,
                        output_length=_opt(options, "timed_trace_label_output_length") or default.output_length,
                        hash_ids=_opt(options, "timed_trace_label_hash_ids") or default.hash_ids,
                        seconds_per_unit=_opt(options, "timed_trace_sec_multiplier") or default.seconds_per_unit)
