"""SIGINT and SIGTERM for one ``llmload bench`` run, honoured at any moment.

    start-up   (target, tokenizer, dataset, initial test): the run is abandoned at once — :class:`Interrupted`
               is raised in the main greenlet, children are stopped by the ``with`` blocks that own them
    run        first signal: no new requests; those in flight get ``--stop-timeout`` seconds, then are cut off
               second signal: cut off everything in flight now; the partial result is still written
    report     first signal: noted, the results are still written; second: exit at once
    any phase  third signal: exit at once (children die with us, see :mod:`llmload.processes.children`)

The exit code of an interrupted run is ``128 + signal number``: 130 for SIGINT, 143 for SIGTERM.

Python-level handlers run between bytecodes in whichever greenlet is current; they only record the signal and
hand the work to gevent's loop (``run_callback_threadsafe``), so nothing blocks or prints inside a handler.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

START_UP = "start-up"
RUN = "run"
REPORT = "report"
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def exit_code(signum: int) -> int:
    return 128 + signum


def signal_name(signum: int) -> str:
    return signal.Signals(signum).name


class Interrupted(KeyboardInterrupt):
    """A signal arrived before the main run started: nothing was measured."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal_name(signum))
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return exit_code(self.signum)


class RunInterrupts:
    """Installs the handlers for the lifetime of a ``with`` block; see the module docstring for what each
    signal does in each phase. ``stop`` and ``force`` are gevent events the run waits on."""

    def __init__(self, log: Callable[[str], None]) -> None:
        import greenlet
        from gevent.event import Event

        self._log = log
        self._main = greenlet.getcurrent()
        self.phase = START_UP
        self.stop = Event()
        self.force = Event()
        #: the first signal received (None: not interrupted)
        self.signum: int | None = None
        self.count = 0
        self.stop_timeout: float | None = 0.0
        self._previous: dict[int, Any] = {}
        #: a fork (a child starting) is between its at-fork hooks: an exception raised now would be printed as
        #: "Exception ignored" and swallowed, so a start-up signal waits for :meth:`raise_if_interrupted`
        self._forking = False
        self._fork_hooks = False

    @property
    def interrupted(self) -> bool:
        return self.signum is not None

    def __enter__(self) -> RunInterrupts:
        for sig in _SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        if not self._fork_hooks:  # registered last, so "before" runs first and "after" last of all hooks
            os.register_at_fork(before=self._fork_starts, after_in_parent=self._fork_ends)
            self._fork_hooks = True
        return self

    def _fork_starts(self) -> None:
        self._forking = True

    def _fork_ends(self) -> None:
        self._forking = False

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous if previous is not None else signal.SIG_DFL)

    def start_run(self, stop_timeout: float | None) -> None:
        """The main run begins: from now on a signal stops it instead of abandoning it (``stop_timeout`` None:
        the run's own, not known here)."""
        self.stop_timeout = stop_timeout
        self.phase = RUN
        if self.interrupted:  # arrived between the last start-up check and now
            self.stop.set()

    def raise_if_interrupted(self) -> None:
        """Start-up: a signal whose :class:`Interrupted` was swallowed (raised inside a callback Python ignores
        exceptions from, such as an at-fork hook while the simulator starts) still abandons the start-up."""
        if self.phase == START_UP and self.signum is not None:
            raise Interrupted(self.signum)

    def start_report(self) -> None:
        self.phase = REPORT

    def _handle(self, signum: int, _frame: Any) -> None:
        import greenlet
        from gevent import get_hub

        self.count += 1
        if self.phase == REPORT:
            # the run is over: finish writing its results unless asked twice
            if self.count >= 2:
                os._exit(exit_code(self.signum or signum))
            os.write(2, f"\n{signal_name(signum)}: writing the results; again to exit without them\n".encode())
            return
        if self.signum is None:
            self.signum = signum
        if self.count >= 3:
            os.write(2, f"\n{signal_name(signum)} again: exiting now\n".encode())
            os._exit(exit_code(self.signum))
        loop = get_hub().loop
        if self.phase == START_UP:
            if self._forking:
                return  # raised by the next raise_if_interrupted, once the child has started
            if greenlet.getcurrent() is self._main:
                raise Interrupted(signum)
            loop.run_callback_threadsafe(self._main.throw, Interrupted(signum))
        elif self.phase == RUN:
            loop.run_callback_threadsafe(self._on_run_signal, signum, self.count)

    def _on_run_signal(self, signum: int, count: int) -> None:
        name = signal_name(signum)
        if count == 1:
            grace = "the run's --stop-timeout" if self.stop_timeout is None else f"{self.stop_timeout:g} s (--stop-timeout)"
            self._log(f"\n{name}: no new requests; those in flight get {grace}, then are cut off. "
                      "Again to cut them off now.")
            self.stop.set()
        else:
            self._log(f"\n{name} again: cutting off every request in flight now; writing what was measured")
            self.stop.set()
            self.force.set()
