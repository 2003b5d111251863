"""The server a settings sweep starts for each setting (``--serve-cmd``): started in a process group of its own
with its output in a log file beside the setting's results, waited for until it answers, and stopped by its
process group (SIGTERM, then SIGKILL after a grace period), so nothing it started outlives the setting.
docs/sweep.md, "Server settings".
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from llmload.common.errors import LLMLoadError

#: what a server answers once it is ready: vLLM, SGLang and llmload sim serve /health; every OpenAI-style
#: server lists its models
READY_PATHS = ("/health", "/v1/models")
#: how often readiness is asked, and how long one ask may take
POLL_S = 0.5
ASK_TIMEOUT_S = 2.0


class ServerError(LLMLoadError):
    """The server of a setting exited at start-up or never became ready (exit 1)."""


class ServerProcess:
    """One setting's server: ``argv`` run with its stdout and stderr in ``log_path``."""

    def __init__(self, argv: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self.argv = argv
        self.log_path = log_path
        self.env = env
        self.proc: subprocess.Popen | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            try:
                self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, env=self.env, start_new_session=True)
            except OSError as exc:
                raise ServerError(f"cannot start {self.argv[0]!r}: {exc.strerror or exc}") from None

    def wait_ready(self, base_url: str, timeout: float, stopping: Callable[[], bool] = lambda: False) -> float:
        """Seconds until the server answered one of :data:`READY_PATHS` with 200. :class:`ServerError` (with
        its last log lines) when it exits first or ``timeout`` passes; returns early when ``stopping()``."""
        assert self.proc is not None
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        began = time.monotonic()
        while True:
            code = self.proc.poll()
            if code is not None:
                raise ServerError(f"the server exited with code {code} before it was ready{self._tail_note()}")
            if stopping():
                return time.monotonic() - began
            for path in READY_PATHS:
                try:
                    with opener.open(base_url.rstrip("/") + path, timeout=ASK_TIMEOUT_S) as resp:
                        if resp.status == 200:
                            return time.monotonic() - began
                except (urllib.error.URLError, OSError, ValueError):
                    pass
            if time.monotonic() - began > timeout:
                raise ServerError(f"the server did not answer {' or '.join(READY_PATHS)} at {base_url} within "
                                  f"{timeout:g} s{self._tail_note()}")
            time.sleep(POLL_S)

    def stop(self, grace: float = 30.0) -> int | None:
        """Stop the server's whole process group: SIGTERM, then SIGKILL after ``grace`` seconds; its exit code."""
        proc = self.proc
        if proc is None:
            return None
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        _reap_group(proc.pid)
        return proc.returncode

    def tail(self, lines: int = 8) -> list[str]:
        """The last lines of the server's log."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return []
        return [line for line in text.splitlines() if line.strip()][-lines:]

    def _tail_note(self) -> str:
        tail = self.tail()
        shown = " | ".join(line.strip()[:200] for line in tail)
        return f"; its last log lines ({self.log_path}): {shown}" if tail else f" (its log {self.log_path} is empty)"


def _reap_group(pgid: int) -> None:
    """SIGKILL whatever is left of the group (a child the server started that ignored SIGTERM)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
