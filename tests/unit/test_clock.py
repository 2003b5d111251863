"""``clock_offset`` (``wall - perf_counter``) is not skewed when the OS stops the process mid-reading.

The preemption is made real: a ``time.time`` that sleeps 50 ms before it reads the wall clock, once, the way a
busy host stops a process between two reads. A single pair of reads would be 25-50 ms off (what moved one
worker's schedule against the other's in CI); the tightest bracket is not.
"""

from __future__ import annotations

import time

import pytest

from llmload.client.transport import clock
from llmload.core.messages import clock_offset

STALL_S = 0.05


def test_the_records_message_and_the_reactor_share_one_reading() -> None:
    assert clock_offset is clock.clock_offset


@pytest.mark.parametrize("stalled_reading", [0, 1, 4])
def test_a_stalled_reading_does_not_skew_the_offset(monkeypatch: pytest.MonkeyPatch, stalled_reading: int) -> None:
    real_time = time.time
    calls = {"n": 0}

    def stalling_time() -> float:
        if calls["n"] == stalled_reading:
            time.sleep(STALL_S)
        calls["n"] += 1
        return real_time()

    clean = clock.clock_offset()
    monkeypatch.setattr(clock.time, "time", stalling_time)
    stalled = clock.clock_offset()
    monkeypatch.undo()
    assert calls["n"] == clock.READINGS
    # a loaded machine may stop any other reading too, by far less than the stall: a fifth of it as the margin
    assert abs(stalled - clean) < STALL_S / 5, (stalled, clean)
