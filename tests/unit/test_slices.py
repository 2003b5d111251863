"""Time slices (``--slice-duration``): a request counts in the slice it was sent in, so the slices' requests add
up to the run's; tokens and completions count where they arrived; a server that slows down shows in the later
slices' TTFT; and the result JSON carries them."""

from __future__ import annotations

import pytest

from llmload.client.records import RequestRecord
from llmload.metrics import compute_metrics, time_slices


def request(start: float, ttft: float, tokens: int = 3, itl: float = 0.1, ok: bool = True) -> RequestRecord:
    times = [start + ttft + itl * k for k in range(tokens)] if ok else []
    return RequestRecord(start=start, first_token=times[0] if times else None, chunk_times=times,
                         chunk_tokens=[1] * len(times), output_tokens=len(times), success=ok, prompt_len=10,
                         error="" if ok else "HTTP 500", failure_kind="" if ok else "http_5xx")


# 0-2 s: TTFT 100 ms; 2-4 s: TTFT 400 ms (the server slowed down); one failure at 3.0 s
RECORDS = [request(0.0, 0.1), request(0.5, 0.1), request(1.0, 0.1), request(1.5, 0.1),
           request(2.0, 0.4), request(2.5, 0.4), request(3.0, 0.0, ok=False), request(3.2, 0.4)]


def test_requests_by_send_time_add_up_and_the_slowdown_shows() -> None:
    slices = time_slices(RECORDS, 2.0, end=4.0, goodput_slos={"ttft": 200})
    assert [(s["start_s"], s["end_s"]) for s in slices] == [(0.0, 2.0), (2.0, 4.0)]
    assert [s["requests"] for s in slices] == [4, 4] and sum(s["requests"] for s in slices) == len(RECORDS)
    assert [s["completed"] for s in slices] == [4, 3] and slices[1]["failed"] == 1
    assert slices[0]["ttft_ms"]["p50"] == pytest.approx(100.0) and slices[1]["ttft_ms"]["p50"] == pytest.approx(400.0)
    assert slices[0]["itl_ms"]["mean"] == pytest.approx(100.0)
    assert [s["good_requests"] for s in slices] == [4, 0]
    assert slices[0]["request_goodput"] == pytest.approx(2.0)


def test_tokens_and_completions_count_where_they_arrived() -> None:
    # tokens at 0.1-0.3, 0.6-0.8, 1.1-1.3, 1.6-1.8, 2.4-2.6, 2.9-3.1 (3.0 = 2.9 + 0.1 lands just past 3) and
    # 3.6-3.8 s; the requests end with their last token
    slices = time_slices(RECORDS, 1.0, end=4.0)
    assert len(slices) == 4
    assert [s["requests"] for s in slices] == [2, 2, 2, 2]  # by send time: 0, 0.5 | 1, 1.5 | 2, 2.5 | 3, 3.2
    assert [s["output_throughput"] for s in slices] == pytest.approx([6.0, 6.0, 4.0, 5.0])
    assert sum(s["output_throughput"] * (s["end_s"] - s["start_s"]) for s in slices) == 21
    assert [s["request_throughput"] for s in slices] == pytest.approx([2.0, 2.0, 1.0, 2.0])


def test_the_last_slice_ends_with_the_run() -> None:
    slices = time_slices(RECORDS, 1.5, end=4.0)
    assert [round(s["end_s"] - s["start_s"], 6) for s in slices] == [1.5, 1.5, 1.0]
    assert time_slices([], 1.0) == [] and time_slices(RECORDS, 0.0) == []


def test_the_result_json_carries_the_slices() -> None:
    d = compute_metrics(RECORDS, 4.0, slice_duration_s=2.0).to_result_dict()
    assert d["slice_duration"] == 2.0 and len(d["slices"]) == 2
    assert sum(s["requests"] for s in d["slices"]) == d["total_requests"]
    assert "slices" not in compute_metrics(RECORDS, 4.0).to_result_dict()
