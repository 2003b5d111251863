"""The run's bench flags as ``llmload k8s render`` takes them: checked with bench's own parser (exit 2 for a bad
one, before anything is written), refused where the manifests set them, and for the web UI turned into the
``LLMLOAD_*`` variables ``locust -f`` reads (the option table names each one)."""

from __future__ import annotations

import argparse
from typing import Any

from llmload.common.errors import ConfigError

#: flags the manifests set themselves, and what to use instead
SET_BY_MANIFESTS = {
    "--master": "the master Job is a master", "--worker": "the worker Job's pods are workers",
    "--processes": "use --workers N (pods)", "--expect-workers": "use --workers N",
    "--master-bind-host": "the master listens on its pod's address",
    "--master-bind-port": "use --master-port", "--master-host": "workers find the master's Service",
    "--base-url": "use llmload k8s render --base-url", "--host": "use --base-url", "--port": "use --base-url",
    "--model": "use llmload k8s render --model", "--tokenizer": "use --tokenizer or --tokenizer-claim",
    "--result-dir": "results go to the results PVC at /results", "--save-result": "always on",
    "--api-key-file": "the API key comes from the Secret <name>-api-key as an environment variable",
    "--cluster-token-file": "the cluster token comes from the Secret <name>-cluster-token",
}


def _bench_parser() -> argparse.ArgumentParser:
    from llmload.options import add_bench_arguments

    parser = argparse.ArgumentParser(prog="llmload k8s render (bench flags)", add_help=False,
                                     argument_default=argparse.SUPPRESS, exit_on_error=False)
    add_bench_arguments(parser)
    return parser


def check_bench_flags(flags: list[str]) -> dict[str, Any]:
    """Parse ``flags`` as bench's; returns only the options given (dest -> value)."""
    for flag in flags:
        name = flag.split("=", 1)[0]
        if name in SET_BY_MANIFESTS:
            raise ConfigError(f"{name} is set by the manifests: {SET_BY_MANIFESTS[name]}")
    parser = _bench_parser()
    try:
        given, unknown = parser.parse_known_args(flags)
    except (argparse.ArgumentError, argparse.ArgumentTypeError) as exc:
        raise ConfigError(f"bench flags: {exc}") from None
    if unknown:
        raise ConfigError(f"not an llmload bench flag: {' '.join(unknown)}")
    return vars(given)


def ui_environment(flags: list[str]) -> dict[str, str]:
    """The web UI's ``LLMLOAD_*`` variables for ``flags`` (each a flag ``locust -f`` also takes)."""
    from llmload.options.spec import Scope
    from llmload.options.table import OPTIONS

    by_flag = {f: o for o in OPTIONS for f in o.flags}
    env: dict[str, str] = {}
    k = 0
    while k < len(flags):
        token = flags[k]
        name, eq, inline = token.partition("=")
        option = by_flag.get(name)
        if option is None:
            raise ConfigError(f"{token}: not an option (a value without its flag?)")
        if Scope.LOCUST not in option.scope or not option.env_var:
            raise ConfigError(f"{name} is llmload bench's only: locust -f (the web UI) does not take it")
        if option.nargs not in (None, "?"):
            raise ConfigError(f"{name} takes a list: set it in the web UI's start form or in a custom locustfile")
        if option.action in ("store_true", "store_false"):
            env[option.env_var] = "true" if option.action == "store_true" else "false"
            k += 1
            continue
        if name in SET_BY_MANIFESTS:
            raise ConfigError(f"{name} is set by the manifests: {SET_BY_MANIFESTS[name]}")
        if not eq and k + 1 >= len(flags):
            raise ConfigError(f"{name} needs a value")
        value = inline if eq else flags[k + 1]
        k += 1 if eq else 2
        _check_value(option, name, value)
        env[option.env_var] = value
    return env


def _check_value(option: Any, name: str, value: str) -> None:
    """The value as the option's own type and choices take it (what ``locust -f`` would say, said now)."""
    if option.choices and value not in option.choices:
        raise ConfigError(f"{name}: {value!r} is not one of {', '.join(option.choices)}")
    if option.type is not None:
        try:
            option.type(value)
        except (argparse.ArgumentTypeError, ValueError, ConfigError) as exc:
            raise ConfigError(f"{name}: {exc}") from None


def stop_timeout(given: dict[str, Any], default: float) -> float:
    return float(given.get("stop_timeout", default))
