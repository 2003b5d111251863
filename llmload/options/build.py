"""Generate the two parsers from the option table: ``llmload bench``'s argparse groups and the options added to
Locust's configargparse parser (environment variables, web UI form fields, secrets)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import llmload.options.table as table
from llmload.options.request_options import VLLM_INTERNAL_FLAGS
from llmload.options.spec import GROUPS, Scope
from llmload.options.table import options_for


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    """``llmload bench``'s flags, in its ``--help`` groups. Flags only: bench reads no ``LLMLOAD_*`` option
    variables (a stray one in a CI environment must not change a benchmark)."""
    options = options_for(Scope.BENCH)
    for key, title in GROUPS:
        members = [o for o in options if o.group == key]
        if not members:
            continue
        group = parser.add_argument_group(title)
        for option in members:
            group.add_argument(*option.flags, **option.argparse_kwargs(Scope.BENCH))
    for flag in VLLM_INTERNAL_FLAGS:
        parser.add_argument(flag, action=_VLLMInternal, nargs="?", help=argparse.SUPPRESS)


class _VLLMInternal(argparse.Action):
    """A ``vllm bench serve`` flag that drives vLLM itself: refused with one line saying why."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        parser.error(f"{option_string} is a vLLM-internal flag of vllm bench serve, not supported: "
                     f"{VLLM_INTERNAL_FLAGS.get(option_string or '', '')}")


def add_table_arguments(parser: argparse.ArgumentParser, dests: Sequence[str]) -> None:
    """These options of the table as ``llmload bench`` declares them, on another command's parser (``llmload
    ui`` passes them on to locust): one name, type, default and help for each."""
    for dest in dests:
        spec = table.option(dest)
        parser.add_argument(*spec.flags, **spec.argparse_kwargs(Scope.BENCH))


class _FormOnly(argparse.Action):
    """A web UI start-form field that has no command-line flag: given on the command line (or in a config file,
    which configargparse turns into one), it is refused with one line saying what to use instead."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        parser.error(f"{option_string} is not taken on the command line, where ps shows it to every user of the "
                     "host: use --api-key-file FILE, $LLMLOAD_API_KEY or $OPENAI_API_KEY (the web UI's start form "
                     "has a field for it)")


def add_locust_options(parser: Any) -> None:
    """llmload's options on Locust's parser (``LocustArgumentParser``, configargparse): each reads its
    ``LLMLOAD_*`` variable, and appears in the web UI's start form unless the table says otherwise.

    Added to the parser itself, not to an argument group: only ``LocustArgumentParser.add_argument`` takes
    ``include_in_web_ui``/``is_secret``, and only its actions reach the start form."""
    for option in options_for(Scope.LOCUST):
        kwargs = option.argparse_kwargs(Scope.LOCUST)
        if option.cli:
            kwargs["env_var"] = option.env_var
        else:
            kwargs["action"] = _FormOnly
        parser.add_argument(*option.flags, include_in_web_ui=option.web_ui, is_secret=option.secret, **kwargs)


def add_options(parser: Any) -> None:
    """The entry point Locust's ``events.init_command_line_parser`` calls (``llmload.plugin`` registers it)."""
    add_locust_options(parser)

