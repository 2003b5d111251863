"""`import llmload` is cheap and every name in its public API resolves."""

from __future__ import annotations

import subprocess
import sys


def _run(code: str) -> str:
    # a fresh interpreter: some names load Locust, which monkey-patches the process with gevent
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_every_public_name_resolves():
    out = _run("import llmload; print(sorted(n for n in llmload.__all__ if getattr(llmload, n) is None))")
    assert out == "[]"


def test_import_does_not_pull_in_gevent_or_transformers():
    # the simulator runs its own epoll loop: importing llmload must not monkey-patch it with gevent
    out = _run("import sys, llmload; print(sorted(m for m in ('gevent', 'locust', 'transformers') if m in sys.modules))")
    assert out == "[]"
