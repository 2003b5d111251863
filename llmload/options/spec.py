"""What one llmload option is, as data: the table (:mod:`llmload.options.table`) is a tuple of these, and both
ways in (``llmload bench``'s argparse parser, Locust's configargparse parser for ``locust -f``) are generated
from it, so a flag's name, default, type and choices cannot drift apart between them."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: prefix of every option's environment variable (``locust -f`` reads them; ``llmload bench`` takes flags only)
ENV_PREFIX = "LLMLOAD_"


class Scope(enum.Flag):
    """Which ways in get an option."""

    BENCH = enum.auto()
    LOCUST = enum.auto()
    BOTH = BENCH | LOCUST


#: group key -> title, in ``llmload bench --help`` order (the titles are bench's argument groups)
GROUPS: tuple[tuple[str, str], ...] = (
    ("target", "target (none given: start the built-in simulator)"),
    ("workload", "workload"),
    ("request", "request shaping (sampling, extra body and headers, as vllm bench serve; docs/vllm-compat.md)"),
    ("trace", "trace replay (--dataset-name trace, mooncake or timed_trace; see docs/arrivals.md)"),
    ("conversations", "conversations (--multi-turn; see docs/conversations.md)"),
    ("sessions", "agentic sessions (--dataset-name weka_trace; see docs/agentic.md)"),
    ("arrivals", "arrivals"),
    ("metrics", "metrics"),
    ("timeouts", "timeouts and stopping"),
    ("distributed", "distributed (Locust's master/worker; docs/distributed.md)"),
    ("server", "server metrics and saturation (docs/observability.md)"),
    ("output", "output"),
    ("gates", "CI gates (exit 3 when missed)"),
    ("locust", "Locust only (locust -f)"),
    ("webui", "Locust's web UI (locust -f)"),
)
GROUP_KEYS = frozenset(key for key, _ in GROUPS)


@dataclass(frozen=True)
class Option:
    """One option. ``default`` is the single default of every way in; ``help`` is bench's text and Locust's too
    unless ``locust_help`` words it for ``locust -f`` (where e.g. ``--max-concurrency`` is per user)."""

    flags: tuple[str, ...]
    dest: str
    scope: Scope
    group: str
    help: str | None = None
    type: Callable[[str], Any] | None = None
    default: Any = None
    choices: tuple[str, ...] | None = None
    #: argparse action (``"store_true"``), None: store
    action: str | None = None
    nargs: str | int | None = None
    const: Any = None
    metavar: str | None = None
    #: environment variable for ``locust -f``, when it is not ``LLMLOAD_<DEST>`` (kept for compatibility)
    env: str | None = None
    #: never shown: a password field in Locust's web UI, hidden in its page
    secret: bool = False
    #: in the web UI's start form (Locust's ``include_in_web_ui``)
    web_ui: bool = True
    locust_help: str | None = None
    #: False: a field of the web UI's start form only; given on the command line it is refused
    cli: bool = True

    def __post_init__(self) -> None:
        if self.group not in GROUP_KEYS:
            raise ValueError(f"{self.flag}: unknown group {self.group!r}")
        if not self.flags or not all(f.startswith("--") for f in self.flags):
            raise ValueError(f"{self.dest}: flags must be long options, got {self.flags!r}")

    @property
    def flag(self) -> str:
        """The first (canonical) flag, used in messages."""
        return self.flags[0]

    @property
    def env_var(self) -> str | None:
        """The environment variable ``locust -f`` reads (None: bench only, or a form-only field)."""
        if Scope.LOCUST not in self.scope or not self.cli:
            return None
        return self.env or ENV_PREFIX + self.dest.upper()

    def help_for(self, scope: Scope) -> str | None:
        """The help text for one way in, with ``%(default)s`` filled in for Locust: its web UI shows the raw
        string as the form field's label, and argparse's formatter is not involved there."""
        if scope is Scope.BENCH:
            return self.help
        text = self.locust_help if self.locust_help is not None else self.help
        return None if text is None else text.replace("%(default)s", str(self.default))

    def argparse_kwargs(self, scope: Scope) -> dict[str, Any]:
        """``add_argument`` keyword arguments for one way in (only those set: ``store_true`` takes no
        ``type``/``choices``/``metavar``)."""
        given = {"type": self.type, "choices": self.choices, "action": self.action, "nargs": self.nargs,
                 "const": self.const, "metavar": self.metavar, "help": self.help_for(scope)}
        kwargs = {k: v for k, v in given.items() if v is not None}
        kwargs["dest"] = self.dest
        kwargs["default"] = self.default
        return kwargs
