"""Issue 37: a run's statistics come from columns on disk once they grow, and they are still exact; the
workers get their shares in parts as their time comes, and every request is sent once.

A real ``llmload bench --processes 2`` against the simulator, with ``LLMLOAD_SPILL_AFTER`` set so low that every
value column of the master goes to disk after a few dozen values: the result JSON's percentiles, medians and
maxima must equal numpy's over the per-request values the same result saved (``--save-detailed``), bit for bit.
Memory itself is a benchmark's claim (benchmarks/soak.py), not a test's."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.slow

PERCENTILES = (1.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.9, 100.0)


def _label(p: float) -> str:
    return str(int(p)) if int(p) == p else str(p)


def _check(result: dict, name: str, values_s: np.ndarray) -> None:
    arr = np.asarray(values_s, dtype=float) * 1000.0  # as the result computes them: ms first, then statistics
    want = np.percentile(arr, PERCENTILES)
    for p, value in zip(PERCENTILES, want, strict=True):
        assert result[f"p{_label(p)}_{name}_ms"] == float(value), (name, p)
    assert result[f"median_{name}_ms"] == float(np.median(arr)), name
    assert result[f"mean_{name}_ms"] == pytest.approx(float(np.mean(arr)), rel=1e-12), name
    assert result[f"std_{name}_ms"] == pytest.approx(float(np.std(arr)), rel=1e-9, abs=1e-12), name


def test_processes_2_percentiles_equal_numpy_over_the_saved_values(child_runner) -> None:
    run = child_runner.bench(
        "--sim-args", "--ttft-ms 20 --itl-ms 4", "--dataset-name", "random",
        "--random-input-len", "16", "--random-output-len", "24", "--random-range-ratio", "0.5",
        "--num-prompts", "400", "--request-rate", "200", "--seed", "3", "--processes", "2", "--tokenizer",
        "builtin", "--save-result", "--save-detailed", "--disable-tqdm", "--percentile-metrics",
        "ttft,tpot,itl,e2el", "--metric-percentiles", ",".join(_label(p) for p in PERCENTILES),
        env_extra={"LLMLOAD_SPILL_AFTER": "40", "LLMLOAD_PART_S": "0.5"}, timeout=180)
    assert run.returncode == 0, run.describe()
    assert "share goes out in" in run.stdout + run.stderr, run.describe()  # the 2 s schedule went to the workers in parts
    result = run.result()
    done = np.asarray([not e for e in result["errors"]])
    assert done.sum() == result["completed"] == 400, run.describe()
    ttfts = np.asarray(result["ttfts"])[done]
    e2els = np.asarray(result["latencies"])[done]
    outs = np.asarray(result["output_lens"])[done]
    itls = np.concatenate([np.asarray(x, dtype=float) for x, d in zip(result["itls"], done, strict=True) if d])
    assert itls.size > 40 * 10  # the ITL column spilled many times over
    tpots = np.asarray([(e - t) / (n - 1) for e, t, n in zip(e2els, ttfts, outs, strict=True) if n > 1])
    _check(result, "ttft", ttfts)
    _check(result, "itl", itls)
    _check(result, "e2el", e2els)
    _check(result, "tpot", tpots)
