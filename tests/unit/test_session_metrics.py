"""Per-session numbers (``llmload.metrics.sessions``): a session's server time is the union of its calls'
intervals (a sub-agent overlapping its parent counts once), its idle time the rest of its span, its hit rate its
cached over its prompt tokens; a row per chain type."""

from __future__ import annotations

import pytest

from llmload.client.records import RequestRecord
from llmload.metrics import compute_metrics


def rec(session: str, turn: int, start: float, end: float, agent_type: str = "main", cached: int | None = 0,
        prompt: int = 100, ok: bool = True) -> RequestRecord:
    r = RequestRecord(request_id=f"{session}:{turn}", conversation_id=session, turn=turn, agent_type=agent_type,
                      prompt_len=prompt, server_prompt_tokens=prompt, start=start, first_token=start + 0.1,
                      chunk_times=[start + 0.1, end], chunk_tokens=[1, 1], output_tokens=2,
                      output_tokens_source="usage", success=ok, cached_tokens=cached)
    if not ok:
        r.error, r.failure_kind = "boom", "http_5xx"
    return r


def test_server_time_is_the_union_of_overlapping_calls_and_idle_the_rest() -> None:
    records = [
        rec("a", 0, 0.0, 1.0, cached=0),
        rec("a", 1, 2.0, 4.0, "Explore", cached=50),  # a sub-agent beside its parent's next call
        rec("a", 2, 3.0, 5.0, cached=100),
        rec("b", 0, 0.0, 2.0, cached=None),
        rec("b", 1, 10.0, 11.0, ok=False),
    ]
    s = compute_metrics(records, 11.0).conversations.sessions
    assert s.sessions == 2 and s.completed == 1 and s.calls == 5 and s.calls_completed == 4
    # a: span 0-5, busy 0-1 and 2-5 -> 4; b: span 0-11, busy 0-2 and 10-11 -> 3
    assert s.duration_s.mean == pytest.approx(8.0) and s.server_time_s.mean == pytest.approx(3.5)
    assert s.idle_time_s.mean == pytest.approx((1.0 + 8.0) / 2)
    # hit rate only where calls reported cached tokens: a's 150 of 300
    assert s.hit_rate is not None and s.hit_rate.median == pytest.approx(0.5)
    assert s.cached_tokens == 150 and s.cached_fraction == pytest.approx(0.5) and s.prompt_tokens == 400
    rows = {c.agent_type: c for c in s.chains}
    assert list(rows) == ["main", "Explore"] and rows["main"].calls == 4 and rows["main"].completed == 3
    assert rows["Explore"].ttft.median_ms == pytest.approx(100.0)
    keys = compute_metrics(records, 11.0).to_result_dict()["sessions"]
    assert keys["sessions"] == 2 and keys["mean_server_time_s"] == pytest.approx(3.5)
    assert [row["agent_type"] for row in keys["by_chain"]] == ["main", "Explore"]


def test_a_run_without_sessions_has_no_sessions_numbers() -> None:
    records = [RequestRecord(request_id="x", prompt_len=5, start=0.0, first_token=0.1, chunk_times=[0.1, 0.2],
                             chunk_tokens=[1, 1], output_tokens=2, output_tokens_source="usage", success=True)]
    extra = compute_metrics(records, 1.0).conversations
    assert extra is None or extra.sessions is None


def test_the_report_has_a_sessions_table_with_a_row_per_chain_type(tmp_path) -> None:
    from llmload.report.loader import Run
    from llmload.report.sessions import session_tables_markdown
    from llmload.report.stats import RunStats

    records = [rec("a", 0, 1.0, 2.0, cached=0), rec("a", 1, 2.5, 3.0, "Explore", cached=50)]
    run = Run("mine", tmp_path / "r.json", "llmload", {}, 3.0, records, True)
    lines = session_tables_markdown([RunStats(run)])
    assert lines[0] == "## Sessions"
    rows = [line for line in lines if line.startswith("| ") and "---" not in line][1:]
    assert [r.split(" | ")[0] for r in rows] == ["| 1 sessions (1 completed)", "| main", "| Explore"]
    assert rows[2].split(" | ")[-1] == "50.0 |"  # Explore's cached share of its prompt
    plain = Run("plain", tmp_path / "p.json", "llmload", {}, 1.0,
                [RequestRecord(request_id="x", start=1.0, chunk_times=[1.1], chunk_tokens=[1], success=True)], True)
    assert session_tables_markdown([RunStats(plain)]) == []


def test_live_rows_give_all_sessions_then_each_chain_type() -> None:
    from llmload.metrics.sessions import SessionTally

    tally = SessionTally()
    assert tally.live_rows() is None
    for r in (rec("a", 0, 1.0, 2.0, cached=0), rec("a", 1, 2.5, 3.0, "Explore", cached=50)):
        tally.add(r, True)
    rows = tally.live_rows()
    assert [row["label"] for row in rows] == ["all", "main", "Explore"]
    assert rows[0]["sessions"] == rows[0]["completed_sessions"] == 1 and rows[0]["calls"] == 2
    assert rows[2]["ttft_p50_ms"] == pytest.approx(100.0) and rows[2]["cached_fraction"] == pytest.approx(0.5)


def test_the_traces_own_reuse_sits_beside_the_measured_share() -> None:
    records = [rec("a", 0, 1.0, 2.0, cached=0), rec("a", 1, 2.5, 3.0, cached=64)]
    records[0].trace_cached_tokens, records[1].trace_cached_tokens = 0, 64
    s = compute_metrics(records, 3.0).conversations.sessions
    assert s.trace_reuse_tokens == 64 and s.trace_reuse_fraction == pytest.approx(64 / 200)
    assert compute_metrics(records, 3.0).to_result_dict()["sessions"]["trace_reuse_fraction"] == pytest.approx(0.32)
    plain = [rec("b", 1, 1.0, 2.0)]
    assert compute_metrics(plain, 2.0).conversations.sessions.trace_reuse_tokens is None
