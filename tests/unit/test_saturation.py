"""The saturation test on synthetic series: a backlog that grows while throughput stays flat and requests wait
longer and longer is saturation, from the window it began in; a steady backlog, a warm-up (backlog and throughput
rising together, or the backlog filling with long answers), a Poisson burst and noise are not."""

from __future__ import annotations

import numpy as np
import pytest

from llmload.core.saturation import SaturationMonitor, SaturationRule

RULE = SaturationRule(window_s=5.0, windows=3)


#: a server that keeps up: every request waits ~50 ms for its first token
FLAT_WAIT = 0.05


def monitor_for(in_flight, completed, waiting=None, step: float = 0.5, seconds: float = 60.0,
                wait=lambda t: FLAT_WAIT) -> SaturationMonitor:
    """Samples every ``step`` s; ``wait(t)``: the wait to the first token of the requests completed at ``t``."""
    monitor = SaturationMonitor(RULE, start=100.0)
    wait_sum = 0.0
    previous = completed(0.0)
    for t in np.arange(0.0, seconds, step):
        done = completed(t)
        wait_sum += (done - previous) * wait(t)
        previous = done
        monitor.add(100.0 + t, in_flight(t), done, None if waiting is None else waiting(t), wait_sum, done)
    return monitor


def queue_wait(backlog, capacity: float):
    """Saturated: a request waits for the backlog ahead of it to drain."""
    return lambda t: FLAT_WAIT + backlog(t) / capacity


def test_twice_the_capacity_is_saturated_from_the_start():
    capacity = 4.0  # requests/s the server completes; 8/s arrive
    backlog = lambda t: capacity * t  # noqa: E731
    verdict = monitor_for(backlog, lambda t: capacity * t, wait=queue_wait(backlog, capacity)).verdict()
    assert verdict.saturated and verdict.signal == "in_flight"
    assert verdict.since_s == pytest.approx(0.0, abs=RULE.window_s)
    assert verdict.throughput_rps == pytest.approx(capacity, rel=0.05)


def test_half_the_capacity_is_not_saturated_even_with_noise():
    rng = np.random.default_rng(1)
    noise = rng.integers(-3, 4, size=200)
    verdict = monitor_for(lambda t: 10 + noise[int(t * 2)], lambda t: 2.0 * t).verdict()
    assert not verdict.saturated


def test_saturation_that_starts_mid_run_says_when():
    # up to 20 s the server keeps up (backlog 5); then it completes 3/s while 6/s arrive
    backlog = lambda t: 5 if t < 20 else 5 + 3 * (t - 20)  # noqa: E731
    verdict = monitor_for(backlog, lambda t: 6 * t if t < 20 else 120 + 3 * (t - 20),
                          wait=queue_wait(lambda t: backlog(t) - 5, 3.0)).verdict()
    assert verdict.saturated
    assert 15.0 <= verdict.since_s <= 25.0


def test_a_warm_up_is_not_saturation():
    # the backlog fills over 12 s while throughput rises with it, then both hold
    verdict = monitor_for(lambda t: min(t, 12.0) * 2, lambda t: (t * t / 12 if t < 12 else 12 + 2 * (t - 12))).verdict()
    assert not verdict.saturated


def test_the_servers_waiting_queue_is_a_signal_of_its_own():
    # the client's in-flight count is capped (say by --max-concurrency), the server's queue grows
    verdict = monitor_for(lambda t: 16, lambda t: 3 * t, waiting=lambda t: 2 * t).verdict()
    assert verdict.saturated and verdict.signal == "waiting"


def test_too_short_a_run_gives_no_verdict():
    verdict = monitor_for(lambda t: 4 * t, lambda t: 4 * t, seconds=12.0, wait=queue_wait(lambda t: 4 * t, 4)).verdict()
    assert not verdict.saturated


def test_a_backlog_filling_with_long_answers_is_not_saturation():
    # 2 req/s of answers that take 5-40 s: in flight climbs for 40 s while completions trickle in at a flat rate,
    # and every request still gets its first token at once (a sweep's low-rate point, simulated, was flagged)
    verdict = monitor_for(lambda t: 2.0 * min(t, 40.0) * 0.6, lambda t: max(0.0, 1.2 * (t - 5.0)),
                          seconds=60.0).verdict()
    assert not verdict.saturated


def test_a_poisson_burst_is_not_saturation():
    # the backlog drifts up by 7 over 15 s by chance, throughput flat, waits flat
    verdict = monitor_for(lambda t: 10 + (7 * (t - 30) / 15 if 30 <= t < 45 else (7 if t >= 45 else 0)),
                          lambda t: 1.8 * t).verdict()
    assert not verdict.saturated


def test_a_stuck_server_is_saturated_once_past_the_ramp():
    # it completed some requests, then nothing more while they keep arriving
    verdict = monitor_for(lambda t: 2 * t, lambda t: min(2 * t, 10.0)).verdict()
    assert verdict.saturated and verdict.since_s >= RULE.window_s * RULE.windows


@pytest.mark.slow
def test_the_observer_stops_a_saturated_run_when_asked():
    import gevent
    from gevent.event import Event

    from llmload.core.observe import RunObserver

    stop = Event()
    backlog = [0]

    def in_flight() -> int:  # grows by one every sample; nothing completes faster than before
        backlog[0] += 1
        return backlog[0]

    messages: list[str] = []
    observer = RunObserver(None, SaturationRule(window_s=1.0, windows=3, min_growth=2), in_flight, stop=stop,
                           stop_on_saturation=True, log=messages.append)
    observer.begin()
    assert stop.wait(20.0), "the observer never stopped the run"
    observed = observer.finish()
    assert observed.stopped_on_saturation and observed.saturation is not None and observed.saturation.saturated
    assert observed.result_keys()["saturation"]["stopped_run"] is True
    assert any("saturated" in m for m in messages) and any("--stop-on-saturation" in m for m in messages)
    gevent.sleep(0)


@pytest.mark.slow
def test_the_observer_only_reports_without_stop_on_saturation():
    from gevent.event import Event

    from llmload.core.observe import RunObserver

    stop = Event()
    backlog = [0]

    def in_flight() -> int:
        backlog[0] += 1
        return backlog[0]

    observer = RunObserver(None, SaturationRule(window_s=1.0, windows=3, min_growth=2), in_flight, stop=stop)
    observer.begin()
    stop.wait(10.0)  # nothing completes at all: judged once past the first three windows
    observed = observer.finish()
    assert not stop.is_set() and not observed.stopped_on_saturation
    assert observed.saturation is not None and observed.saturation.saturated
    assert "server_metrics" not in observed.result_keys()


def _every_span_verdict(rule: SaturationRule, start: float, samples: list[tuple]) -> tuple:
    """The test as a whole-run scan (what the monitor did before it judged windows as they closed): every window
    from every sample, every span of ``rule.windows`` of them, the client's backlog first."""
    from llmload.core.saturation import _Sample

    windows, current, edge = [], [], start + rule.window_s
    for sample in (_Sample(*s) for s in samples if s[0] >= start):
        while sample.t >= edge:
            if current:
                windows.append((current[0], current[-1]))
            current = [current[-1]] if current else []
            edge += rule.window_s
        current.append(sample)
    judge = SaturationMonitor(rule, start=start)
    for signal in ("in_flight", "waiting"):
        for i in range(len(windows) - rule.windows + 1):
            found = judge._judge(windows[i:i + rule.windows], signal)
            if found is not None:
                return found.saturated, found.since_s, found.signal
    return False, None, ""


@pytest.mark.parametrize("seed", range(12))
def test_judging_windows_as_they_close_finds_what_a_whole_run_scan_finds(seed: int) -> None:
    """Issue 37: the monitor keeps the last windows, not every sample; it must find the same span a scan of every
    sample finds, on backlogs that grow, stall and recover at random."""
    rng = np.random.default_rng(seed)
    samples, backlog, done, wait_sum, waiting = [], 5.0, 0.0, 0.0, 3.0
    for k in range(400):
        t = 100.0 + k * 0.5 + rng.uniform(0, 0.2)
        grows = (k // 60) % 2 and seed % 3 == 0  # some runs saturate at the client, some at the server, some never
        backlog = max(0.0, backlog + rng.normal(0.6 if grows else -0.1, 1.0))
        waiting = max(0.0, waiting + rng.normal(0.5 if seed % 3 == 1 else -0.1, 0.8))
        finished = rng.poisson(2.0)
        done += finished
        wait_sum += finished * (0.05 + backlog / 40.0)
        samples.append((t, backlog, done, waiting if seed % 3 != 2 or seed % 2 else None, wait_sum, done))
    monitor = SaturationMonitor(RULE, start=100.0)
    for sample in samples:
        monitor.add(*sample)
    got = monitor.verdict()
    assert (got.saturated, got.since_s, got.signal) == _every_span_verdict(RULE, 100.0, samples)
