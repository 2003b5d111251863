"""A stop signal is never lost while a process sits in a blocking wait.

Python runs a signal handler between bytecodes. A signal whose C-level handler runs while the main thread is
already in ``epoll_wait`` or ``waitpid``, without interrupting it, leaves the Python handler waiting for that
call to return by itself (seen: ``llmload sim --workers 2`` ignoring a SIGTERM sent right after "listening",
about 1 run in 50 under load). Each test makes that moment certain rather than lucky: the main thread blocks
SIGTERM, and a helper thread, which takes it instead, sends it once the kernel shows the main thread asleep in
a system call. Without the fix the child script hangs until the test's timeout.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

#: the script's prelude: ``signal_when_main_waits()`` starts the helper thread and blocks SIGTERM in main
_PRELUDE = textwrap.dedent("""
    import os, signal, sys, threading, time

    MAIN = threading.get_native_id()

    def _main_waits() -> bool:
        # the kernel function main sleeps in: "0" while it runs, futex_* while it waits for the GIL
        with open(f"/proc/self/task/{MAIN}/wchan") as f:
            where = f.read().strip()
        return where not in ("", "0") and "futex" not in where

    def _send() -> None:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # this thread takes it, not main
        deadline = time.monotonic() + 10
        while not _main_waits() and time.monotonic() < deadline:
            time.sleep(0.005)
        os.kill(os.getpid(), signal.SIGTERM)

    def signal_when_main_waits() -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        threading.Thread(target=_send, daemon=True).start()
""")

_SIM_WORKER = _PRELUDE + textwrap.dedent("""
    import socket
    from llmload.sim.config import SimConfig
    from llmload.sim.server.workers import run_worker

    sock = socket.create_server(("127.0.0.1", 0))
    signal_when_main_waits()
    run_worker(SimConfig(ttft_ms=1.0, itl_ms=1.0), sock, 0, None)  # an idle server: nothing else wakes it
    print("stopped")
""")

_CHILD_WAIT = _PRELUDE + textwrap.dedent("""
    import subprocess
    from llmload.processes.children import wait_for

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    signal.signal(signal.SIGTERM, lambda *_: child.terminate())  # what llmload ui and sweep-settings do
    signal_when_main_waits()
    print("stopped", wait_for(child))
""")


def _run(script: str) -> str:
    try:
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        raise AssertionError("the SIGTERM was taken but its handler never ran: the process still waits") from None
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_an_idle_simulator_worker_stops_on_a_signal_taken_by_another_thread():
    assert _run(_SIM_WORKER).strip() == "stopped"


def test_waiting_for_a_child_still_runs_the_handler_that_stops_it():
    assert _run(_CHILD_WAIT).strip() == "stopped -15"
