"""The simulator's event loop stops at once for a stop() that a signal handler runs at any point of an
iteration — also between reading the next deadline and arming the timer for it, where the timer was re-armed
for a far deadline after stop() had armed it to wake at once (seen: ``llmload sim --workers 2`` ignoring a
SIGINT for as long as its next timer was away)."""

from __future__ import annotations

import time

import pytest

from llmload.sim.loop import EventLoop

FAR_S = 8.0


@pytest.mark.parametrize("moment", ["before_arm", "after_arm"])
def test_a_stop_while_the_timer_is_armed_is_not_lost(monkeypatch: pytest.MonkeyPatch, moment: str) -> None:
    loop = EventLoop()
    loop.call_at(time.monotonic() + FAR_S, lambda *_: None)  # a timer far away, as an idle server has
    arm = loop._timerfd.arm
    fired = []

    def arm_with_a_signal(deadline: float) -> None:
        # what a SIGTERM handler does when it runs here: the loop's stop()
        if not fired and deadline > time.monotonic():
            fired.append(deadline)
            if moment == "before_arm":
                loop.stop()
                arm(deadline)
            else:
                arm(deadline)
                loop.stop()
            return
        arm(deadline)

    monkeypatch.setattr(loop._timerfd, "arm", arm_with_a_signal)
    start = time.monotonic()
    loop.run()
    took = time.monotonic() - start
    loop.close()
    assert fired, "the loop never armed its timer"
    assert took < FAR_S / 2, took  # it stopped, rather than wait for the far timer
