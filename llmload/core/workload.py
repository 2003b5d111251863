"""What a run sends, from its options: the samples (dataset + tokenizer) and the schedule spec. The same
function serves ``llmload bench``'s argparse namespace and Locust's parsed options (one set of dest names,
declared once in :mod:`llmload.options`)."""

from __future__ import annotations

from typing import Any

from llmload.core.conversation import ConversationPolicy
from llmload.core.schedule import ScheduleSpec
from llmload.errors import ConfigError


def _opt(options: Any, name: str, default: Any = None) -> Any:
    value = getattr(options, name, default)
    return default if value is None or value == "" else value


def schedule_spec(options: Any) -> ScheduleSpec:
    """The arrival options (``--request-rate``, ``--burstiness``, ramps, ``--constant-rate``, ``--rate-shape``)."""
    return ScheduleSpec(request_rate=float(_opt(options, "request_rate", float("inf"))),
                        burstiness=float(_opt(options, "burstiness", 1.0)), seed=int(_opt(options, "seed", 0)),
                        ramp_up_strategy=_opt(options, "ramp_up_strategy"),
                        ramp_up_start_rps=_opt(options, "ramp_up_start_rps"),
                        ramp_up_end_rps=_opt(options, "ramp_up_end_rps"),
                        constant_rate=bool(_opt(options, "constant_rate", False)),
                        rate_shape=_opt(options, "rate_shape"), trace=_opt(options, "dataset_name") == "trace")


def dataset_options(options: Any) -> dict[str, Any]:
    """The keyword arguments :func:`llmload.datasets.load_samples` takes for ``--dataset-name``.

    ``--max-tokens`` (the Locust plugin's older spelling) fixes every output length whatever the dataset."""
    name = _opt(options, "dataset_name", "sharegpt")
    fixed = _opt(options, "max_tokens", 0) or None
    if name == "sharegpt":
        return {"fixed_output_len": fixed or _opt(options, "sharegpt_output_len"),
                "multi_turn": bool(_opt(options, "multi_turn", False)), "max_turns": _opt(options, "max_turns"),
                "system_prompt_len": _opt(options, "system_prompt_len")}
    if name == "prefix_repetition":
        return {"prefix_len": _opt(options, "prefix_repetition_prefix_len", 256),
                "suffix_len": _opt(options, "prefix_repetition_suffix_len", 256),
                "num_prefixes": _opt(options, "prefix_repetition_num_prefixes", 10),
                "output_len": fixed or _opt(options, "prefix_repetition_output_len", 128)}
    if name == "random":
        return {"input_len": _opt(options, "random_input_len", 1024),
                "output_len": fixed or _opt(options, "random_output_len", 128),
                "range_ratio": _opt(options, "random_range_ratio", 0.0),
                "prefix_len": _opt(options, "random_prefix_len", 0)}
    if name == "trace":
        return {"trace_format": _opt(options, "trace_format"), "time_scale": _opt(options, "time_scale", 1.0),
                "trace_start": _opt(options, "trace_start", 0.0), "trace_duration": _opt(options, "trace_duration"),
                "prompt_path": _opt(options, "trace_prompts")}
    return {"default_output_len": fixed or _opt(options, "custom_output_len", 256)}


def forces_output_len(options: Any) -> bool:
    """A trace fixes every output length: force it with ``max_tokens`` + ``ignore_eos``."""
    return bool(_opt(options, "ignore_eos", False)) or _opt(options, "dataset_name") == "trace"


def conversation_policy(options: Any) -> ConversationPolicy:
    """How conversations replay (``--history``, ``--max-context-tokens``, ``--turn-think-time``, ...); a bad
    value is a :class:`~llmload.errors.ConfigError`."""
    return ConversationPolicy(
        history=_opt(options, "history", "recorded"),
        max_context_tokens=_opt(options, "max_context_tokens"),
        context_policy=_opt(options, "context_policy", "end"),
        think=_opt(options, "turn_think_time", ""),
        reading_speed=float(_opt(options, "reading_speed", 0.0)),
        keep_reasoning=bool(_opt(options, "keep_reasoning", False)),
        seed=int(_opt(options, "seed", 0)),
        output_len=_opt(options, "max_tokens", 0) or _opt(options, "sharegpt_output_len"))


def chat_backend_for_conversations(options: Any) -> str | None:
    """``--multi-turn`` sends chat messages: the backend to use instead of the given one, or None to keep it.
    vLLM's completions dialect (the default) becomes ``openai-chat``; another non-chat dialect is an error."""
    from llmload.client.backends import get_backend

    if not _opt(options, "multi_turn", False):
        return None
    backend = _opt(options, "backend", "vllm")
    if get_backend(backend).chat:
        return None
    if backend in ("vllm", "openai"):
        return "openai-chat"
    raise ConfigError(f"--multi-turn sends chat messages, and --backend {backend} has no chat dialect: use "
                      "--backend openai-chat (or modular-chat)")


#: conversation options that mean nothing without ``--multi-turn`` (dest, flag, default)
_CONVERSATION_ONLY = (("max_turns", "--max-turns", None), ("history", "--history", "recorded"),
                      ("max_context_tokens", "--max-context-tokens", None),
                      ("context_policy", "--context-policy", "end"), ("turn_think_time", "--turn-think-time", None),
                      ("reading_speed", "--reading-speed", None), ("system_prompt_len", "--system-prompt-len", None),
                      ("keep_reasoning", "--keep-reasoning", False))


def check_conversation_options(options: Any) -> ConversationPolicy | None:
    """The run's conversation policy (None: a single-request run). A conversation option without
    ``--multi-turn``, or ``--multi-turn`` on a dataset without conversations, is a ConfigError."""
    if not _opt(options, "multi_turn", False):
        for dest, flag, default in _CONVERSATION_ONLY:
            if _opt(options, dest, default) != default:
                raise ConfigError(f"{flag} applies to conversations: add --multi-turn")
        return None
    name = _opt(options, "dataset_name", "sharegpt")
    if name != "sharegpt":
        raise ConfigError(f"--multi-turn replays ShareGPT conversations; --dataset-name {name} has none")
    if _opt(options, "keep_reasoning", False) and _opt(options, "history", "recorded") != "live":
        raise ConfigError("--keep-reasoning puts the server's reasoning into the history: it needs --history live")
    return conversation_policy(options)
