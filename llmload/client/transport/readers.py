"""The one place that chooses the reader: the compiled one (``_cread``, built by ``pip install`` where a C compiler
is found) or its pure-Python twin (:mod:`llmload.client.transport.pyread`). Both give the same lines, events and
records for the same bytes, however they are split into reads (tests/integration/test_reader_twins.py).

``LLMLOAD_READER`` decides: unset or ``auto`` takes the compiled reader where it was built, else the Python one
(and :func:`fallback_note` says so once per run); ``python`` forces the Python reader; ``compiled`` insists on the
compiled one (a one-line error where it was not built).
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from llmload.common.errors import ConfigError

READER_ENV = "LLMLOAD_READER"
COMPILED, PYTHON = "compiled", "python"
#: the extension module setup.py builds from _cread.c
COMPILED_MODULE = "llmload.client.transport._cread"
CHOICES = ("auto", COMPILED, PYTHON)


@dataclass(frozen=True)
class Reader:
    """One reader's three pieces (docs/design.md, "The compiled reader")."""

    #: ``"compiled"`` or ``"python"``: what the result JSON's ``client.reader`` says
    name: str
    #: one response's framing undone into timestamped lines
    Decoder: Callable[[], Any]
    #: one wake-up's reads of every ready socket (None where there is no epoll: each request reads its own)
    ReadLoop: Callable[..., Any] | None
    #: a slice of stream lines into events
    pick_events: Callable[..., list[Any]]
    #: why the compiled reader is not the one in use although nothing asked for Python (None: nothing to say)
    fallback: str | None = None


def compiled_module() -> ModuleType | None:
    """The compiled reader's module, or None where it was not built (no compiler at install, a failed build)."""
    try:
        return importlib.import_module(COMPILED_MODULE)
    except ImportError:
        return None


def requested() -> str:
    """What ``LLMLOAD_READER`` asks for: ``auto`` (unset), ``compiled`` or ``python``."""
    value = os.environ.get(READER_ENV, "").strip().lower() or "auto"
    if value not in CHOICES:
        raise ConfigError(f"{READER_ENV}={value!r}: expected one of {', '.join(CHOICES)}")
    return value


def chosen() -> Reader:
    """The reader this process uses now (``LLMLOAD_READER`` is read each time: tests switch it)."""
    return _reader(requested())


def named(name: str) -> Reader:
    """The reader called ``name`` (``compiled`` raises :class:`ConfigError` where it was not built)."""
    return _reader(name)


def available() -> tuple[str, ...]:
    """The readers this installation has: ``("compiled", "python")`` or ``("python",)``."""
    return (COMPILED, PYTHON) if compiled_module() is not None else (PYTHON,)


def fallback_note() -> str | None:
    """The one line a run prints where it reads with Python only because the compiled reader was not built."""
    return chosen().fallback


@functools.cache
def _reader(name: str) -> Reader:
    import llmload.client.transport.pyread as pyread

    module = compiled_module() if name != PYTHON else None
    if name == COMPILED and module is None:
        raise ConfigError(f"{READER_ENV}=compiled, but the compiled reader was not built (no C compiler when "
                          "llmload was installed?): reinstall with gcc present, or unset it")
    if module is not None:
        return Reader(COMPILED, module.Decoder, getattr(module, "ReadLoop", None), module.pick_events)
    fallback = None
    if name == "auto":
        fallback = ("the compiled reader was not built (no C compiler when llmload was installed?): reading with "
                    "Python, which is exact to about 20,000 tokens/s per process; reinstall with gcc present, or "
                    f"set {READER_ENV}=python to silence this")
    # (its ReadLoop needs epoll: the reactor looks for the unpatched one, which gevent's select module hides)
    return Reader(PYTHON, pyread.Decoder, pyread.ReadLoop, pyread.pick_events, fallback)
