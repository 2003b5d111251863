"""A worker that was frozen asks the master before it sends more: its requests may have been given away.

A worker whose event loop did not run for :data:`~llmload.core.protocol.FREEZE_S` (SIGSTOP, swap, or a CPU so
busy that a blocking start-up held the loop while its heartbeats stopped) may have been declared lost by the
master, and the requests it had not sent handed to the others. As each request comes due,
:meth:`FreezeGuard.may_send` notices such a gap, asks the master (``llm_resumed``) and waits for its
``llm_revoke``: the requests that are no longer its own. Both distributed ways in use it, ``llmload bench``'s
workers and ``locust -f`` workers; :func:`~llmload.distributed.master.answer_resumed` is the master's side.
"""

from __future__ import annotations

from collections.abc import Callable
from time import perf_counter
from typing import Any

import gevent
from gevent.event import Event

from llmload.core import protocol
from llmload.core.protocol import FREEZE_S, Revoke
from llmload.core.schedule import Scheduled

#: how long a resumed worker waits for the master's answer before it sends nothing more of its job
RESUME_WAIT_S = 10.0
#: how often the loop notes that it runs (a longer gap than FREEZE_S is a freeze)
TICK_S = 0.05


class FreezeGuard:
    """One worker's freeze detection and the requests the master took back (registers ``llm_revoke``)."""

    def __init__(self, runner: Any, log: Callable[[str], None], stop: Callable[[], None]) -> None:
        """``stop``: what to do when the master does not answer after a freeze (stop sending this run)."""
        self.runner = runner
        self.log = log
        self._stop = stop
        self._last_tick = perf_counter()
        #: the loop did not run for FREEZE_S or longer: check with the master before sending more
        self._frozen = False
        self._resumed = Event()
        #: requests the master moved to another worker before they were due
        self.revoked: set[int] = set()
        runner.register_message(protocol.REVOKE, self._on_revoke)

    def reset(self) -> None:
        """A new run (a sweep's next point): the last run's revocations (its indices) do not apply."""
        self.revoked = set()
        self.touch()

    def touch(self) -> None:
        """The loop runs now (a message arrived)."""
        self._last_tick = perf_counter()

    def tick(self) -> None:
        """Called every :data:`TICK_S` by the loop: a longer gap since the last call was a freeze."""
        now = perf_counter()
        if now - self._last_tick > FREEZE_S:
            self._frozen = True
        self._last_tick = now

    def tick_forever(self) -> None:
        while True:
            gevent.sleep(TICK_S)
            self.tick()

    def may_send(self, request: Scheduled) -> bool:
        """Asked as a request is due. After a freeze, first ask the master what is still ours."""
        if self._frozen or perf_counter() - self._last_tick > FREEZE_S:
            self.log("this worker was frozen: asking the master which requests are still its own")
            self._resumed.clear()
            self.runner.send_message(protocol.RESUMED, {})
            if not self._resumed.wait(RESUME_WAIT_S):
                self.log("the master did not answer after this worker was frozen: sending nothing more")
                self._stop()
                return False
            self._frozen = False
            self._last_tick = perf_counter()
        return request.index not in self.revoked

    def _on_revoke(self, msg: Any, **_: Any) -> None:
        revoke = Revoke.from_data(msg.data)
        self.revoked.update(int(i) for i in revoke.indices)
        if revoke.resume:
            self._resumed.set()
