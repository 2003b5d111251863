"""`import llmload` is cheap and every name in its public API resolves."""

from __future__ import annotations

import subprocess
import sys

import llmload


def test_every_public_name_resolves():
    for name in llmload.__all__:
        assert getattr(llmload, name) is not None, name


def test_import_does_not_pull_in_gevent_or_transformers():
    # the simulator runs its own epoll loop: importing llmload must not monkey-patch it with gevent
    code = "import sys, llmload; print(sorted(m for m in ('gevent', 'locust', 'transformers') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"
