"""``llmload sweep`` end to end against the simulator: a list of rates, the SLO search checked against the
simulator's own step-time model in virtual time, a distributed sweep, and compare of two sweeps."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ChildRunner
from tests.support import llmload_command, offline_env, strict_json

#: the default profile with 16 sequences at once: ~18 req/s of 32-token answers, a sharp knee (with 4 the search
#: took 48 s alone, with 8 27 s, with 16 19 s: every point is 30 requests). The fast profile's ~10 ms ITL made points client-limited with
#: one core busy: the read lag a loaded client may show is a third of the ITL
KNEE_PROFILE = "l40-qwen3-8b"
KNEE_SEQS = 16
KNEE_SIM = f"--profile {KNEE_PROFILE} --max-num-seqs {KNEE_SEQS}"
KNEE_WORKLOAD = ("--dataset-name", "random", "--random-input-len", "64", "--random-output-len", "32",
                 "--constant-rate")


def sweep(runner: ChildRunner, out: Path, *args: str, timeout: float = 300.0):
    run = runner.run([*llmload_command(), "sweep", "-o", str(out), "--disable-tqdm", *args], env=offline_env(),
                     timeout=timeout, result_dir=out)
    return run


def read_sweep(out: Path) -> dict:
    return strict_json((out / "sweep.json").read_text(), out / "sweep.json")


@pytest.fixture(scope="module")
def four_rates(child_runner_module: ChildRunner, tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("four") / "sweep"
    # the default profile (27 ms steps) and short answers: a loaded client keeps well inside a third of its ITL,
    # where the tiny profile's 2 ms steps made every point client-limited and the sweep answerless
    run = sweep(child_runner_module, out, "--request-rates", "8,16,32,64", "--num-prompts", "16",
                "--dataset-name", "random", "--random-input-len", "64", "--random-output-len", "16",
                "--slo", "ttft:500", "--label", "l40")
    assert run.returncode == 0, run.describe()
    return run, out


@pytest.mark.serial
@pytest.mark.slow
def test_four_rates_give_four_points_that_agree_with_their_results(four_rates) -> None:
    run, out = four_rates
    data = read_sweep(out)
    rows = data["points"]
    assert data["mode"] == "rates" and len(rows) == 4
    assert [r["request_rate"] for r in rows] == [8.0, 16.0, 32.0, 64.0]
    achieved = [r["achieved_rate"] for r in rows]
    assert achieved == sorted(achieved) and len(set(achieved)) == 4, achieved
    results = sorted(out.glob("point-*.json"))
    assert len(results) == 4
    for row in rows:
        result = strict_json((out / row["result_file"]).read_text(), row["result_file"])
        assert result["request_rate"] == row["request_rate"]
        assert row["completed"] == result["completed"] == 16
        assert row["achieved_rate"] == result["request_throughput"]
        for metric in ("ttft", "tpot", "itl", "e2el"):
            for stat in ("mean", "median", "p90", "p99"):
                assert row[f"{metric}_ms"][stat] == result[f"{stat}_{metric}_ms"], (metric, stat)
        records = (out / row["records_file"]).read_text().splitlines()
        assert len(records) == 16
        assert row["goodput"] is not None and 0.0 <= row["goodput"] <= 1.0
    assert data["answer"] is not None
    for name in ("sweep_latency.png", "sweep_throughput.png"):
        assert (out / name).stat().st_size > 1000, name
    assert "Sweep Result" in run.stdout


def _virtual_goodput(prompts: list[int], rate: float, slo_s: float) -> float:
    """The simulator's engine in virtual time (its step-time model, no sockets): the share of a constant-rate
    run's requests whose first token comes within ``slo_s``."""
    from llmload.sim.config import PROFILES
    from llmload.sim.engine import simulate

    profile = dataclasses.replace(PROFILES[KNEE_PROFILE], max_num_seqs=KNEE_SEQS)
    requests = [(i / rate, p, 32) for i, p in enumerate(prompts)]
    emitted = simulate(profile, requests)
    return float(np.mean([times[0] - arrival <= slo_s for times, (arrival, _, _) in zip(emitted, requests, strict=True)]))


@pytest.mark.serial
@pytest.mark.slow
def test_slo_search_finds_the_models_knee_within_its_precision(child_runner: ChildRunner, tmp_path: Path) -> None:
    out = tmp_path / "search"
    run = sweep(child_runner, out, "--slo", "ttft:300", "--goodput-target", "0.9", "--num-prompts", "30",
                *KNEE_WORKLOAD, "--sim-args", KNEE_SIM, "--no-figures")
    assert run.returncode == 0, run.describe()
    data = read_sweep(out)
    answer = data["answer"]
    assert answer["met"], answer
    rows = data["points"]
    assert rows[0]["role"] == "ceiling" and all(r["role"] == "search" for r in rows[1:])
    # the prompt lengths the server counted (usage.prompt_tokens), as the model's input
    first = out / rows[1]["records_file"]
    prompts = [json.loads(line)["server_prompt_tokens"] for line in first.read_text().splitlines()]
    assert len(prompts) == 30
    # independently: where the model's goodput first falls below the target, on a dense grid
    grid = np.arange(1.0, 30.0, 0.02)
    below = [r for r in grid if _virtual_goodput(prompts, r, 0.3) < 0.9]
    assert below, "the model never misses the target on the grid"
    knee = float(below[0])
    width = 0.1 * answer["upper"]  # the stated precision: 10% of the bracket's upper end
    assert answer["upper"] - answer["lower"] <= width + 1e-9
    assert abs(answer["value"] - knee) <= width, (answer, knee)
    assert "Highest request rate meeting ttft<=300 ms" in run.stdout


@pytest.mark.slow
def test_an_slo_no_rate_meets_is_a_clear_answer(child_runner: ChildRunner, tmp_path: Path) -> None:
    out = tmp_path / "never"
    run = sweep(child_runner, out, "--slo", "ttft:0.001", "--search-start", "20", "--max-points", "3",
                "--num-prompts", "6", "--sim-args", "--profile tiny", "--no-figures")
    assert run.returncode == 3, run.describe()
    data = read_sweep(out)
    assert len(data["points"]) == 3 and not data["answer"]["met"] and data["answer"]["value"] is None
    assert [r["request_rate"] for r in data["points"]] == [20.0, 10.0, 5.0]
    assert "No request rate tried met ttft<=0.001 ms" in run.stdout
    assert "Traceback" not in run.stderr


def _counts(data: dict) -> list[tuple]:
    return [(r["request_rate"], r["completed"] + r["failed"] + r["cut_off"], r["not_sent"]) for r in data["points"]]


@pytest.fixture(scope="module")
def two_processes(child_runner_module: ChildRunner, tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("procs")
    args = ("--request-rates", "10,20", "--num-prompts", "16", "--sharegpt-output-len", "32",
            "--sim-args", "--profile h100-llama-8b")
    one = sweep(child_runner_module, base / "one", *args, "--label", "h100")
    two = sweep(child_runner_module, base / "two", *args, "--processes", "2", "--label", "h100-2p")
    assert one.returncode == 0, one.describe()
    assert two.returncode == 0, two.describe()
    return base / "one", base / "two"


@pytest.mark.slow
def test_two_processes_give_the_same_points_and_counts(two_processes) -> None:
    one, two = (read_sweep(p) for p in two_processes)
    assert _counts(one) == _counts(two) == [(10.0, 16, 0), (20.0, 16, 0)]
    # the profile is the one the simulator says it runs (its /v1/models card), not re-read from --sim-args
    assert one["simulated"] and one["sim_profile"] == two["sim_profile"] == "h100-llama-8b", one["sim_profile"]
    for row in two["points"]:
        result = strict_json((two_processes[1] / row["result_file"]).read_text(), row["result_file"])
        assert len(result["workers"]) == 2 and sum(w["records"] for w in result["workers"]) == 16
    ids = [sorted(json.loads(line)["request_id"] for line in (p / row["records_file"]).read_text().splitlines())
           for p, data in ((two_processes[0], one), (two_processes[1], two)) for row in data["points"]]
    assert ids[0] == ids[2] and ids[1] == ids[3]


def test_compare_of_two_sweeps_draws_both_curves(two_processes, child_runner: ChildRunner, tmp_path: Path) -> None:
    one, two = two_processes
    out = tmp_path / "cmp"
    run = child_runner.run([*llmload_command(), "compare", str(one / "sweep.json"), str(two), "--output", str(out)],
                           env=offline_env(), timeout=120)
    assert run.returncode == 0, run.describe()
    assert "h100-2p" in (out / "compare.html").read_text()
    series = json.loads((out / "sweep_figures.json").read_text())
    found = _x_values(series)
    for label, path in (("h100", one), ("h100-2p", two)):
        xs = sorted(r["achieved_rate"] for r in read_sweep(path)["points"])
        assert any(sorted(found_xs) == pytest.approx(xs) for found_xs in found.get(label, [])), (label, found)


def _x_values(series: object) -> dict[str, list[list[float]]]:
    """label -> every x array plotted for it, wherever in the figures' series file it sits."""
    found: dict[str, list[list[float]]] = {}

    def walk(node: object) -> None:
        if isinstance(node, dict):
            label, xs = node.get("sweep", node.get("label")), node.get("x")
            if isinstance(label, str) and isinstance(xs, list) and all(isinstance(x, (int, float)) for x in xs):
                found.setdefault(label, []).append([float(x) for x in xs])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(series)
    return found


@pytest.mark.parametrize(("flags", "message"), [
    ((), "say which loads"),
    (("--request-rates", "4,2"), "increasing"),
    (("--request-rates", "1,2", "--request-rate", "3"), "drop --request-rate"),
    (("--concurrencies", "4,8", "--max-concurrency", "3"), "drop --max-concurrency"),
    (("--slo", "ttfx:5"), "--slo"),
    (("--request-rates", "1", "--result-filename", "x.json"), "names each point"),
    (("--slo", "ttft:5", "--precision", "0"), "precision"),
    (("--request-rates", "1,2", "--think-time", "fixed:1", "--max-concurrency", "2"), "closed loop"),
])
def test_bad_flags_are_one_line_and_exit_2(flags: tuple[str, ...], message: str, child_runner: ChildRunner,
                                           tmp_path: Path) -> None:
    run = sweep(child_runner, tmp_path / "bad", *flags, timeout=60)
    assert run.returncode == 2, run.describe()
    errors = [line for line in run.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and message in errors[0], run.describe()
    assert "Traceback" not in run.stderr
    assert not (tmp_path / "bad" / "sweep.json").exists()


@pytest.mark.serial
@pytest.mark.slow
def test_report_renders_a_real_sweep(four_rates, child_runner: ChildRunner, tmp_path: Path) -> None:
    _run, out = four_rates
    report = tmp_path / "report"
    run = child_runner.run([*llmload_command(), "report", str(out), "--output", str(report)], env=offline_env(),
                           timeout=120)
    assert run.returncode == 0, run.describe()
    html = (report / "sweep.html").read_text()
    data = read_sweep(out)
    assert "SIMULATED" in html.upper() and "l40" in html
    assert "ttft" in html.lower() and f"{data['answer']['value']:g}" in html
    rows = (report / "sweep.csv").read_text().strip().splitlines()
    assert len(rows) == 1 + len(data["points"])
