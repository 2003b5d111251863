"""The settings grid of ``llmload sweep --serve-cmd`` (every combination, placeholders filled in without a shell),
the child sweep's command line (this layer's flags taken off, whatever their form) and the trials' spread."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from llmload.common.errors import ConfigError
from llmload.sweep.settings import Setting, check_template, child_argv, parse_grid, render
from llmload.sweep.spread import spread


def test_the_grid_is_every_combination_the_first_name_slowest() -> None:
    grid = parse_grid(["tp=1,2", "max_num_seqs=64,128"])
    assert grid == [{"tp": "1", "max_num_seqs": "64"}, {"tp": "1", "max_num_seqs": "128"},
                    {"tp": "2", "max_num_seqs": "64"}, {"tp": "2", "max_num_seqs": "128"}]
    assert parse_grid(None) == [{}]
    setting = Setting(3, grid[1])
    assert setting.label == "tp=1, max_num_seqs=128" and setting.dirname == "setting-03-tp=1-max_num_seqs=128"
    assert Setting(1, {"model": "org/m:v1"}).dirname == "setting-01-model=org_m_v1"


@pytest.mark.parametrize(("items", "message"), [
    (["max_num_seqs"], "NAME=V1,V2"), (["1x=3"], "NAME=V1,V2"), (["a=1", "a=2"], "given twice"), (["a="], "no values"),
])
def test_bad_params_are_one_line(items: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_grid(items)


def test_placeholders_are_filled_in_without_a_shell_and_checked() -> None:
    template = "vllm serve 'my model' --max-num-seqs {n} --override '{\"a\": 1}'"
    assert render(template, {"n": "64"}) == ["vllm", "serve", "my model", "--max-num-seqs", "64", "--override",
                                             '{"a": 1}']
    check_template(template, {"n"})
    with pytest.raises(ConfigError, match=r"uses \{n\}, which --serve-params does not set"):
        check_template(template, set())
    with pytest.raises(ConfigError, match="m: not used in --serve-cmd"):
        check_template(template, {"n", "m"})


def test_the_child_sweep_gets_the_command_line_without_this_layer_s_flags() -> None:
    argv = ["--serve-cmd", "x {n}", "--serve-params", "n=1,2", "m=3", "--base-url", "http://h:1", "--trials=2",
            "--resume", "--request-rates", "1,2", "-o", "old", "--label", "L", "--serve-ready-timeout", "9",
            "--slo", "ttft:500"]
    child = child_argv(argv, Path("out/setting-01"), "n=1")
    assert child[:4] == [sys.executable, "-m", "llmload.cli", "sweep"]
    assert child[4:] == ["--base-url", "http://h:1", "--request-rates", "1,2", "--slo", "ttft:500", "--output",
                         "out/setting-01", "--label", "n=1"]


def test_the_spread_over_trials_lines_points_up_by_load() -> None:
    def sweep(out: list[float], answer: float | None) -> dict:
        rows = [{"role": "sweep", "request_rate": r, "max_concurrency": None, "output_throughput": o,
                 "ttft_ms": {"median": 10.0 * r}} for r, o in zip((1.0, 2.0), out, strict=True)]
        return {"points": rows, "answer": {"met": answer is not None, "value": answer}}

    s = spread([sweep([100.0, 190.0], 2.0), sweep([110.0, 210.0], 1.0), sweep([90.0, 200.0], None)])
    assert s["trials"] == 3 and s["best_output_throughput"] == 210.0
    assert s["answer"] == {"met": True, "n": 2, "mean": 1.5, "min": 1.0, "max": 2.0}
    at_2 = next(p for p in s["points"] if p["request_rate"] == 2.0)
    assert at_2["trials"] == 3 and at_2["output_throughput"] == {"n": 3, "mean": 200.0, "min": 190.0, "max": 210.0}
    assert at_2["ttft_median_ms"]["mean"] == 20.0
