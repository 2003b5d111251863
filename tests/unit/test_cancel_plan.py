"""Cancellation's rules: the spec, the per-request draw (the same in every process), and the outcome — counted
apart, in ``sent``, out of every latency statistic and of the failure kinds."""

from __future__ import annotations

import math

import pytest

from llmload.client.records import RequestRecord
from llmload.common.errors import ConfigError
from llmload.core.cancel import CancelAfter, cancel_plan
from llmload.core.schedule import INITIAL_TEST_ID
from llmload.core.settings import UserSettings
from llmload.metrics import compute_metrics


@pytest.mark.parametrize(("spec", "tokens", "low", "high"), [
    ("2.5", False, 2.5, 2.5), ("exp:2", False, 0.0, math.inf), ("uniform:0.5:3", False, 0.5, 3.0),
    ("tokens:50", True, 50, 50), ("tokens:uniform:10:200", True, 10, 200),
])
def test_specs_and_what_they_draw(spec: str, tokens: bool, low: float, high: float) -> None:
    plan = cancel_plan(1.0, spec, seed=0)
    assert plan is not None and plan.after.tokens == tokens
    for k in range(200):
        seconds, events = plan.draw(f"r{k}")
        value = events if tokens else seconds
        assert (seconds is None) == tokens and value is not None and low <= value <= high
        if tokens:
            assert isinstance(value, int) and value >= 1


@pytest.mark.parametrize(("rate", "after", "message"), [
    (0.5, None, "--cancel-rate needs --cancel-after"), (None, "2", "--cancel-after needs --cancel-rate"),
    (0.5, "soon", "--cancel-after 'soon': expected SECONDS"), (0.5, "uniform:3:1", "expected SECONDS"),
    (0.5, "exp:0", "expected SECONDS"), (0.5, "-1", "expected SECONDS"), (1.5, "2", "must be in (0, 1]"),
])
def test_bad_options_are_one_line(rate, after, message: str) -> None:
    with pytest.raises(ConfigError, match=None) as err:
        cancel_plan(rate, after, 0)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_the_draw_depends_on_seed_and_request_id_only() -> None:
    ids = [f"synth_{k:05d}" for k in range(20_000)]
    a, b = cancel_plan(0.3, "exp:1", 7), cancel_plan(0.3, "exp:1", 7)
    assert [a.draw(i) for i in ids[:500]] == [b.draw(i) for i in ids[:500]]  # another worker, another way in
    share = sum(a.draw(i)[0] is not None for i in ids) / len(ids)
    assert abs(share - 0.3) < 4 * math.sqrt(0.3 * 0.7 / len(ids))  # a binomial bound, 4 sigma
    other = cancel_plan(0.3, "exp:1", 8)
    assert [a.draw(i) for i in ids[:200]] != [other.draw(i) for i in ids[:200]]


def test_the_requests_that_check_the_server_are_never_cancelled() -> None:
    """The initial test, warm-ups and probes (their ids start with INITIAL_TEST_ID) are not the run's requests."""
    plan = cancel_plan(1.0, "tokens:5", 7)
    assert plan.draw("synth_00001") == (None, 5)
    for request_id in (INITIAL_TEST_ID, f"{INITIAL_TEST_ID}-warmup-0", f"{INITIAL_TEST_ID}-probe-3"):
        assert plan.draw(request_id) == (None, None)


def test_the_plan_travels_to_workers_in_the_user_settings() -> None:
    plan = cancel_plan(0.25, "tokens:uniform:5:9", 3)
    settings = UserSettings("vllm", None, "m", False, "content", None, 1.0, 2.0, None, "X-Session-ID", None, plan,
                            None)
    again = UserSettings.from_message(settings.to_message())
    assert again.cancel == plan and isinstance(again.cancel.after, CancelAfter)


def _record(k: int, cancelled: bool = False, failed: bool = False) -> RequestRecord:
    times = [10.0 + k + 0.05 + 0.01 * j for j in range(5 if not cancelled else 2)]
    r = RequestRecord(request_id=f"r{k}", start=10.0 + k, first_token=times[0], chunk_times=times,
                      chunk_tokens=[1] * len(times), output_tokens=len(times), success=not (cancelled or failed),
                      prompt_len=10)
    if cancelled:
        r.cancelled, r.failure_kind, r.error = True, "cancelled", "cancelled by the client after 2 events"
        r.first_token, r.chunk_times = 10.0 + k + 0.001, [10.0 + k + 0.001, 10.0 + k + 0.002]  # would pull TTFT down
    if failed:
        r.failure_kind, r.error = "http_5xx", "HTTP 500"
    return r


def test_a_cancelled_request_is_its_own_outcome_and_no_latency() -> None:
    records = [_record(k) for k in range(6)] + [_record(6 + k, cancelled=True) for k in range(3)] + [
        _record(9, failed=True)]
    metrics = compute_metrics(records, 20.0)
    plain = compute_metrics([r for r in records if not r.cancelled], 20.0)
    assert (metrics.completed, metrics.failed, metrics.cancelled, metrics.cut_off) == (6, 1, 3, 0)
    assert metrics.sent == 10 == len(records)
    assert metrics.failures_by_kind == {"http_5xx": 1}
    result, without = metrics.to_result_dict(), plain.to_result_dict()
    assert result["cancelled"] == 3 and without["cancelled"] == 0
    for key in ("mean_ttft_ms", "p99_ttft_ms", "median_itl_ms", "median_tpot_ms"):
        assert result[key] == without[key], key
