"""Turn Locust's parsed options into the run's pieces: the target's model and tokenizer, the samples, the
schedule, and the settings every LLM user class gets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from llmload.core.schedule import LiveSchedule, Schedule
from llmload.core.workload import (
    chat_backend_for_conversations,
    check_conversation_options,
    dataset_options,
    schedule_spec,
)
from llmload.errors import LLMLoadError
from llmload.options import api_key

if TYPE_CHECKING:
    from llmload.client.users import LLMUser


@dataclass
class Workload:
    samples: list[Any]
    tokenizer: Any
    tokenizer_id: str
    model: str


def resolve_target(opts: Any, host: str) -> tuple[str, str | None, bool]:
    """:func:`llmload.target.resolve_target`, but a server that cannot say leaves the model unset: the first
    request will say what is wrong with it."""
    from llmload.target import resolve_target as resolve

    try:
        return resolve(opts, host, api_key(opts)) if host else (getattr(opts, "model", "") or "", None, False)
    except LLMLoadError:
        return getattr(opts, "model", "") or "", None, False


def load_workload(opts: Any, host: str) -> Workload:
    """Dataset and tokenizer, as ``llmload bench`` loads them. Raises LLMLoadError with one line."""
    from llmload._compat import import_transformers
    from llmload.datasets import load_samples
    from llmload.errors import DatasetError
    from llmload.options import prompt_count
    from llmload.tokenizer import load_tokenizer

    model, hint, simulator = resolve_target(opts, host)
    tokenizer_id = getattr(opts, "tokenizer", "") or hint or model or "builtin"
    import_transformers()
    tokenizer = load_tokenizer(tokenizer_id, trust_remote_code=bool(getattr(opts, "trust_remote_code", False)))
    num_prompts = prompt_count(opts, simulator=simulator)
    samples = load_samples(opts.dataset_name, getattr(opts, "dataset_path", "") or None, tokenizer, num_prompts,
                           int(getattr(opts, "seed", 0) or 0), **dataset_options(opts))
    if not samples:
        raise DatasetError("the dataset gave no usable prompts")
    return Workload(samples, tokenizer, tokenizer_id, model)


def user_classes(environment: Any) -> list[type[LLMUser]]:
    from llmload.client.users import LLMUser

    return [cls for cls in environment.user_classes if issubclass(cls, LLMUser)]


def class_weights(environment: Any) -> list[tuple[str, float]]:
    """``(name, weight)`` of each LLM user class, for the open loop's per-request class draw."""
    return [(cls.__name__, float(getattr(cls, "fixed_count", 0) or getattr(cls, "weight", 1) or 1))
            for cls in user_classes(environment)]


def build_schedule(opts: Any, samples: list[Any], environment: Any, live: bool) -> Schedule | LiveSchedule:
    """The run's schedule: finite and exactly ``llmload bench``'s headless; steerable in the web UI."""
    spec = schedule_spec(opts)
    classes = class_weights(environment)
    if live:
        rate = spec.request_rate if spec.request_rate != float("inf") else 1.0
        return LiveSchedule(samples, rate, spec.burstiness, spec.seed, classes)
    return Schedule.build(spec, samples, classes)


def configure_classes(environment: Any, opts: Any, model: str) -> None:
    """Give every LLM user class the run's settings, unless the locustfile set them on the class itself."""
    from llmload.core.arrivals import parse_think_time
    from llmload.core.settings import UserSettings

    think = parse_think_time(opts.think_time) if getattr(opts, "think_time", "") else None
    settings = UserSettings.from_options(opts, model=model, api_key=api_key(opts),
                                         conversation=check_conversation_options(opts)).attributes()
    settings["think"] = staticmethod(think) if think is not None else None
    for cls in user_classes(environment):
        # what the locustfile itself set on the class stays; the rest follows the options on every test start
        own = cls.__dict__.get("llmload_own")
        if own is None:
            own = frozenset(cls.__dict__)
            cls.llmload_own = own
        for name, value in settings.items():
            if name not in own:
                setattr(cls, name, value)


def conversation_settings(opts: Any, environment: Any) -> None:
    """A locustfile with a :class:`~llmload.client.users.ConversationUser` runs as ``--multi-turn``; ``--multi-turn``
    with vLLM's completions dialect switches to chat (docs/conversations.md). Checks the conversation options."""
    if any(getattr(cls, "multi_turn", False) for cls in user_classes(environment)):
        opts.multi_turn = True
    chat = chat_backend_for_conversations(opts)
    if chat is not None:
        opts.backend = chat
    check_conversation_options(opts)
