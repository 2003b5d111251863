"""Shared fixtures: start the real ``llmload sim`` as a subprocess on 127.0.0.1 and always stop it by PID."""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

_LISTENING = re.compile(rb"llmload sim listening on http://127\.0\.0\.1:(\d+)")


def llmload_command() -> list[str]:
    """The installed ``llmload`` console script next to this interpreter (not a pyenv shim), else ``-c``."""
    script = Path(sys.executable).with_name("llmload")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from llmload.cli import main; sys.exit(main())"]


@dataclass
class Sim:
    """A running ``llmload sim`` process."""

    proc: subprocess.Popen
    port: int
    args: tuple[str, ...]
    stderr_path: Path
    banner: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stderr(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""


def _stop(proc: subprocess.Popen) -> None:
    """Terminate the process we started (and its workers, which share its process group), by PID."""
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the group we created with start_new_session
            except (ProcessLookupError, PermissionError):
                proc.kill()
            proc.wait(timeout=5)
        except ProcessLookupError:
            pass
    else:
        # the parent is gone; make sure no worker of ours outlives it
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if proc.stdout is not None:
        proc.stdout.close()


def launch_sim(args: tuple[str, ...], stderr_path: Path, timeout: float = 20.0) -> Sim:
    cmd = [*llmload_command(), "sim", "--host", "127.0.0.1", "--port", "0", *args]
    with open(stderr_path, "wb") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    deadline = time.monotonic() + timeout
    buf = b""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        while True:
            m = _LISTENING.search(buf)
            if m and b"\n" in buf[m.end():]:
                line = buf[m.start(): buf.index(b"\n", m.end())].decode()
                return Sim(proc=proc, port=int(m.group(1)), args=args, stderr_path=stderr_path, banner=line)
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"llmload sim did not start within {timeout} s: {cmd}\n{stderr_path.read_text()}")
            if not sel.select(timeout=left):
                continue
            data = os.read(proc.stdout.fileno(), 65536)
            if not data:
                proc.wait(timeout=5)
                raise RuntimeError(
                    f"llmload sim exited with {proc.returncode} before listening: {cmd}\n{stderr_path.read_text()}"
                )
            buf += data
    except BaseException:
        _stop(proc)
        raise
    finally:
        sel.close()


class SimFactory:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.sims: list[Sim] = []

    def __call__(self, *args: str, timeout: float = 20.0) -> Sim:
        path = self.tmp / f"sim-{len(self.sims)}.stderr"
        sim = launch_sim(tuple(str(a) for a in args), path, timeout)
        self.sims.append(sim)
        return sim

    def stop(self, sim: Sim) -> None:
        _stop(sim.proc)

    def close(self) -> None:
        for sim in self.sims:
            _stop(sim.proc)


@pytest.fixture
def start_sim(tmp_path: Path) -> Iterator[Callable[..., Sim]]:
    """``start_sim(*flags) -> Sim``: a fresh simulator for this test, stopped at teardown (also on failure)."""
    factory = SimFactory(tmp_path)
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture(scope="module")
def start_sim_module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Sim]]:
    """Like ``start_sim`` but the simulators live for the whole test module."""
    factory = SimFactory(tmp_path_factory.mktemp("sim"))
    try:
        yield factory
    finally:
        factory.close()
