"""Child processes that die with their parent: the auto-started simulator, local worker processes.

Each child runs in its own session (a Ctrl-C at the terminal reaches only llmload, which stops the children in
order) and asks Linux for ``PR_SET_PDEATHSIG``: if llmload itself is killed (SIGKILL, OOM), the kernel sends
the child SIGTERM, so nothing is left orphaned holding a port.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

_PR_SET_PDEATHSIG = 1


def _die_with(parent_pid: int) -> Callable[[], None] | None:
    """A ``preexec_fn`` that sets the parent-death signal (Linux only; None elsewhere)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


def start_child(cmd: Sequence[str], **popen_kwargs: Any) -> subprocess.Popen:
    """``subprocess.Popen(cmd)`` in a new session, terminated by the kernel if this process dies."""
    return subprocess.Popen(list(cmd), start_new_session=True, preexec_fn=_die_with(os.getpid()),
                            **popen_kwargs)


def stop_child(proc: subprocess.Popen, timeout_s: float = 10.0) -> None:
    """SIGTERM the child by its PID, SIGKILL it after ``timeout_s``, and reap it."""
    if proc.poll() is not None:
        return
    try:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    except ProcessLookupError:
        pass


def wait_for(proc: subprocess.Popen) -> int:
    """``proc.wait()`` during which this process's signal handlers still run promptly; the exit status.

    Python runs a handler between bytecodes. A signal that arrives just before a blocking ``waitpid`` starts
    (or that another thread takes) leaves the handler waiting until the child exits by itself, so a SIGTERM
    meant to be passed on to the child never is. A timed ``Popen.wait`` polls in sleeps of at most 50 ms,
    after each of which pending handlers run.
    """
    while True:
        try:
            return proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            continue


#: secrets a child never needs in its environment (local workers get the key from the master's job)
SECRET_ENV = ("OPENAI_API_KEY", "LLMLOAD_API_KEY", "LLMLOAD_CLUSTER_TOKEN")


def child_env() -> dict[str, str]:
    """This process's environment without the secrets in :data:`SECRET_ENV`."""
    return {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
