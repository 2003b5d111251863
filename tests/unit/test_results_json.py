"""Our result JSON is standard JSON: no ``Infinity`` or ``NaN`` ever (an infinite value is the string "inf", as
vLLM writes ``request_rate``; NaN is null), and ``llmload report`` reads "inf" as well as old non-JSON files."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from support import strict_json

from llmload.bench.results import json_safe, write_json
from llmload.report.loader import _read_json

VLLM_FIXTURE = Path(__file__).resolve().parents[1] / "data" / "vllm_benchmark_serving_result.json"


def test_non_finite_floats_become_standard_json(tmp_path: Path) -> None:
    data = {
        "request_rate": math.inf,
        "low": -math.inf,
        "missing": math.nan,
        "numpy": np.float64("inf"),
        "nested": {"rates": [1.5, math.inf, (math.nan, -math.inf)], "ok": 2.0, "n": 3, "flag": True},
        "text": "inf",
    }
    path = tmp_path / "r.json"
    write_json(path, data)
    text = path.read_text()
    assert "Infinity" not in text and "NaN" not in text
    back = strict_json(text, path)
    assert back == {
        "request_rate": "inf", "low": "-inf", "missing": None, "numpy": "inf",
        "nested": {"rates": [1.5, "inf", [None, "-inf"]], "ok": 2.0, "n": 3, "flag": True}, "text": "inf",
    }
    assert not list(tmp_path.glob("*.tmp"))
    # finite values pass through unchanged, ints stay ints
    assert json_safe({"a": [1, 2.5, "x", None]}) == {"a": [1, 2.5, "x", None]}


def test_strict_reader_rejects_infinity() -> None:
    """The check every bench test applies to the result JSON (tests/support.py) really fails on Infinity."""
    with pytest.raises(AssertionError, match="Infinity"):
        strict_json('{"request_rate": Infinity}', "r.json")
    with pytest.raises(AssertionError, match="NaN"):
        strict_json('{"x": [1, NaN]}', "r.json")
    assert strict_json('{"request_rate": "inf"}') == {"request_rate": "inf"}


def test_a_value_json_cannot_hold_fails_before_the_file_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    write_json(path, {"v": 1})
    with pytest.raises(TypeError):
        write_json(path, {"v": object()})
    assert json.loads(path.read_text()) == {"v": 1}


def test_report_loader_reads_inf_strings_and_old_infinity_files(tmp_path: Path) -> None:
    vllm = _read_json(VLLM_FIXTURE)
    assert vllm["request_rate"] == "inf"
    old = tmp_path / "old.json"
    old.write_text('{"request_rate": Infinity, "x": -Infinity, "y": NaN, "duration": 1.5}')
    assert _read_json(old) == {"request_rate": "inf", "x": "-inf", "y": None, "duration": 1.5}
