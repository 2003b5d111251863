"""Workarounds for running third-party imports under gevent's monkey-patching."""

from __future__ import annotations

import os
import select
import sys


def import_transformers() -> None:
    """Import transformers (and huggingface_hub) safely after gevent has patched ``select``.

    Locust patches the standard library on import, which removes ``select.epoll``. huggingface_hub pulls in
    httpcore2, which imports trio when it is installed, and trio's module body needs ``select.epoll``.
    Put the original back for the duration of the import; nothing here runs trio.
    """
    if "transformers" in sys.modules and "huggingface_hub.hf_api" in sys.modules:
        return
    # transformers announces at import that PyTorch is missing; we only need tokenizers
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    restored = False
    if not hasattr(select, "epoll"):
        try:
            from gevent.monkey import get_original

            select.epoll = get_original("select", "epoll")  # type: ignore[attr-defined]
            restored = True
        except (ImportError, AttributeError):
            pass
    try:
        import huggingface_hub.hf_api  # noqa: F401
        import transformers  # noqa: F401
    finally:
        if restored:
            del select.epoll  # type: ignore[attr-defined]
