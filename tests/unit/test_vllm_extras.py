"""Today's ``vllm bench serve``'s extra keys and sections, computed by the real code from known inputs: the
speculative-decoding keys from two ``/metrics`` pages (the simulator's counter model), the ramp-up's rate
changes, which client-queue metrics apply, the Probe, Client-side Queueing and Speculative Decoding sections
in vLLM's spelling, and the capped list of failed requests."""

from __future__ import annotations

from datetime import datetime
from types import SimpleNamespace

import pytest

from llmload.core.ramp_events import ramp_keys, rps_change_events
from llmload.core.run import reported_metrics
from llmload.core.schedule import ScheduleSpec
from llmload.metrics import Distribution
from llmload.servermetrics.parse import parse_exposition
from llmload.servermetrics.spec_decode import spec_decode_counters, spec_decode_keys
from llmload.sim.metrics.spec_decode import render_spec_decode, spec_decode_counts
from llmload.summary import format_failed_requests
from llmload.summary.vllm_sections import probe_lines, queue_lines, spec_decode_lines


def counters(generated: float, k: int = 3, acceptance: float = 0.5) -> dict:
    return spec_decode_counters(parse_exposition(render_spec_decode(generated, k, acceptance, "m").decode()))


def test_spec_decode_keys_are_the_growth_of_the_counters() -> None:
    before, after = counters(1000), counters(5000)
    keys = spec_decode_keys(before, after)
    d0, t0, p0 = spec_decode_counts(1000, 3, 0.5)
    d1, t1, p1 = spec_decode_counts(5000, 3, 0.5)
    drafts, accepted = d1 - d0, sum(p1) - sum(p0)
    assert keys["spec_decode_num_drafts"] == drafts and keys["spec_decode_draft_tokens"] == t1 - t0 == 3 * drafts
    assert keys["spec_decode_accepted_tokens"] == accepted
    assert keys["spec_decode_acceptance_rate"] == pytest.approx(100.0 * accepted / (3 * drafts))
    assert keys["spec_decode_acceptance_length"] == pytest.approx(1.0 + accepted / drafts)
    # the model's per-position acceptance is a^(i+1), to the counters' rounding
    assert keys["spec_decode_per_position_acceptance_rates"] == pytest.approx([0.5, 0.25, 0.125], abs=2e-3)


def test_no_counters_or_no_drafts_give_no_keys() -> None:
    assert spec_decode_counters(parse_exposition("vllm:num_requests_running 1\n")) is None
    assert spec_decode_keys(None, counters(10)) == {} and spec_decode_keys(counters(10), None) == {}
    assert spec_decode_keys(counters(500), counters(500)) == {}


def test_rps_change_events_name_every_whole_rate_once() -> None:
    spec = ScheduleSpec(request_rate=float("inf"), burstiness=1.0, seed=0, ramp_up_strategy="linear",
                        ramp_up_start_rps=1, ramp_up_end_rps=5)
    offsets = [float(i) for i in range(9)]  # rates 1, 1.5, 2, ..., 5
    events = rps_change_events(spec, offsets, start_wall=1_000_000.0)
    assert [e["rps"] for e in events] == [1, 2, 3, 4, 5]
    moments = [datetime.fromisoformat(e["timestamp"]).timestamp() for e in events]
    assert moments == pytest.approx([1_000_000.0, 1_000_002.0, 1_000_004.0, 1_000_006.0, 1_000_008.0])
    assert ramp_keys(spec) == {"ramp_up_strategy": "linear", "ramp_up_start_rps": 1, "ramp_up_end_rps": 5}
    flat = ScheduleSpec(request_rate=4.0, burstiness=1.0, seed=0)
    assert rps_change_events(flat, offsets, 0.0) == [] and ramp_keys(flat) == {}


@pytest.mark.parametrize(("concurrency", "rate", "kept"), [
    (None, 10.0, ("ttft",)),
    (4, float("inf"), ("ttft", "client_queue_time")),
    (4, 10.0, ("ttft", "client_queue_time", "e2el_including_client_queue")),
])
def test_client_queue_metrics_apply_as_in_vllm(concurrency, rate, kept) -> None:
    options = SimpleNamespace(max_concurrency=concurrency,
                              percentile_metrics=["ttft", "client_queue_time", "e2el_including_client_queue"])
    assert reported_metrics(options, ScheduleSpec(request_rate=rate, burstiness=1.0, seed=0)) == kept


def test_sections_in_vllm_spelling() -> None:
    dist = Distribution.of([0.010, 0.020, 0.030], (99.0,))
    lines = queue_lines(SimpleNamespace(client_queue={"client_queue_time": dist, "e2el_including_client_queue": dist}))
    assert lines[0] == "{:-^50}".format("Client-side Queueing")
    assert lines[1].startswith("Mean Client Queue Time (ms):") and lines[2].startswith("Median Client Queue Time")
    assert lines[3].startswith("P99 Client Queue Time (ms):")
    assert lines[4] == "{:-^50}".format("Queue-inclusive End-to-end Latency")
    assert lines[5].startswith("Mean E2EL incl. Client Queue (ms):")
    probe = probe_lines({"probe_completed": 3, "probe_failed": 1, "probe_median_e2el_ms": 5.0,
                         "probe_p99_e2el_ms": 7.5, "probe_max_e2el_ms": 8.0})
    assert probe[0] == "{:-^50}".format("Probe Requests") and probe[1] == f"{'Probe requests completed:':<40} {3!s:<10}"
    assert probe_lines({}) == [] and spec_decode_lines({}) == []
    spec = spec_decode_lines(spec_decode_keys(counters(100), counters(4000)))
    assert spec[0] == "{:-^50}".format("Speculative Decoding") and spec[1].startswith("Acceptance rate (%):")
    assert "Per-position acceptance (%):" in spec and spec[-1].startswith("  Position 2:")


def test_failed_requests_are_listed_up_to_ten() -> None:
    text = format_failed_requests([f"boom {i}" for i in range(12)])
    lines = text.splitlines()
    assert lines[0] == "Failed requests during benchmark run detected (capping to 10):"
    assert lines[1:] == [f"Error {i}: boom {i}" for i in range(10)]
    assert format_failed_requests([]) == ""
