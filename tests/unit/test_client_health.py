"""The client-health verdict (llmload.core.health.judge): which runs it calls client-limited, and why."""

from __future__ import annotations

import pytest

from llmload.client.records import RequestRecord
from llmload.core.health import SCHEDULE_LAG_LIMIT_MS, HealthMonitor, advise_processes, judge, merged_reads


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


def streams(n: int, merged: int, gap_s: float = 0.010, events: int = 200) -> list[RequestRecord]:
    """``n`` successful streams of ``events`` events ``gap_s`` apart; ``merged`` reads in all brought two events
    (the later one's time for both: the kernel stamps a read with its last packet), spread over the streams."""
    records = []
    for i in range(n):
        times = [1.0 + k * gap_s for k in range(events)]
        records.append(RequestRecord(request_id=str(i), success=True, chunk_times=times))
    for j in range(merged):
        times = records[j % n].chunk_times
        k = 1 + 3 * (j // n)
        times[k] = times[k + 1]
    return records


def test_cpu_decides_alone() -> None:
    assert judge({"cpu_percent_mean": 97.0})["reason"].startswith("client CPU averaged 97%")


def test_an_exact_run_is_healthy_whatever_its_read_and_loop_lag() -> None:
    """The last round's start at 256 streams (issue 33): p99 read lag 3.0-3.8 ms, loop lag 8-15 ms, ITL exact;
    the old verdict called it client-limited on the read lag."""
    health = judge({"cpu_percent_mean": 55.0, "read_lag_p99_ms": 3.8, "loop_lag_p99_ms": 15.0}, 10.0,
                   streams(1024, merged=2))
    assert not health["bottleneck"], health
    assert health["merged_reads"] == 2 and health["stream_reads"] == 1024 * 200 - 2


def test_merged_reads_make_the_client_the_bottleneck() -> None:
    """main at 256 streams (issue 33): p99 ITL 20-30 ms for a true 10, 1-2 % of reads merged two chunks."""
    records = streams(1024, merged=3000)
    health = judge({"cpu_percent_mean": 55.0, "read_lag_p99_ms": 7.0,
                    "longest_stalls": [{"ms": 23.1, "gc_ms": 0.0,
                                        "greenlets": [{"what": "_Slots.run@reader.py:95", "ms": 20.0}]}]},
                   10.0, records)
    assert health["bottleneck"], health
    assert health["merged_read_share"] == pytest.approx(3000 / (1024 * 200 - 3000), rel=1e-4)
    assert "1.49% of reads merged" in health["reason"] and "23.1 ms in _Slots.run@reader.py:95" in health["reason"]


def test_a_server_that_writes_events_together_is_not_the_clients_doing() -> None:
    """Streams whose median gap is below a millisecond (several events per write) are left out."""
    bursts = streams(100, merged=5000, gap_s=0.0002)
    health = judge({"cpu_percent_mean": 20.0}, 0.2, bursts)
    assert not health["bottleneck"] and health["merged_read_share"] is None


def test_merged_reads_are_counted_per_read() -> None:
    record = RequestRecord(success=True, chunk_times=[0.0, 0.01, 0.03, 0.03, 0.03, 0.04, 0.06, 0.06])
    failed = RequestRecord(success=False, chunk_times=[0.0, 0.01, 0.01, 0.01])
    assert merged_reads([record, failed]) == {"merged_reads": 2, "stream_reads": 5, "merged_read_share": 0.4}


def test_without_kernel_timestamps_loop_stalls_decide() -> None:
    """Over TLS a late read shifts the timestamps themselves: stalls past 30 % of the median gap count."""
    assert judge({"read_lag_p99_ms": None, "stall_p99_ms": 4.0}, 10.0)["bottleneck"]
    assert not judge({"read_lag_p99_ms": None, "stall_p99_ms": 2.0}, 10.0)["bottleneck"]
    assert not judge({"read_lag_p99_ms": 0.4, "stall_p99_ms": 4.0}, 10.0)["bottleneck"]


def test_a_health_report_without_send_counts_keeps_the_p99_rule() -> None:
    """Results written before the counts existed (and workers' reports) are judged on the p99 alone."""
    assert judge({"schedule_lag_p99_ms": 25.0})["bottleneck"]


def test_a_cpu_bound_client_is_told_how_many_processes_would_have_kept_it_accurate() -> None:
    """48,000 tok/s from one process at 100 % CPU: one process drives 36,000 at 75 %, so two would have."""
    health = advise_processes(judge({"cpu_percent_mean": 100.0}), 48_000.0, 1)
    assert health["process_capacity_tok_s"] == 36_000 and health["processes_advised"] == 2
    # two workers, the busiest at 95 %: each drives 20,000 of the 40,000; at 75 % ~15,800: three would have
    two = advise_processes(judge({"cpu_percent_mean": 95.0}), 40_000.0, 2)
    assert two["process_capacity_tok_s"] == 15_789 and two["processes_advised"] == 3


def test_no_process_advice_where_more_processes_would_not_help() -> None:
    healthy = advise_processes(judge({"cpu_percent_mean": 100.0 * 0.5}), 10_000.0, 1)
    assert "processes_advised" not in healthy  # not the bottleneck
    stalled = judge({"cpu_percent_mean": 30.0}, 10.0, streams(200, merged=2000))  # merged reads at 30 % CPU
    assert stalled["bottleneck"] and "processes_advised" not in advise_processes(stalled, 10_000.0, 1)
