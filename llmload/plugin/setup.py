"""What ``locust -f`` adds to the run core's set-up (:class:`llmload.core.run.Run`): the LLM user classes of
the locustfile, their weights for the open loop's class draw, and the settings each class gets."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llmload.options import api_key

if TYPE_CHECKING:
    from llmload.client.users import LLMUser
    from llmload.core.run import RunConfig


def user_classes(environment: Any) -> list[type[LLMUser]]:
    from llmload.client.users import LLMUser

    return [cls for cls in environment.user_classes if issubclass(cls, LLMUser)]


def class_weights(environment: Any) -> list[tuple[str, float]]:
    """``(name, weight)`` of each LLM user class, for the open loop's per-request class draw."""
    return [(cls.__name__, float(getattr(cls, "fixed_count", 0) or getattr(cls, "weight", 1) or 1))
            for cls in user_classes(environment)]


def configure_classes(environment: Any, opts: Any, model: str, config: RunConfig) -> None:
    """Give every LLM user class the run's settings, unless the locustfile set them on the class itself."""
    from llmload.core.arrivals import parse_think_time
    from llmload.core.settings import UserSettings

    think = parse_think_time(config.think) if config.think else None
    settings = UserSettings.from_options(opts, model=model, api_key=api_key(opts),
                                         conversation=config.conversation).attributes()
    settings["think"] = staticmethod(think) if think is not None else None
    for cls in user_classes(environment):
        # what the locustfile itself set on the class stays; the rest follows the options on every test start
        own = cls.__dict__.get("llmload_own")
        if own is None:
            own = own_settings(cls)
            cls.llmload_own = own
        for name, value in settings.items():
            if name not in own:
                setattr(cls, name, value)


def own_settings(cls: type) -> frozenset[str]:
    """The attributes a class sets itself or takes from a ready-made class between it and ``LLMUser`` (``ChatUser``'s
    dialect, ``EmbeddingsUser``'s): those stay whatever the options say; ``LLMUser``'s defaults give way to them."""
    from llmload.client.users import LLMUser

    names: set[str] = set()
    for base in cls.__mro__:
        if base is LLMUser:
            break
        names.update(base.__dict__)
    return frozenset(names)


def conversation_settings(opts: Any, environment: Any) -> None:
    """A locustfile with a :class:`~llmload.client.users.ConversationUser` runs as ``--multi-turn`` (and
    :meth:`RunConfig.from_options <llmload.core.run.RunConfig.from_options>` then switches vLLM's completions
    dialect to chat; docs/conversations.md)."""
    if any(getattr(cls, "multi_turn", False) for cls in user_classes(environment)):
        opts.multi_turn = True


def install_shape(run: Any) -> None:
    """``--user-shape``: Locust's LoadTestShape, built from the option (closed loop)."""
    spec = getattr(run.options, "user_shape", "")
    if not spec or run.role == "worker":
        return
    from llmload.shapes import parse_shape, user_shape_class

    shape = user_shape_class(parse_shape(spec, "--user-shape"))()
    shape.runner = run.runner
    run.environment.shape_class = shape


def workload_key(opts: Any, host: str) -> tuple[tuple[str, str], ...]:
    """What the workload depends on: the host and llmload's own options. Locust's (the user count, the run time
    it fills in at the start) do not, so a test start after the set-up at ``init`` loads nothing again."""
    from llmload.options import Scope, options_for

    return (("host", host), *((o.dest, str(getattr(opts, o.dest, None))) for o in options_for(Scope.LOCUST)))
