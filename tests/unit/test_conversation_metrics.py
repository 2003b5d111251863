"""Protects the multi-turn numbers (issue 11): per-turn, per-conversation, reasoning and prefix-cache metrics from
hand-built records, each expected value worked out by hand below; the summary blocks and result JSON keys that
show them only for such runs; the records file round trip of the new fields; the live tab's per-turn rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmload.bench.results import read_records, record_from_row, write_json, write_records
from llmload.client.records import RequestRecord
from llmload.metrics import TURN_ROWS, compute_metrics, turn_row
from llmload.summary import format_llmload_block, format_summary, format_vllm_block
from llmload.webui.live import LiveStats


def rec(start: float, chunks: list[float], *, conv: str = "", turn: int = 0, turns: int = 0, prompt: int = 10,
        server: int | None = None, cached: int | None = None, end: str = "", ok: bool = True,
        **extra) -> RequestRecord:
    return RequestRecord(
        start=start, first_token=chunks[0] if chunks else None, chunk_times=list(chunks),
        chunk_tokens=[1] * len(chunks), output_tokens=len(chunks), prompt_len=prompt, server_prompt_tokens=server,
        cached_tokens=cached, success=ok, error="" if ok else "HTTP 500", failure_kind="" if ok else "http_5xx",
        conversation_id=conv, turn=turn, conversation_turns=turns, conversation_end=end, **extra)


# Conversation A: 3 turns, all completed.  Conversation B: 3 turns in the workload, turn 2 fails (ends it).
# Conversation C: 2 turns in the workload, stopped at the context cap after turn 1.  S: a single request.
A1 = rec(0.0, [0.100, 0.120, 0.150], conv="A", turn=1, turns=3, prompt=100, server=110, cached=0)
A2 = rec(1.0, [1.050, 1.070], conv="A", turn=2, turns=3, prompt=200, server=210, cached=105)
A3 = rec(2.0, [2.040, 2.060, 2.090, 2.100], conv="A", turn=3, turns=3, prompt=300, server=310, cached=200,
         end="completed", reasoning_tokens=12, reasoning_text="thinking", first_answer_token=2.070)
B1 = rec(0.5, [0.700, 0.750], conv="B", turn=1, turns=3, prompt=120)
B2 = rec(1.5, [], conv="B", turn=2, turns=3, prompt=240, end="failed", ok=False, reasoning_tokens=99)
C1 = rec(0.2, [0.260, 0.300, 0.330], conv="C", turn=1, turns=2, prompt=80, server=90, cached=30, end="context_cap")
S = rec(0.1, [0.500, 0.600], prompt=50, first_answer_token=0.500)
RECORDS = [A1, B1, C1, S, A2, B2, A3]


@pytest.fixture
def extra():
    m = compute_metrics(RECORDS, 3.0)
    assert m.conversations is not None
    return m.conversations


def test_per_turn_numbers(extra) -> None:
    t1, t2, t3 = extra.turns
    assert [t.turn for t in extra.turns] == [1, 2, 3] and not any(t.pooled for t in extra.turns)
    # turn 1: A1, B1, C1 (S is turn 0 and never counted here)
    assert (t1.requests, t1.completed) == (3, 3)
    # TTFT 100, 200, 60 ms: mean 120, median 100, p99 at rank 0.99 * 2 = 1.98 of [60, 100, 200] = 100 + 0.98 * 100
    assert t1.ttft.mean_ms == pytest.approx(120.0)
    assert t1.ttft.median_ms == pytest.approx(100.0)
    assert dict(t1.ttft.percentiles_ms)[99.0] == pytest.approx(198.0)
    # TPOT (E2EL - TTFT) / (out - 1): A1 50/2 = 25, B1 50/1 = 50, C1 70/2 = 35 ms
    assert t1.tpot.mean_ms == pytest.approx((25 + 50 + 35) / 3)
    assert t1.tpot.median_ms == pytest.approx(35.0)
    # ITLs pooled: A1 20, 30; B1 50; C1 40, 30
    assert t1.itl.count == 5
    assert t1.itl.mean_ms == pytest.approx((20 + 30 + 50 + 40 + 30) / 5)
    assert t1.itl.median_ms == pytest.approx(30.0)
    assert t1.mean_prompt_tokens == pytest.approx((100 + 120 + 80) / 3)
    assert t1.mean_prompt_tokens_server == pytest.approx((110 + 90) / 2)  # B1 had no usage
    assert t1.mean_cached_tokens == pytest.approx((0 + 30) / 2)
    assert t1.cached_fraction == pytest.approx(30 / (110 + 90))
    # turn 2: A2 completed, B2 failed (left out of every latency)
    assert (t2.requests, t2.completed) == (2, 1)
    assert t2.ttft.mean_ms == pytest.approx(50.0) and t2.tpot.mean_ms == pytest.approx(20.0)
    assert t2.cached_fraction == pytest.approx(105 / 210)
    assert t2.mean_prompt_tokens == pytest.approx(200.0)
    # turn 3: A3 alone; ITLs 20, 30, 10; TPOT 60 / 3 = 20
    assert t3.ttft.median_ms == pytest.approx(40.0)
    assert t3.itl.mean_ms == pytest.approx(20.0) and t3.tpot.mean_ms == pytest.approx(20.0)
    assert t3.mean_cached_tokens == pytest.approx(200.0)


def test_per_conversation_numbers(extra) -> None:
    c = extra.conversations
    assert c.conversations == 3
    assert c.completed == 1  # only A: B failed a turn, C stopped at the context cap before its turn 2
    assert c.turns_completed == 5  # A 3, B 1, C 1
    assert c.mean_turns_completed == pytest.approx(5 / 3)
    assert c.ended_by == {"completed": 1, "failed": 1, "context_cap": 1, "cut_off": 0, "stopped": 0}
    # A: last turn's end 2.100 - first turn's start 0.0
    assert (c.mean_duration_s, c.median_duration_s, c.p99_duration_s) == pytest.approx((2.1, 2.1, 2.1))


def test_reasoning_and_prefix_cache(extra) -> None:
    r = extra.reasoning
    assert r.requests == 1 and r.total_tokens == 12  # B2's reasoning: a failed request, not counted
    # TTFAT over completed requests with answer text: A3 2.070 - 2.0 = 70 ms, S 0.500 - 0.1 = 400 ms
    assert r.ttfat.count == 2
    assert r.ttfat.mean_ms == pytest.approx(235.0)
    assert dict(r.ttfat.percentiles_ms)[99.0] == pytest.approx(70 + 0.99 * 330)
    # answer delay = TTFAT - TTFT: A3 2.070 - 2.040 = 30 ms, S 0
    assert r.answer_delay.mean_ms == pytest.approx(15.0)
    p = extra.prefix_cache
    # completed requests reporting cached tokens: A1, A2, A3, C1
    assert (p.requests, p.cached_tokens, p.prompt_tokens) == (4, 0 + 105 + 200 + 30, 110 + 210 + 310 + 90)
    assert p.fraction == pytest.approx(335 / 720)


def test_a_turn_cut_off_or_unended_conversation() -> None:
    cut = rec(0.0, [0.1], conv="X", turn=1, turns=2, cut_off=True, end="cut_off")
    quiet = rec(0.0, [0.1, 0.2], conv="Y", turn=1, turns=2)  # its last record names no end
    # the workload's turn count unknown (0): its end decides, but a failed turn still rules it out
    lost = rec(0.0, [], conv="Z", turn=1, ok=False)
    later = rec(1.0, [1.1, 1.2], conv="Z", turn=2, end="completed")
    c = compute_metrics([cut, quiet, lost, later], 2.0).conversations.conversations
    assert c.completed == 0 and c.turns_completed == 2
    assert c.ended_by == {"completed": 1, "failed": 0, "context_cap": 0, "cut_off": 1, "stopped": 0, "unknown": 1}
    # without the failed turn, that conversation is a completed one
    assert compute_metrics([later], 2.0).conversations.conversations.completed == 1


def test_late_turns_share_one_row() -> None:
    assert TURN_ROWS == 16 and turn_row(15) == 15 and turn_row(16) == turn_row(40) == 16
    records = [rec(float(i), [i + 0.1 * k], conv="L", turn=i, turns=20) for k, i in ((1, 15), (1, 16), (2, 17),
                                                                                      (3, 20))]
    turns = compute_metrics(records, 30.0).conversations.turns
    assert [(t.turn, t.last_turn, t.label, t.requests) for t in turns] == [(15, 15, "15", 1), (16, 20, "16+", 3)]
    # TTFTs of the pooled row: 100, 200, 300 ms
    assert turns[1].ttft.median_ms == pytest.approx(200.0)


def test_single_request_runs_are_unchanged() -> None:
    """No turns, no reasoning, no cached tokens: no new key and not one new summary line, even when the client
    recorded the first answer token (it does for every request)."""
    plain = [rec(0.0, [0.1, 0.15, 0.25], first_answer_token=0.1), rec(0.5, [0.7, 0.8])]
    m = compute_metrics(plain, 2.0)
    assert m.conversations is None
    assert not {"conversations", "turns", "reasoning", "prefix_cache"} & set(m.to_result_dict())
    assert format_summary(m, backend_label="vllm") == "\n".join(
        [format_vllm_block(m), format_llmload_block(m, backend_label="vllm")])


def test_result_json_keys(extra, tmp_path: Path) -> None:
    m = compute_metrics(RECORDS, 3.0)
    result = m.to_result_dict()
    keys = list(result)
    assert keys[-5:] == ["conversations", "turns", "reasoning", "prefix_cache", "sessions"]
    assert keys.index("conversations") > keys.index("late_send_threshold_ms")
    assert result["conversations"]["ended_by"]["failed"] == 1
    first = result["turns"][0]
    assert (first["turn"], first["last_turn"], first["label"], first["requests"]) == (1, 1, "1", 3)
    assert first["median_ttft_ms"] == pytest.approx(100.0) and first["cached_fraction"] == pytest.approx(0.15)
    assert set(first) >= {"mean_itl_ms", "p99_tpot_ms", "mean_prompt_tokens_server", "mean_cached_tokens"}
    assert result["reasoning"]["mean_ttfat_ms"] == pytest.approx(235.0)
    assert result["reasoning"]["total_reasoning_tokens"] == 12
    assert result["prefix_cache"]["cached_tokens"] == 335
    # vLLM's keys are the ones a plain run gives, with the same values for them
    assert result["completed"] == 6 and result["total_input_tokens_dataset"] == 100 + 200 + 300 + 120 + 80 + 50
    write_json(tmp_path / "r.json", result)
    assert json.loads((tmp_path / "r.json").read_text())["turns"][1]["completed"] == 1
    # only one user class: no by_class, so the per-class entries never grow these keys
    assert "by_class" not in result


def test_summary_blocks(extra) -> None:
    text = format_summary(compute_metrics(RECORDS, 3.0))
    lines = text.splitlines()
    start = lines.index("================= Conversations ==================")
    assert lines[start - 1] == "=" * 50  # right after llmload's block
    assert lines[start + 1] == "Conversations:" + " " * 26 + " 3         "
    assert "Completed conversations:                 1         " in lines
    assert "Ended by a failed turn:                  1         " in lines
    assert "Ended at the context cap:                1         " in lines
    assert "End not recorded:" not in text  # every conversation named its end
    assert "Mean conversation duration (s):          2.10      " in lines
    head = lines.index("------By turn (ms, prompt tokens, cached %)-------")
    assert lines[head + 1] == " turn      n  TTFT p50  TPOT p50   prompt   cached"
    assert lines[head + 2] == "    1      3    100.00     35.00    100.0     15.0"
    assert lines[head + 3] == "    2      2     50.00     20.00    200.0     50.0"
    assert lines[head + 4] == "    3      1     40.00     20.00    300.0     64.5"  # 200 / 310
    assert lines[head + 5] == "=" * 50
    assert "Cached fraction of prompt tokens (%):    46.53     " in lines  # 335 / 720
    assert "Requests with reasoning:                 1         " in lines
    assert "Mean TTFAT (ms):                         235.00    " in lines
    assert "Mean TTFAT - TTFT (ms):                  15.00     " in lines
    assert all(len(lines[head + k]) == 50 for k in range(6))  # the table keeps to the block's width


def test_turn_table_marks_missing_values() -> None:
    # no usage, no cache report, one-token outputs (no TPOT)
    lines = format_summary(compute_metrics([rec(0.0, [0.2], conv="Q", turn=1, turns=1, end="completed")], 1.0))
    assert "    1      1    200.00         -     10.0        -" in lines.splitlines()
    assert "Prefix cache" not in lines and "Reasoning" not in lines


def test_cached_tokens_alone_give_the_prefix_cache_block() -> None:
    m = compute_metrics([rec(0.0, [0.1, 0.2], server=40, cached=10)], 1.0)
    assert set(m.to_result_dict()) & {"conversations", "turns", "prefix_cache"} == {"prefix_cache"}
    text = format_summary(m)
    assert "Conversations" not in text
    assert "Cached fraction of prompt tokens (%):    25.00     " in text.splitlines()


def test_records_file_roundtrip(tmp_path: Path) -> None:
    path = tmp_path / "run.records.jsonl"
    write_records(path, RECORDS)
    back = read_records(path)
    assert back == RECORDS
    assert (back[6].conversation_end, back[6].first_answer_token, back[6].reasoning_text) == ("completed", 2.070,
                                                                                            "thinking")
    assert back[1].cached_tokens is None and back[0].cached_tokens == 0


def test_parquet_rows_come_back_with_their_types() -> None:
    """A parquet table turns None into NaN and ints into floats in the columns that mix them; the reader undoes
    it (pandas alone reproduces the table's types, without pyarrow)."""
    pd = pytest.importorskip("pandas")
    rows = pd.DataFrame([r.to_dict() for r in RECORDS]).to_dict("records")
    assert rows[1]["cached_tokens"] != rows[1]["cached_tokens"]  # NaN in the table
    back = [record_from_row(row) for row in rows]
    assert back == RECORDS
    assert back[1].cached_tokens is None and back[1].first_answer_token is None
    assert type(back[0].cached_tokens) is int and type(back[0].server_prompt_tokens) is int


def test_parquet_file_roundtrip(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    path = tmp_path / "run.records.parquet"
    write_records(path, RECORDS, "parquet")
    assert read_records(path) == RECORDS


def test_live_tab_turn_rows() -> None:
    now = [100.0]
    source: list[RequestRecord] = []
    stats = LiveStats(source, clock=lambda: now[0])
    for r in RECORDS:
        copy = RequestRecord.from_dict(r.to_dict())
        shift = 100.0
        copy.start += shift
        copy.first_token = None if copy.first_token is None else copy.first_token + shift
        copy.chunk_times = [t + shift for t in copy.chunk_times]
        source.append(copy)
    now[0] = 103.0
    stats.ingest()
    rows = stats.run()["turns"]
    assert [(r["turn"], r["label"], r["requests"], r["completed"]) for r in rows] == [
        (1, "1", 3, 3), (2, "2", 2, 1), (3, "3", 1, 1)]
    assert rows[0]["ttft_p50_ms"] == pytest.approx(100.0)
    assert rows[0]["tpot_p50_ms"] == pytest.approx(35.0)
    assert rows[0]["cached_fraction"] == pytest.approx(0.15)
    # the window holds requests that ended in the last 10 s: all of them here
    assert stats.window(10.0)["turns"] == rows
    # a window after every request ended has no turns to show, so no rows
    now[0] = 150.0
    assert "turns" not in stats.window(5.0)
    # a test of single requests: no per-turn rows at all
    plain = LiveStats([], clock=lambda: 1.0)
    plain.source.append(rec(1.0, [1.1, 1.2]))
    plain.ingest()
    assert "turns" not in plain.run() and "turns" not in plain.window(10.0)
