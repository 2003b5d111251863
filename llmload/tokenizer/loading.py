"""Load the tokenizer that turns dataset text into token counts, offline first.

``--tokenizer builtin`` is the small byte-level BPE shipped in ``llmload/data/tokenizer`` (trained on
the synthetic ShareGPT sample by ``datasets/make_tokenizer.py``); a directory is loaded as is; any
other name goes through ``transformers.AutoTokenizer``, from the local Hugging Face cache first and
from the hub only when ``HF_HUB_OFFLINE`` is not set. Every failure becomes one ``TokenizerError``.
transformers is imported inside the functions, so importing this module is cheap.
"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from llmload.common.errors import TokenizerError

BUILTIN = "builtin"
"""The ``--tokenizer`` value that selects the shipped tokenizer."""

HUB_TIMEOUT_S = 3.0
"""Seconds we wait for the hub to accept a connection before giving up."""

_TRUTHY = {"1", "true", "yes", "on"}


def builtin_tokenizer_dir() -> Path:
    """The directory of the shipped tokenizer (``tokenizer.json`` and friends)."""
    return Path(__file__).resolve().parent.parent / "data" / "tokenizer"


def _hub_offline() -> bool:
    return any(
        os.environ.get(k, "").strip().lower() in _TRUTHY for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def _fix_hint(name: str) -> str:
    return (
        f"cannot load tokenizer {name!r}: pass a local tokenizer directory, pre-download it into the "
        f"Hugging Face cache (hf download {name}), or use --tokenizer builtin"
    )


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__


def load_tokenizer(name_or_path: str, *, trust_remote_code: bool = False) -> Any:
    """Return a ``transformers`` tokenizer for ``builtin``, a local directory or a hub name.

    Raises ``TokenizerError`` (one line, says how to fix) instead of a traceback or a long network wait.
    """
    name = str(name_or_path).strip()
    if not name:
        raise TokenizerError(
            "empty --tokenizer: pass a local tokenizer directory, a model name, or 'builtin'"
        )
    if name == BUILTIN:
        path = builtin_tokenizer_dir()
        if not (path / "tokenizer.json").is_file():
            raise TokenizerError(
                f"the builtin tokenizer is missing from {path}: reinstall llmload or run datasets/make_tokenizer.py"
            )
        return _from_pretrained(str(path), name, local_only=True, trust_remote_code=False, fast_class=True)
    path = Path(name).expanduser()
    if path.is_dir():
        return _from_pretrained(str(path), name, local_only=True, trust_remote_code=trust_remote_code)
    if path.exists():
        raise TokenizerError(f"--tokenizer {name!r} is a file; pass the directory that holds tokenizer.json")
    if name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name:
        # Hub names look like "org/model"; anything else is a directory that is not there.
        raise TokenizerError(
            f"tokenizer directory {name!r} does not exist: pass an existing directory or use --tokenizer builtin"
        )
    try:
        return _from_pretrained(name, name, local_only=True, trust_remote_code=trust_remote_code)
    except TokenizerError:
        if _hub_offline():
            raise TokenizerError(_fix_hint(name) + " (HF_HUB_OFFLINE is set)") from None
    return _from_hub(name, trust_remote_code=trust_remote_code)


def load_counting_tokenizer(name_or_path: str, *, trust_remote_code: bool = False) -> Any:
    """The tokenizer a run counts tokens with: ``builtin`` without importing transformers
    (:class:`llmload.tokenizer.builtin.BuiltinTokenizer`, the same counts), anything else as
    :func:`load_tokenizer` loads it."""
    if str(name_or_path).strip() != BUILTIN:
        return load_tokenizer(name_or_path, trust_remote_code=trust_remote_code)
    from llmload.tokenizer.builtin import BuiltinTokenizer

    path = builtin_tokenizer_dir()
    try:
        return BuiltinTokenizer(path)
    except (OSError, ValueError, ImportError) as exc:  # missing or unreadable files; tokenizers' own errors
        raise TokenizerError(f"cannot load the builtin tokenizer from {path}: {_one_line(exc)}: reinstall "
                             "llmload or run datasets/make_tokenizer.py") from None


def _from_pretrained(
    target: str, name: str, *, local_only: bool, trust_remote_code: bool, fast_class: bool = False
) -> Any:
    """``AutoTokenizer.from_pretrained`` with errors translated; ``fast_class`` skips the Auto lookup."""
    from llmload.tokenizer.transformers_import import import_transformers

    import_transformers()  # under Locust's monkey-patching too (a locustfile's own load_tokenizer call)
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        if fast_class:  # our own tokenizer.json: importing the Auto machinery costs ~0.8 s
            from transformers import PreTrainedTokenizerFast

            return PreTrainedTokenizerFast.from_pretrained(target, local_files_only=True)
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(
            target, local_files_only=local_only, trust_remote_code=trust_remote_code
        )
    except Exception as exc:  # transformers raises OSError, ValueError, HTTP errors...
        if Path(target).is_dir():
            raise TokenizerError(f"cannot load tokenizer from directory {name!r}: {_one_line(exc)}") from None
        raise TokenizerError(_fix_hint(name)) from None


def _hub_reachable(timeout: float = HUB_TIMEOUT_S) -> bool:
    """Whether a TCP connection to the hub (``HF_ENDPOINT``) opens within ``timeout`` seconds.

    huggingface_hub retries unreachable hosts with backoff for most of a minute; probing first
    (DNS included, in a daemon thread) keeps an offline failure to a few seconds.
    """
    endpoint = urlsplit(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host = endpoint.hostname or "huggingface.co"
    port = endpoint.port or (80 if endpoint.scheme == "http" else 443)
    ok: list[bool] = []

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            ok.append(True)
        except OSError:
            pass

    thread = threading.Thread(target=probe, name="llmload-hub-probe", daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(ok)


def _from_hub(name: str, *, trust_remote_code: bool) -> Any:
    """Try the hub once it answers; unknown names and unreachable hubs fail fast."""
    if not _hub_reachable():
        raise TokenizerError(_fix_hint(name) + " (it is not in the local cache and the hub is unreachable)")
    return _from_pretrained(name, name, local_only=False, trust_remote_code=trust_remote_code)
