"""Sweeps over server settings (``llmload sweep --serve-cmd ... --serve-params``) with ``llmload sim`` as the
server: one server per setting, started, waited for and stopped (no process left, checked by PID), each
setting's points and server log kept; the smaller batch's answer is the lower one; a server that exits at
start-up or never answers is a one-line error naming the setting (exit 1) that keeps the settings before it;
and ``--resume`` after a SIGINT runs only what is missing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import end_process, free_port, llmload_command, offline_env

pytestmark = pytest.mark.slow

SIM = f"{sys.executable} -m llmload.cli sim --profile tiny --port {{port}} --max-num-seqs {{max_num_seqs}}"
#: 64-token answers of the tiny profile take ~130 ms each: one at a time, 16 req/s queues; eight at a time do not
WORKLOAD = ("--tokenizer", "builtin", "--num-prompts", "12", "--seed", "5", "--sharegpt-output-len", "64",
            "--ignore-eos", "--no-initial-test", "--no-figures")
LOADS = (*WORKLOAD, "--slo", "ttft:300", "--goodput-target", "0.8", "--request-rates", "4,16")


def settings_argv(port: int, out: Path, params: str, *extra: str, loads: tuple[str, ...] = LOADS) -> list[str]:
    return [*llmload_command(), "sweep", "--serve-cmd", SIM.replace("{port}", str(port)), "--serve-params",
            params, "--base-url", f"http://127.0.0.1:{port}", *loads, "--output", str(out), *extra]


def run(argv: list[str], timeout: float = 240) -> subprocess.CompletedProcess:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=offline_env(),
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        end_process(proc)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_two_settings_two_servers_and_their_answers(tmp_path: Path) -> None:
    out = tmp_path / "settings"
    done = run(settings_argv(free_port(), out, "max_num_seqs=1,8", "--gpus", "2", "--gpu-hour-cost", "2.0"))
    # exit 3: no setting met the SLO, which client-limited points on a loaded machine can rightly make true
    assert done.returncode in (0, 3), done.stderr[-3000:]
    data = json.loads((out / "settings.json").read_text())
    assert data["finished"] and [s["params"] for s in data["settings"]] == [{"max_num_seqs": "1"},
                                                                            {"max_num_seqs": "8"}]
    answers = []
    for entry in data["settings"]:
        folder = out / entry["dir"]
        assert entry["status"] == "finished" and gone(entry["server_pid"]), entry
        assert (folder / "server.log").stat().st_size > 0 and len(list(folder.glob("point-*.json"))) == 2
        sweep = json.loads((folder / "sweep.json").read_text())
        assert sweep["label"] == entry["label"] and sweep["answer"] is not None
        answers.append(sweep["answer"]["value"])  # None: no load met (on a loaded machine: client-limited)
        for row in sweep["points"]:  # two GPUs at $2 an hour
            assert row["output_throughput_per_gpu"] == pytest.approx(row["output_throughput"] / 2)
            assert row["cost_per_million_output_tokens"] == pytest.approx(
                2 * 2.0 / (row["output_throughput"] * 3600) * 1e6)
        assert (sweep["answer"]["cost_per_million_output_tokens"] is not None) == sweep["answer"]["met"]
    # one request at a time cannot hold TTFT <= 300 ms at 16 req/s (its queue grows ~70 ms a request), eight at a
    # time can: the smaller setting's answer is the lower one. On a loaded machine the client may be the
    # bottleneck at 16 req/s (a 1 ms read-lag limit at this profile's 2 ms ITL), which is never an answer
    # either, so that point must then say so rather than meet the SLO
    small, large = ({r["request_rate"]: r for r in json.loads((out / e["dir"] / "sweep.json").read_text())["points"]}
                    for e in data["settings"])
    assert small[16.0]["goodput"] < 0.8 and small[16.0]["ttft_ms"]["median"] > large[16.0]["ttft_ms"]["median"]
    # a client-limited point is no answer, at whichever rate it happens: at 4 req/s it ends the search with none
    # (two merged reads of ~770 are enough on a loaded machine)
    assert answers[0] == 4.0 or small[4.0]["client_limited"], small[4.0]
    assert answers[1] == 16.0 or any(p["client_limited"] for p in large.values()), large
    assert (done.returncode == 3) == (answers == [None, None]), (done.returncode, answers)
    assert "Settings Result" in done.stdout and "max_num_seqs=8" in done.stdout
    # the report of the settings sweep: both settings' sweeps overlaid, and one Pareto front over their points
    report = run([*llmload_command(), "report", str(out), "--output", str(tmp_path / "report")])
    assert report.returncode == 0, report.stderr[-2000:]
    pareto = json.loads((tmp_path / "report" / "pareto.json").read_text())
    (group,) = pareto["groups"]
    assert {p["sweep"] for p in group["points"]} == {"max_num_seqs=1", "max_num_seqs=8"}
    # the front is made of the points the client did not limit (none on a machine too loaded for any)
    assert len(group["points"]) == 4
    assert any(p["on_front"] for p in group["points"]) == any(not p["client_limited"] for p in group["points"])
    assert not any(p["on_front"] and p["client_limited"] for p in group["points"])
    assert (tmp_path / "report" / "sweep_pareto.png").stat().st_size > 1000


def test_a_server_that_fails_is_one_line_and_keeps_the_settings_before(tmp_path: Path) -> None:
    out = tmp_path / "failing"
    # max_num_seqs=0 is refused by llmload sim at start-up (exit 2): the second setting never comes up
    done = run(settings_argv(free_port(), out, "max_num_seqs=8,0"))
    assert done.returncode == 1, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "setting 2 (max_num_seqs=0)" in errors[0] and "exited with code 2" in errors[0]
    assert "Traceback" not in done.stderr
    data = json.loads((out / "settings.json").read_text())
    assert [e["status"] for e in data["settings"]] == ["finished", "server failed"] and not data["finished"]
    assert (out / data["settings"][0]["dir"] / "sweep.json").exists()
    # a server that never answers: the ready timeout, then its whole process group is stopped
    never = [*llmload_command(), "sweep", "--serve-cmd", f"{sys.executable} -c 'import time; time.sleep(120)'",
             "--base-url", f"http://127.0.0.1:{free_port()}", "--serve-ready-timeout", "2", *LOADS,
             "--output", str(tmp_path / "never")]
    done = run(never)
    assert done.returncode == 1 and "did not answer /health or /v1/models" in done.stderr, done.stderr[-2000:]
    entry = json.loads((tmp_path / "never" / "settings.json").read_text())["settings"][0]
    assert entry["status"] == "server failed" and gone(entry["server_pid"])
    # a command that cannot start at all: the same one line naming the setting
    missing = run([*llmload_command(), "sweep", "--serve-cmd", str(tmp_path / "no-such-server"), "--base-url",
                   f"http://127.0.0.1:{free_port()}", *LOADS, "--output", str(tmp_path / "missing")])
    errors = [line for line in missing.stderr.splitlines() if line.startswith("error:")]
    assert missing.returncode == 1 and len(errors) == 1 and "setting 1 (default): cannot start" in errors[0], \
        missing.stderr[-2000:]
    # usage errors come before any server starts (exit 2)
    bad = run([*llmload_command(), "sweep", "--serve-cmd", "x --n {n}", "--serve-params", "m=1", "--base-url",
               "http://127.0.0.1:9", *LOADS, "--output", str(tmp_path / "bad")])
    assert bad.returncode == 2 and "--serve-cmd uses {n}" in bad.stderr and not (tmp_path / "bad").exists()


def test_resume_after_sigint_runs_only_what_is_missing(tmp_path: Path) -> None:
    out = tmp_path / "resumed"
    port = free_port()
    argv = settings_argv(port, out, "max_num_seqs=4,8", loads=(*WORKLOAD, "--request-rates", "8,16"))
    log = tmp_path / "first.log"
    with open(log, "wb") as sink:
        proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=offline_env(),
                                start_new_session=True)
    try:
        second = out / "setting-02-max_num_seqs=8"
        deadline = time.monotonic() + 180
        while not (second / "point-01-rate-8.json").exists():  # the first setting is done, the second runs
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
    finally:
        end_process(proc)
    assert code == 130, log.read_text()[-3000:]
    data = json.loads((out / "settings.json").read_text())
    assert [e["status"] for e in data["settings"]] == ["finished", "interrupted"]
    assert all(gone(e["server_pid"]) for e in data["settings"])
    done = run([*argv, "--resume"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Setting 1/2 (max_num_seqs=4): finished before, skipped (--resume)" in done.stderr
    assert done.stderr.count("starting the server") == 1
    data = json.loads((out / "settings.json").read_text())
    assert [e["status"] for e in data["settings"]] == ["finished", "finished"]
    assert json.loads((second / "sweep.json").read_text())["finished"]


def test_trials_repeat_a_sweep_and_report_the_spread(start_sim, tmp_path: Path) -> None:
    sim = start_sim("--ttft-ms", "10", "--itl-ms", "2")
    out = tmp_path / "trials"
    done = run([*llmload_command(), "sweep", "--base-url", sim.url, "--tokenizer", "builtin", "--num-prompts", "8",
                "--sharegpt-output-len", "8", "--ignore-eos", "--request-rates", "20,40", "--slo", "ttft:5000",
                "--trials", "2", "--no-figures", "--output", str(out)])
    # 3: no trial met the SLO, which a loaded machine's client-limited points (never an answer) can make true
    assert done.returncode in (0, 3), done.stderr[-3000:]
    (entry,) = json.loads((out / "settings.json").read_text())["settings"]
    assert [t["dir"] for t in entry["trials"]] == ["trial-1", "trial-2"] and all(t["finished"] for t in entry["trials"])
    trials = [json.loads((out / f"trial-{k}" / "sweep.json").read_text()) for k in (1, 2)]
    # the spread is the two trials' own numbers (an answer may differ: a client-limited point is never one)
    met = [t["answer"]["value"] for t in trials if t["answer"]["met"]]
    assert entry["spread"]["answer"]["n"] == len(met) and entry["spread"]["answer"]["max"] == max(met, default=None)
    assert [t["answer"] for t in entry["trials"]] == [t["answer"] for t in trials]
    points = {p["request_rate"]: p for p in entry["spread"]["points"]}
    assert sorted(points) == [20.0, 40.0] and all(p["trials"] == 2 for p in points.values())
    for rate, p in points.items():
        throughputs = [r["output_throughput"] for v in trials for r in v["points"] if r["request_rate"] == rate]
        assert (p["output_throughput"]["min"], p["output_throughput"]["max"]) == (min(throughputs), max(throughputs))
