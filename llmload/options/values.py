"""What the parsed options mean, shared by ``llmload bench`` and ``locust -f``: where the API key comes from,
how many prompts, ``--max-tokens``, and re-typing what Locust's web form hands back."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from llmload.common.choices import SESSION_DATASETS, TRACE_DATASETS
from llmload.common.errors import ConfigError
from llmload.options.spec import Scope
from llmload.options.table import DEFAULT_PROMPTS, SIM_DEFAULT_PROMPTS, option, options_for

#: environment variables holding the API key, in the order they are looked at
API_KEY_ENV = ("LLMLOAD_API_KEY", "OPENAI_API_KEY")
#: the environment variable holding the cluster token (docs/distributed.md, "Authentication")
CLUSTER_TOKEN_ENV = "LLMLOAD_CLUSTER_TOKEN"


def option_value(opts: Any, dest: str) -> Any:
    """``opts``' value of the option ``dest``, or its default from the one table when it is unset or empty
    (Locust's web form gives "" back; a namespace built by hand may lack it). Every default lives in
    :mod:`llmload.options.table`: code that reads an option with a fallback reads it through here."""
    value = getattr(opts, dest, None)
    return option(dest).default if value is None or value == "" else value


def api_key(opts: Any) -> str | None:
    """The API key, or None: the web UI start form's field (``locust -f`` only; empty unless typed there), else
    ``--api-key-file``, else ``$LLMLOAD_API_KEY``, else ``$OPENAI_API_KEY``.

    Never from a command-line flag: ``ps`` shows every command line to every user of the host. A file that
    cannot be read, or holds no key, is a :class:`~llmload.common.errors.ConfigError` with a one-line message that
    names the file, never its content."""
    typed = getattr(opts, "api_key", None)
    if typed:
        return str(typed)
    path = getattr(opts, "api_key_file", None)
    if path:
        return _key_from_file(str(path))
    for name in API_KEY_ENV:
        if value := os.environ.get(name):
            return value
    return None


def cluster_token(opts: Any) -> str | None:
    """The cluster token workers prove they know, or None (every worker is trusted): ``--cluster-token-file``
    (``-``: stdin), else ``$LLMLOAD_CLUSTER_TOKEN``. Like the API key, never a flag; ConfigError (one line, the
    file named, never its content) when the file cannot be read or is empty."""
    path = getattr(opts, "cluster_token_file", None)
    if not path:
        return os.environ.get(CLUSTER_TOKEN_ENV) or None
    return _secret_from_file(str(path), "--cluster-token-file", stdin=True)


def _secret_from_file(path: str, flag: str, *, stdin: bool = False) -> str:
    """The stripped text of ``path`` (``-``: standard input, where ``stdin``); ConfigError naming the file, never
    its content, when it cannot be read, is not text or is empty."""
    import sys

    try:
        secret = (sys.stdin.read() if stdin and path == "-" else Path(path).read_text()).strip()
    except OSError as exc:
        raise ConfigError(f"{flag}: cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{flag}: {path} is not a text file") from None
    if not secret:
        raise ConfigError(f"{flag}: {path} is empty")
    return secret


def _key_from_file(path: str) -> str:
    key = _secret_from_file(path, "--api-key-file")
    if "\n" in key or "\r" in key:
        # sent as an HTTP header: a second line would be refused by the server, or worse, read as a header
        raise ConfigError(f"--api-key-file: {path} holds more than one line; put only the key in it")
    return key


def prompt_count(opts: Any, *, simulator: bool) -> int | None:
    """``--num-prompts``' meaning: as given; without it 1000, or 200 against the built-in simulator (``llmload
    sim``, started by bench or found through :func:`llmload.core.target.describe_server`). A trace without it
    replays its whole window, a folder of sessions every session: None."""
    if opts.dataset_name in TRACE_DATASETS or opts.dataset_name in SESSION_DATASETS:
        return opts.num_prompts
    return opts.num_prompts or (SIM_DEFAULT_PROMPTS if simulator else DEFAULT_PROMPTS)


def normalize_options(opts: Any) -> None:
    """Re-type and check llmload's options after Locust's web UI start form set them, as the command line would.

    Locust converts a form field with ``type(current value)``: an option whose default is None
    (``--num-prompts``, ``--max-concurrency``, ...) gets a string, an empty field ``""``, and nothing is
    validated (a request rate of -1 passes). Here an empty field goes back to the default and every other value
    goes through the option's type and choices; a bad one is a :class:`~llmload.common.errors.ConfigError`. Call it at
    test start, before the options are used."""
    for spec in options_for(Scope.LOCUST):
        value = getattr(opts, spec.dest, None)
        if spec.action is not None or spec.nargs is not None or value is None:
            continue
        if isinstance(value, (bool, list, tuple)):  # flags and list-valued options: typed by Locust already
            continue
        text = str(value)
        if text == "":
            value = spec.default
            text = value if isinstance(value, str) else ""
        if text and spec.type is not None:
            try:
                value = spec.type(text)
            except argparse.ArgumentTypeError as exc:
                raise ConfigError(f"{spec.flag}: {exc}") from None
        if spec.choices is not None and value is not None and value not in spec.choices:
            raise ConfigError(f"{spec.flag}: expected one of {', '.join(spec.choices)}, got {value!r}")
        setattr(opts, spec.dest, value)
