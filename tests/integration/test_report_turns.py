"""Protects `llmload report` / `llmload compare` on multi-turn runs (issue 11): the "TTFT and cached fraction by
turn index" figure and the per-turn tables appear for a run with turns, with the numbers of the run's records,
and a run of single requests gets neither."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from llmload.bench.results import write_json, write_records
from llmload.client.records import RequestRecord
from llmload.metrics import compute_metrics
from llmload.report.build import build

pytestmark = pytest.mark.slow
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def conversation_records(n: int, ttft_step: float, *, cached: bool = True) -> list[RequestRecord]:
    """``n`` conversations of 3 turns; turn k of conversation i: TTFT (k * ttft_step + i / 1000) s, 4 tokens
    10 ms apart, prompt 100 * k tokens, of which 50 * (k - 1) cached."""
    out = []
    for i in range(n):
        t = float(i)
        for k in (1, 2, 3):
            first = t + k * ttft_step + i / 1000.0
            chunks = [first + 0.01 * j for j in range(4)]
            out.append(RequestRecord(
                request_id=f"{i}-{k}", start=t, first_token=first, chunk_times=chunks, chunk_tokens=[1] * 4,
                output_tokens=4, output_tokens_source="usage", prompt_len=100 * k, server_prompt_tokens=100 * k,
                cached_tokens=50 * (k - 1) if cached else None, success=True, conversation_id=str(i), turn=k,
                conversation_turns=3, conversation_end="completed" if k == 3 else ""))
            t = chunks[-1] + 0.5
    return out


def save_run(directory: Path, name: str, records: list[RequestRecord]) -> Path:
    duration = max(r.chunk_times[-1] for r in records) - min(r.start for r in records)
    result = {"label": name, "backend": "openai-chat", **compute_metrics(records, duration).to_result_dict()}
    path = directory / f"{name}.json"
    write_json(path, result)
    write_records(directory / f"{name}.records.jsonl", records)
    return path


def check_png(path: Path) -> None:
    import matplotlib.image as mpimg

    assert path.read_bytes()[:8] == PNG_SIGNATURE, path
    img = mpimg.imread(path)
    assert img.shape[0] > 200 and img.shape[1] > 400, img.shape
    assert float(np.std(img)) > 0.01, f"{path} looks blank"


def test_report_of_a_multi_turn_run(tmp_path: Path) -> None:
    run = save_run(tmp_path, "chat", conversation_records(8, 0.1))
    out = build([str(run)], tmp_path / "report", name="report", title=None)
    figure = tmp_path / "report" / "turns.png"
    assert figure in out.files
    check_png(figure)
    md = (tmp_path / "report" / "report.md").read_text()
    assert "![TTFT and cached fraction by turn index](turns.png)" in md
    assert "## Per turn" in md
    # turn 2: TTFT 200 ms + i ms for i = 0..7 -> median 203.5 ms; cached 50 of 200 prompt tokens
    row = next(line for line in md.splitlines() if line.startswith("| 2 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[:4] == ["2", "8", "8", "203.50"]
    assert cells[-3:] == ["200.0", "200.0", "25.0"]
    html = (tmp_path / "report" / "report.html").read_text()
    assert "<h2>Per turn</h2>" in html and 'id="turns"' in html
    assert len(re.findall(r'src="data:image/png;base64,', html)) == len([f for f in out.files if f.suffix == ".png"])


def test_compare_overlays_runs_with_turns(tmp_path: Path) -> None:
    fast = save_run(tmp_path, "fast", conversation_records(6, 0.05))
    slow = save_run(tmp_path, "slow", conversation_records(6, 0.2, cached=False))
    out = build([str(fast), str(slow)], tmp_path / "cmp", name="compare", title=None)
    check_png(tmp_path / "cmp" / "turns.png")
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "**fast**" in md and "**slow**" in md
    slow_first = next(line for line in md.split("**slow**")[1].splitlines() if line.startswith("| 1 |"))
    cells = [c.strip() for c in slow_first.strip("|").split("|")]
    assert cells[:4] == ["1", "6", "6", "202.50"]  # 200 ms + i ms for i = 0..5
    assert cells[-1] == "-"  # its server reported no cached tokens
    assert out.table.labels == ("fast", "slow")


def test_single_request_run_has_no_turn_parts(tmp_path: Path) -> None:
    records = [RequestRecord(request_id=str(i), start=float(i), first_token=i + 0.1,
                             chunk_times=[i + 0.1, i + 0.12, i + 0.15], chunk_tokens=[1] * 3, output_tokens=3,
                             prompt_len=10, success=True) for i in range(5)]
    run = save_run(tmp_path, "plain", records)
    out = build([str(run)], tmp_path / "report", name="report", title=None)
    assert not (tmp_path / "report" / "turns.png").exists()
    assert all(f.name != "turns.png" for f in out.files)
    assert "Per turn" not in (tmp_path / "report" / "report.md").read_text()
