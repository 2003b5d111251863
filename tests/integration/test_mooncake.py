"""A Mooncake KV-cache trace replayed against the simulator's prefix cache: the server finds exactly the reuse
the trace's ``hash_ids`` say, none without its cache, and the requests arrive on the trace's (scaled) clock.

The expected reuse is computed here from the file alone, independently of llmload's own ``prefix_reuse``: for
each request, 512 tokens for every leading full block that an earlier request of the window began with. The
simulator counts hits in its own 16-token blocks of the tokens it received, so "within one block" (512 tokens)
per request is the bound. Two traces: the synthetic sample shipped in the package (always here), and a slice of
the real Mooncake conversation trace in ``../shared/traces`` (Apache-2.0, the Mooncake project, FAST'25) where
this checkout has it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from llmload.datasets.traces.blocks import default_mooncake_path

pytestmark = pytest.mark.slow

BLOCK = 512
SHARED_TRACE = Path(__file__).resolve().parents[3] / "shared" / "traces" / "mooncake_conversation_trace.jsonl"
TRACES = {"shipped-sample": (default_mooncake_path(), 40), "shared-mooncake": (SHARED_TRACE, 16)}


def _rows(path: Path, n: int) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    order = sorted(range(len(rows)), key=lambda i: rows[i]["timestamp"])  # stable: the file's order on ties
    return [dict(rows[i], line=i + 1) for i in order[:n]]


def _expected_reuse(rows: list[dict]) -> list[int]:
    """Brute force: the most leading full blocks any earlier row shares with this one."""
    out = []
    for j, row in enumerate(rows):
        full = min(len(row["hash_ids"]), row["input_length"] // BLOCK)
        best = 0
        for earlier in rows[:j]:
            k = 0
            while (k < full and k < len(earlier["hash_ids"]) and k < earlier["input_length"] // BLOCK
                   and earlier["hash_ids"][k] == row["hash_ids"][k]):
                k += 1
            best = max(best, k)
        out.append(best * BLOCK)
    return out


def _run(child_runner, path: Path, n: int, *extra: str, sim: str) -> tuple[dict, list[dict], str]:
    run = child_runner.bench("--dataset-name", "mooncake", "--dataset-path", str(path), "--num-prompts", str(n),
                             "--sim-args", sim, "--no-initial-test", "--save-result", "--result-filename",
                             "run.json", "--disable-tqdm", *extra, timeout=240)
    assert run.returncode == 0, run.describe()
    return run.result(), run.records(), run.stderr


@pytest.mark.parametrize("trace", list(TRACES))
def test_the_server_finds_the_traces_reuse_within_one_block(child_runner, trace: str) -> None:
    path, n = TRACES[trace]
    if not path.exists():
        pytest.skip(f"{path} is not in this checkout")
    rows = _rows(path, n)
    expected = dict(zip((f"{path.name}:{r['line']}" for r in rows), _expected_reuse(rows), strict=True))
    # one request at a time, in trace order: each finds every earlier one's blocks in the (ample) cache
    result, records, stderr = _run(child_runner, path, n, "--max-concurrency", "1", "--time-scale", "1000",
                                   sim="--prefix-cache-tokens 50000000 --ttft-ms 2 --itl-ms 0.5 --max-model-len 200000")
    assert result["completed"] == n and len(records) == n, result
    assert sorted(r["request_id"] for r in records) == sorted(expected)
    # what each request could find is what the requests the server saw before it left: the same reuse rule in
    # the order they were sent (the trace's order, unless a loaded machine released two queued ones swapped)
    by_id = {f"{path.name}:{x['line']}": x for x in rows}
    sent = sorted(records, key=lambda r: r["start"])
    findable = dict(zip((r["request_id"] for r in sent), _expected_reuse([by_id[r["request_id"]] for r in sent]),
                        strict=True))
    for r in records:
        assert r["prompt_len"] == by_id[r["request_id"]]["input_length"], r["request_id"]
        assert r["cached_tokens"] is not None, r["request_id"]
        assert abs(r["cached_tokens"] - findable[r["request_id"]]) <= BLOCK, \
            (r["request_id"], r["cached_tokens"], findable[r["request_id"]])
    assert sum(expected.values()) > BLOCK * n / 4, "the slice has too little reuse to test anything"
    # and the run says how much reuse the trace itself has, beside what the server found (and keeps it)
    said = sum(expected.values())
    assert f"The trace's own prefix reuse (its hash_ids): {said} of " in stderr, stderr[-2000:]
    assert result["trace_prefix_reuse_tokens"] == said
    assert result["trace_prompt_tokens"] == sum(r["prompt_len"] for r in records)


def test_without_the_servers_cache_nothing_is_cached_and_arrivals_follow_the_trace(child_runner) -> None:
    path, n, scale = default_mooncake_path(), 30, 20.0
    rows = _rows(path, n)
    result, records, _ = _run(child_runner, path, n, "--time-scale", str(scale), sim="--ttft-ms 2 --itl-ms 0.5")
    assert result["completed"] == n, result
    assert all(not r["cached_tokens"] for r in records), [r["cached_tokens"] for r in records][:5]
    # the intended sends are the trace's timestamps (ms), from the window's first, scaled
    by_id = {r["request_id"]: r for r in records}
    intended = np.asarray([by_id[f"{path.name}:{row['line']}"]["intended_send"] for row in rows])
    stamps = np.asarray([row["timestamp"] for row in rows], dtype=float)
    np.testing.assert_allclose(intended - intended[0], (stamps - stamps[0]) / 1000.0 / scale, atol=1e-6)
    # and the requests went out on them (a loaded machine delays a send by milliseconds, a wrong clock by seconds)
    late = np.asarray([by_id[f"{path.name}:{row['line']}"]["start"] for row in rows]) - intended
    assert late.min() > -0.01 and np.median(late) < 0.5, late
