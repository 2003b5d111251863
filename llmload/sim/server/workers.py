"""Processes: bind the port, run one server, or fork ``--workers N`` sharing it with SO_REUSEPORT."""

from __future__ import annotations

import os
import signal
import socket
import sys
from collections.abc import Callable

from llmload.sim.config import SimConfig
from llmload.sim.metrics import SharedStats, dialect_metrics
from llmload.sim.requests import Tokenize
from llmload.sim.server.core import SimServer

_STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})
#: what the parent of ``--workers N`` takes synchronously: the stop signals, and a worker's exit
_PARENT_SIGNALS = _STOP_SIGNALS | {signal.SIGCHLD}


def _listen(host: str, port: int, reuse_port: bool) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(4096)
    return sock


def _tokenizer(config: SimConfig) -> Tokenize | None:
    """``--tokenizer`` as a text -> token ids function, loaded once before any fork."""
    if not config.tokenizer:
        return None
    from llmload.tokenizer import load_counting_tokenizer

    tok = load_counting_tokenizer(config.tokenizer)
    return lambda text: tok(text).input_ids


def _install_stop(server: SimServer) -> None:
    server.loop.wake_on_signals()
    signal.signal(signal.SIGTERM, lambda *_: server.stop())
    signal.signal(signal.SIGINT, lambda *_: server.stop())


def run_worker(config: SimConfig, sock: socket.socket, index: int, tokenize: Tokenize | None,
               shared: SharedStats | None = None) -> None:
    server = SimServer(config, sock, index, tokenize, shared)
    _install_stop(server)
    server.serve_forever()


class _WorkerPool:
    """The forked worker processes of one ``serve`` call.

    The parent has no signal handlers: it blocks SIGTERM, SIGINT and SIGCHLD before the first fork and takes
    them with ``sigwaitinfo`` in :meth:`wait`, so a stop signal can never slip in between a check and a
    blocking ``waitpid`` (where a Python handler would wait for a worker to exit by itself). A worker unblocks
    them once its own handlers are in place.
    """

    def __init__(self) -> None:
        self.children: list[int] = []

    def fork(self, config: SimConfig, port: int, index: int, tokenize: Tokenize | None,
             shared: SharedStats) -> None:
        sock = _listen(config.host, port, reuse_port=True)
        pid = os.fork()
        if pid == 0:
            _child(config, sock, index, tokenize, shared)
        self.children.append(pid)
        sock.close()

    def stop(self) -> None:
        """SIGTERM every worker still running."""
        for pid in self.children:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def wait(self) -> int:
        """Pass each SIGTERM/SIGINT on to the workers until all have exited; the first non-zero exit status,
        else 0."""
        status = 0
        running = set(self.children)
        while True:
            for pid in sorted(running):
                try:
                    done, code = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    running.discard(pid)
                    continue
                if done:
                    running.discard(pid)
                    status = status or os.waitstatus_to_exitcode(code)
            if not running:
                return status
            if signal.sigwaitinfo(_PARENT_SIGNALS).si_signo in _STOP_SIGNALS:
                self.stop()


def _child(config: SimConfig, sock: socket.socket, index: int, tokenize: Tokenize | None,
           shared: SharedStats) -> None:
    """A forked worker's whole life; it never returns (``os._exit``)."""
    code = 0
    try:
        server = SimServer(config, sock, index, tokenize, shared)
        _install_stop(server)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _PARENT_SIGNALS)
        server.serve_forever()
    except BaseException:
        code = 1
    finally:
        os._exit(code)


def serve(config: SimConfig, ready: Callable[[str], None] | None = None) -> None:
    """Run the simulator until SIGINT/SIGTERM; ``ready`` gets the base URL once it accepts connections."""
    tokenize = _tokenizer(config)
    workers = max(1, config.workers)
    # Bind once without SO_REUSEPORT first, so a busy port fails here even if its owner shares it.
    probe = _listen(config.host, config.port, reuse_port=False)
    port = probe.getsockname()[1]
    host = f"[{config.host}]" if ":" in config.host else config.host
    url = f"http://{host}:{port}"
    # every worker's /metrics block, in memory the forked workers share: any of them answers for all
    shared = SharedStats(dialect_metrics(config.dialect), workers)
    if workers == 1:
        server = SimServer(config, probe, 0, tokenize, shared)
        _install_stop(server)
        if ready:
            ready(url)
        server.serve_forever()
        return
    probe.close()
    pool = _WorkerPool()
    signal.pthread_sigmask(signal.SIG_BLOCK, _PARENT_SIGNALS)  # taken in pool.wait(); workers start blocked
    try:
        for index in range(workers):
            pool.fork(config, port, index, tokenize, shared)
    except BaseException:  # e.g. the port taken between forks: stop the workers already started
        pool.stop()
        pool.wait()
        raise
    if ready and not signal.sigpending() & _STOP_SIGNALS:  # a signal while forking: stop, not "listening"
        ready(url)
    sys.exit(max(0, pool.wait()))
