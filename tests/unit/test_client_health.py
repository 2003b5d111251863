"""The client-health verdict (llmload.core.health.judge): which runs it calls client-limited, and why."""

from __future__ import annotations

import pytest

from llmload.core.health import SCHEDULE_LAG_LIMIT_MS, HealthMonitor, judge


def verdict(lags_ms: list[float]) -> dict:
    """The verdict on a run whose sends were ``lags_ms`` late (everything else healthy)."""
    monitor = HealthMonitor()
    monitor.cpu_percent = [5.0]
    monitor.loop_lags_s = [0.0001]
    return monitor.report([lag / 1000.0 for lag in lags_ms])


@pytest.mark.parametrize(("sends", "late", "limited"), [
    (24, 0, False),
    (24, 1, False),    # one hiccup in a short run is its p99, not a client that cannot keep up
    (24, 2, True),
    (1000, 10, False),  # 1 %
    (1000, 11, True),
])
def test_schedule_lag_counts_when_more_than_one_send_and_one_percent_was_late(sends: int, late: int,
                                                                               limited: bool) -> None:
    health = verdict([0.5] * (sends - late) + [3 * SCHEDULE_LAG_LIMIT_MS] * late)
    assert health["late_sends"] == late and health["sends"] == sends
    assert health["bottleneck"] is limited, health
    assert ("schedule lag" in health["reason"]) is limited
    if limited:
        assert f"{late} of {sends} sends" in health["reason"]


def test_cpu_and_read_lag_still_decide_alone() -> None:
    assert judge({"cpu_percent_mean": 97.0})["reason"].startswith("client CPU averaged 97%")
    assert judge({"read_lag_p99_ms": 9.0}, median_itl_ms=10.0)["bottleneck"]
    assert not judge({"read_lag_p99_ms": 2.0}, median_itl_ms=10.0)["bottleneck"]


def test_a_health_report_without_send_counts_keeps_the_p99_rule() -> None:
    """Results written before the counts existed (and workers' reports) are judged on the p99 alone."""
    assert judge({"schedule_lag_p99_ms": 25.0})["bottleneck"]
