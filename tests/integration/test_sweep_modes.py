"""``llmload sweep``'s other modes against the simulator: --auto, concurrencies with warm-up on two worker
processes, --duration with --stop-on-saturation, and a signal in the middle of a sweep."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from llmload.sweep.drivers import auto_rates
from tests.conftest import ChildRunner
from tests.support import ChildProcesses, llmload_command, strict_json, wait_for_text


def sweep(runner: ChildRunner, out: Path, *args: str, timeout: float = 300.0):
    return runner.run([*llmload_command(), "sweep", "-o", str(out), "--disable-tqdm", "--no-figures", *args],
                      timeout=timeout, result_dir=out)


def read(out: Path, name: str = "sweep.json") -> dict:
    return strict_json((out / name).read_text(), out / name)


@pytest.mark.slow
def test_auto_measures_the_ceiling_then_rates_up_to_it(child_runner: ChildRunner, tmp_path: Path) -> None:
    out = tmp_path / "auto"
    run = sweep(child_runner, out, "--auto", "2", "--num-prompts", "16", "--sim-args", "--profile tiny")
    assert run.returncode == 0, run.describe()
    data = read(out)
    rows = data["points"]
    assert [r["role"] for r in rows] == ["ceiling", "sweep", "sweep"]
    assert rows[0]["request_rate"] == "inf" and data["ceiling"] == rows[0]["achieved_rate"] > 0
    assert [r["request_rate"] for r in rows[1:]] == auto_rates(data["ceiling"], 2)
    assert all(r["completed"] == 16 for r in rows)


def in_flight_peak(records: list[dict]) -> int:
    """Most requests in flight at once, from their send and last-event times (an end before a start at a tie)."""
    events = sorted([(r["start"], 1) for r in records] + [(r["chunk_times"][-1], -1) for r in records])
    peak = now = 0
    for _t, step in events:
        now += step
        peak = max(peak, now)
    return peak


@pytest.mark.slow
def test_concurrencies_with_warmup_on_two_processes(child_runner: ChildRunner, tmp_path: Path) -> None:
    out = tmp_path / "conc"
    run = sweep(child_runner, out, "--concurrencies", "2,4", "--num-prompts", "12", "--warmup", "4",
                "--processes", "2", "--sim-args", "--profile tiny")
    assert run.returncode == 0, run.describe()
    data = read(out)
    assert data["dimension"] == "max_concurrency" and data["warmup"] == 4
    ids = []
    for row, c in zip(data["points"], (2, 4), strict=True):
        result = read(out, row["result_file"])
        # each point's own concurrency reached the workers (not the sweep's first, nor none)
        assert result["max_concurrency"] == row["max_concurrency"] == c
        assert result["warmup"] == 4 and result["num_prompts"] == 12 and result["completed"] == 12
        records = [json.loads(line) for line in (out / row["records_file"]).read_text().splitlines()]
        assert len(records) == 12
        assert 1 <= in_flight_peak(records) <= c
        ids.append(sorted(r["request_id"] for r in records))
    assert ids[0] == ids[1], "every point measures the same requests after the same warm-up"


@pytest.mark.slow
def test_duration_and_stop_on_saturation_skip_the_higher_loads(child_runner: ChildRunner, tmp_path: Path) -> None:
    out = tmp_path / "sat"
    # ~4.5 req/s of 32-token answers: 1 req/s keeps up, 12 req/s piles requests up
    run = sweep(child_runner, out, "--request-rates", "1,12,20", "--duration", "8", "--stop-on-saturation",
                "--saturation-window", "1", "--stop-timeout", "1", "--dataset-name", "random",
                "--random-input-len", "32", "--random-output-len", "32", "--sim-args", "--max-num-seqs 4",
                timeout=240)
    assert run.returncode == 0, run.describe()
    rows = read(out)["points"]
    assert len(rows) == 2, "the load above the saturated point is not run"
    first, second = rows
    assert first["completed"] == 8 and not first["saturated"]
    assert second["saturated"] and second["stopped_on_saturation"]
    assert second["not_sent"] > 0
    assert "the 1 higher loads are not run" in run.stderr


@pytest.mark.slow
def test_a_signal_stops_the_sweep_and_keeps_the_points(tmp_path: Path) -> None:
    out = tmp_path / "sig"
    # point 2 sends 12 requests over ~2.4 s: the signal, sent as it begins, lands while it runs
    argv = [*llmload_command(), "sweep", "-o", str(out), "--disable-tqdm", "--no-figures", "--request-rates",
            "4,5,6", "--num-prompts", "12", "--sim-args", "--profile tiny", "--stop-timeout", "2"]
    with ChildProcesses(tmp_path) as children:
        proc, _stdout, stderr = children.start("sweep", argv)
        wait_for_text(stderr, r"Sweep point 2/", proc, timeout=120)
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=60)
        except Exception:
            pytest.fail(f"the sweep did not stop after SIGINT\n{stderr.read_text()}")
    assert code == 130, stderr.read_text()
    data = read(out)
    assert data["interrupted"] and len(data["points"]) == 2, "point 3 never runs"
    whole, stopped = (read(out, row["result_file"]) for row in data["points"])
    assert not whole["interrupted"] and whole["completed"] == 12
    assert stopped["interrupted"] and stopped["not_sent"] > 0


@pytest.mark.slow
def test_a_killed_sweep_keeps_the_points_it_finished(tmp_path: Path) -> None:
    out = tmp_path / "killed"
    argv = [*llmload_command(), "sweep", "-o", str(out), "--disable-tqdm", "--no-figures", "--request-rates",
            "4,5,6", "--num-prompts", "12", "--sim-args", "--profile tiny"]
    with ChildProcesses(tmp_path) as children:
        proc, _stdout, stderr = children.start("sweep", argv)
        wait_for_text(stderr, r"Sweep point 2", proc, timeout=120)
        proc.kill()  # no handler runs: only what was written after point 1 remains
        proc.wait(timeout=30)
    data = read(out)
    assert not data["finished"] and len(data["points"]) == 1
    assert (out / data["points"][0]["result_file"]).exists()


@pytest.mark.slow
def test_a_multi_turn_sweep_counts_turns_per_point(child_runner: ChildRunner, tmp_path: Path) -> None:
    out = tmp_path / "turns"
    run = sweep(child_runner, out, "--request-rates", "4,8", "--multi-turn", "--max-turns", "3", "--num-prompts",
                "6", "--sim-args", "--profile tiny")
    assert run.returncode == 0, run.describe()
    data = read(out)
    assert data["finished"] and len(data["points"]) == 2
    for row in data["points"]:
        result = read(out, row["result_file"])
        assert result["conversations"]["completed"] == 6
        turns = result["conversations"]["turns_completed"]
        assert row["completed"] == result["completed"] == turns == sum(t["completed"] for t in result["turns"])
        assert turns > 6, "later turns were sent"
