"""Start ``llmload sim`` as a child process on a free loopback port, and stop it by its PID."""

from __future__ import annotations

import re
import selectors
import subprocess
import sys
import time
from collections.abc import Sequence

from llmload.common.errors import LLMLoadError
from llmload.processes.children import child_env, start_child, stop_child

_READY = re.compile(r"listening on (http://\S+)")


class SimProcess:
    """A running simulator; use as a context manager or call :meth:`stop`.

    The simulator dies with this process (:mod:`llmload.processes.children`), and is stopped if start-up is interrupted.
    """

    def __init__(self, args: Sequence[str] = (), *, timeout_s: float = 60.0, quiet: bool = True) -> None:
        cmd = [sys.executable, "-m", "llmload.cli", "sim", "--host", "127.0.0.1", "--port", "0", *args]
        self.proc = start_child(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL if quiet else None,
            text=True,
            env=child_env(),
        )
        try:
            self.url = self._wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout_s: float) -> str:
        assert self.proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
                break
            line = self.proc.stdout.readline()
            if not line:
                break
            match = _READY.search(line)
            if match:
                return match.group(1)
        self.stop()
        raise LLMLoadError("the built-in simulator (llmload sim) did not start; run 'llmload sim' to see why")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self, timeout_s: float = 10.0) -> None:
        stop_child(self.proc, timeout_s)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> SimProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
