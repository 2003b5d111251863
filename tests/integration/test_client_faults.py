"""Client faults, black-box: real ``llmload bench`` processes on 127.0.0.1 that lose workers (SIGKILL), have one
frozen (SIGSTOP) and resumed, have the master SIGTERMed, cannot write their result directory, or run out of
file space while writing the records. Each run must finish the way docs/distributed.md and docs/reliability.md
say, with every request accounted for."""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support import (
    ChildProcesses,
    assert_sent_once_but_the_batch_window,
    free_port,
    is_run_request,
    llmload_command,
    offline_env,
    strict_json,
    tail,
    trace_lines,
    wait_for_text,
)

#: the simulator's request ids in a distributed run are ``r{index}``; the initial probe keeps its sample id


# -- process bookkeeping -----------------------------------------------------------------------------------

@pytest.fixture
def procs(tmp_path: Path) -> Iterator[ChildProcesses]:
    with ChildProcesses(tmp_path) as p:
        yield p


def wait_exit(proc: subprocess.Popen, err: Path, timeout: float) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{' '.join(map(str, proc.args))} still running after {timeout} s\n{tail(err)}")


def wait_for_run_requests(trace: Path, n: int, proc: subprocess.Popen, err: Path, timeout: float) -> None:
    """Wait until the simulator has finished ``n`` requests of the run itself (not the initial test)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sum(1 for t in trace_lines(trace) if is_run_request(t["client_id"])) >= n:
            return
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    pytest.fail(f"the simulator did not finish {n} requests within {timeout} s (exit {proc.poll()})\n{tail(err)}")


def received_per_id(trace: Path) -> Counter:
    """How many times the simulator received each request of the run (by its request id)."""
    return Counter(t["client_id"] for t in trace_lines(trace) if is_run_request(t["client_id"]))


def result_files(result_dir: Path) -> tuple[dict, list[dict]]:
    found = sorted(result_dir.glob("*.json"))
    assert len(found) == 1, f"expected one result JSON in {result_dir}: {found}"
    result = strict_json(found[0].read_text(), found[0])
    records_path = found[0].with_name(found[0].name[: -len(".json")] + ".records.jsonl")
    records = [json.loads(line) for line in records_path.read_text().splitlines() if line.strip()]
    return result, records


def master_argv(tmp: Path, name: str, port: int, workers: int, sim_trace: Path, *workload: str) -> list[str]:
    return [*llmload_command(), "bench", "--sim-args", f"--ttft-ms 20 --itl-ms 10 --trace-file {sim_trace}",
            "--ignore-eos", "--constant-rate", "--seed", "0", "--save-result", "--disable-tqdm",
            "--result-dir", str(tmp / name), "--master", "--expect-workers", str(workers),
            "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port), *workload]


def worker_argv(port: int) -> list[str]:
    return [*llmload_command(), "bench", "--worker", "--master-host", "127.0.0.1", "--master-port", str(port)]


def start_cluster(procs: ChildProcesses, tmp: Path, name: str, workers: int, *workload: str):
    """A master (with its own simulator) and ``workers`` separately started workers, once the run started."""
    sim_trace = tmp / f"{name}.sim.jsonl"
    port = free_port()
    master, out, err = procs.start(name, master_argv(tmp, name, port, workers, sim_trace, *workload))
    started = []
    for k in range(workers):
        started.append(procs.start(f"{name}-w{k}", worker_argv(port)))
        # one after the other: worker k is the k-th to connect
        wait_for_text(err, rf"{k + 1}/{workers} workers connected", master, 90)
    wait_for_text(err, r"Starting main benchmark run", master, 60)
    return master, out, err, started, sim_trace


def accounted(result: dict, records: list[dict], num_prompts: int) -> None:
    """Every request once: a record, lost with a dead worker, or not sent; no index twice in the records."""
    ids = [r["request_id"] for r in records]
    assert len(ids) == len(set(ids)), f"a request recorded twice: {Counter(ids).most_common(3)}"
    assert result["num_prompts"] == num_prompts
    total = len(records) + result["lost_with_workers"] + result["not_sent"]
    assert total == num_prompts, (
        f"{len(records)} records + {result['lost_with_workers']} lost + {result['not_sent']} not sent = {total}, "
        f"not {num_prompts}")


# -- two of four workers SIGKILLed mid-run -----------------------------------------------------------------

KILL_PROMPTS = 120


@pytest.mark.slow
def test_two_of_four_workers_sigkilled_mid_run(procs, tmp_path: Path) -> None:
    # 12 s of schedule (10 req/s), each stream ~1 s (100 tokens, 10 ms apart): ~10 in flight at any time
    master, out, err, workers, sim_trace = start_cluster(
        procs, tmp_path, "kill", 4, "--sharegpt-output-len", "100", "--request-rate", "10",
        "--num-prompts", str(KILL_PROMPTS))
    # kill once records flow (30 finished, ~4 s in) with most of the schedule still ahead
    wait_for_run_requests(sim_trace, 30, master, err, 60)
    victims = [workers[1][0], workers[3][0]]
    assert all(v.poll() is None for v in victims), "a worker ended before it was killed"
    for victim in victims:
        os.kill(victim.pid, signal.SIGKILL)
    t_kill = time.monotonic()  # CLOCK_MONOTONIC: the clock of the simulator's trace
    for victim in victims:
        victim.wait(timeout=10)

    rc = wait_exit(master, err, 120)
    stdout, stderr = out.read_text(errors="replace"), err.read_text(errors="replace")
    assert rc == 0, f"exit {rc}\n{stdout[-3000:]}\n{stderr[-3000:]}"
    for proc, _, werr in (workers[0], workers[2]):
        assert wait_exit(proc, werr, 30) == 0, tail(werr)  # survivors exit when the master quits
    assert len(re.findall(r"worker\d+ disappeared", stderr)) == 2, stderr[-3000:]

    result, records = result_files(tmp_path / "kill")
    lost_workers = sorted(w["worker"] for w in result["workers"] if w["lost"])
    assert len(lost_workers) == 2 and len(result["workers"]) == 4, result["workers"]
    # docs/distributed.md: records in the file plus the requests lost with the dead workers add up to the
    # number of prompts; the survivors send everything the dead ones had not, so nothing is left unsent
    accounted(result, records, KILL_PROMPTS)
    assert result["not_sent"] == 0, result["not_sent"]
    assert re.search(rf"Lost with dead workers:\s+{result['lost_with_workers']}\b", stdout), stdout
    failed = [r for r in records if not r["success"]]
    assert not failed, [r["error"] for r in failed][:3]

    received = received_per_id(sim_trace)
    recorded = {r["request_id"]: r for r in records}
    # the lost requests were sent (the server saw them) and are exactly the indices missing from the records
    absent = set(received) - set(recorded)
    assert len(absent) == result["lost_with_workers"], (sorted(absent), result["lost_with_workers"])
    assert all(received[i] >= 1 for i in absent), sorted(i for i in absent if not received[i])
    assert len(received) == KILL_PROMPTS, len(received)  # every request of the run reached the server
    # At most twice. A request a dead worker sent in its last batch window (0.25 s: it had not yet reported it
    # as sent) is re-assigned like an unsent one, so the server may see it a second time, from a survivor;
    # nothing else is ever sent twice.
    twice = sorted(i for i, n in received.items() if n > 1)
    assert max(received.values()) <= 2, received.most_common(5)
    for i in twice:
        assert i in recorded and recorded[i]["worker"] not in lost_workers, (i, recorded.get(i))
        first = min(t["received"] for t in trace_lines(sim_trace) if t["client_id"] == i)
        assert first < t_kill, f"{i} was sent twice, the first time after the kill"


# -- a worker frozen for 20 s (SIGSTOP), then resumed ------------------------------------------------------

FREEZE_PROMPTS = 240
FREEZE_S = 20.0


@pytest.mark.slow
def test_worker_sigstopped_20s_then_resumed_sends_nothing_twice(procs, tmp_path: Path) -> None:
    # 40 s of schedule at 6 req/s, short streams (20 tokens): the run outlasts the freeze by ~10 s
    master, out, err, workers, sim_trace = start_cluster(
        procs, tmp_path, "freeze", 2, "--sharegpt-output-len", "20", "--request-rate", "6",
        "--num-prompts", str(FREEZE_PROMPTS))
    wait_for_run_requests(sim_trace, 20, master, err, 60)
    frozen, _, frozen_err = workers[1]
    os.kill(frozen.pid, signal.SIGSTOP)
    t_stop = time.monotonic()
    try:
        # the master misses its heartbeats (~3 s) and gives its unsent requests to the other worker
        wait_for_text(err, r"worker\d+ disappeared", master, FREEZE_S)
        left = FREEZE_S - (time.monotonic() - t_stop)
        if left > 0:
            time.sleep(left)  # the freeze itself is the fault under test: its length is the point
    finally:
        os.kill(frozen.pid, signal.SIGCONT)

    rc = wait_exit(master, err, 120)
    stdout, stderr = out.read_text(errors="replace"), err.read_text(errors="replace")
    assert rc == 0, f"exit {rc}\n{stdout[-3000:]}\n{stderr[-3000:]}"
    for proc, _, werr in workers:
        assert wait_exit(proc, werr, 30) == 0, tail(werr)

    result, records = result_files(tmp_path / "freeze")
    accounted(result, records, FREEZE_PROMPTS)
    assert result["not_sent"] == 0, result["not_sent"]
    # Only the requests the frozen worker sent in its last batch window before the freeze may reach the server
    # twice: at 3 req/s per worker, one or two at most.
    assert_sent_once_but_the_batch_window(sim_trace, FREEZE_PROMPTS, t_stop)
    # on resume the worker asked the master before it sent anything more, and the master said so
    assert "this worker was frozen: asking the master" in frozen_err.read_text(errors="replace"), tail(frozen_err)
    assert re.search(r"worker\d+ is back after a freeze", stderr), stderr[-3000:]


# -- the master SIGTERMed mid-run --------------------------------------------------------------------------

TERM_PROMPTS = 200


@pytest.mark.slow
def test_master_sigtermed_mid_run_saves_partial_result_and_workers_exit(procs, tmp_path: Path) -> None:
    master, out, err, workers, sim_trace = start_cluster(
        procs, tmp_path, "term", 2, "--sharegpt-output-len", "50", "--request-rate", "10",
        "--num-prompts", str(TERM_PROMPTS), "--stop-timeout", "3")
    wait_for_run_requests(sim_trace, 15, master, err, 60)
    os.kill(master.pid, signal.SIGTERM)
    rc = wait_exit(master, err, 60)
    stdout, stderr = out.read_text(errors="replace"), err.read_text(errors="replace")
    assert rc == 143, f"exit {rc}\n{stdout[-3000:]}\n{stderr[-3000:]}"

    result, records = result_files(tmp_path / "term")
    assert result["interrupted"] is True and result["interrupt_signal"] == "SIGTERM", result
    accounted(result, records, TERM_PROMPTS)
    assert result["not_sent"] > 0, "the run was not stopped early: the test stopped nothing"
    assert records, "nothing was measured before the stop"

    # the workers exit after their master (generous: each notices the quit on its own)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(p.poll() is None for p, _, _ in workers):
        time.sleep(0.1)
    still = [p.pid for p, _, _ in workers if p.poll() is None]
    assert not still, f"workers {still} still run 60 s after the master exited\n" + "\n".join(
        tail(e) for _, _, e in workers)


# -- the result directory cannot be written ----------------------------------------------------------------

def _can_create_in(directory: Path) -> bool:
    try:
        (directory / "probe").mkdir()
    except OSError:
        return False
    (directory / "probe").rmdir()
    return True


@pytest.mark.parametrize("case", ["file-as-parent", "no-write-permission"])
def test_unwritable_result_dir_fails_before_any_request(start_sim, tmp_path: Path, case: str) -> None:
    trace = tmp_path / "sim.jsonl"
    sim = start_sim("--ttft-ms", "5", "--itl-ms", "2", "--trace-file", str(trace))
    if case == "file-as-parent":
        parent = tmp_path / "afile"
        parent.write_text("not a directory\n")
        result_dir = parent / "sub"
    else:
        parent = tmp_path / "readonly"
        parent.mkdir()
        parent.chmod(0o555)
        if os.geteuid() == 0:
            # root writes through permission bits; an immutable directory (chattr +i) it cannot write into
            made = subprocess.run(["chattr", "+i", str(parent)], capture_output=True, text=True)
            if made.returncode != 0 or _can_create_in(parent):
                subprocess.run(["chattr", "-i", str(parent)], capture_output=True)
                pytest.skip(f"running as root and this filesystem has no immutable directories: {made.stderr}")
        result_dir = parent / "sub"
    argv = [*llmload_command(), "bench", "--base-url", sim.url, "--tokenizer", "builtin", "--num-prompts", "20",
            "--request-rate", "inf", "--save-result", "--result-dir", str(result_dir), "--disable-tqdm"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, env=offline_env(), timeout=120,
                              stdin=subprocess.DEVNULL)
    finally:
        if case != "file-as-parent":
            if os.geteuid() == 0:
                subprocess.run(["chattr", "-i", str(parent)], capture_output=True)
            parent.chmod(0o755)
    assert proc.returncode == 2, f"exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "--result-dir" in lines[0] and str(result_dir) in lines[0], lines[0]
    assert "Traceback" not in proc.stderr
    assert proc.stdout.strip() == "", proc.stdout
    assert trace_lines(trace) == [], "requests reached the server before the result directory was checked"
    assert not result_dir.exists()


# -- the disk fills up while the records are written -------------------------------------------------------

FULL_PROMPTS = 30


def _limit_file_size(limit: int) -> Callable[[], None]:
    def preexec() -> None:
        # a file may not grow past `limit` bytes; Python ignores SIGXFSZ, so a write past it fails with EFBIG,
        # as on a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return preexec


@pytest.mark.slow
def test_disk_full_while_writing_records(start_sim, procs, tmp_path: Path) -> None:
    sim = start_sim("--ttft-ms", "5", "--itl-ms", "2")

    def bench(name: str, limit: int | None) -> tuple[int, str, str, Path]:
        result_dir = tmp_path / name
        argv = [*llmload_command(), "bench", "--base-url", sim.url, "--tokenizer", "builtin", "--num-prompts",
                str(FULL_PROMPTS), "--request-rate", "inf", "--sharegpt-output-len", "100", "--ignore-eos",
                "--seed", "0", "--save-result", "--result-dir", str(result_dir), "--result-filename", "run.json",
                "--disable-tqdm"]
        proc, out, err = procs.start(name, argv, preexec_fn=_limit_file_size(limit) if limit else None)
        rc = wait_exit(proc, err, 120)
        return rc, out.read_text(errors="replace"), err.read_text(errors="replace"), result_dir

    # measure: how big the result JSON and the records file of this workload are
    rc, _, stderr, free_dir = bench("unlimited", None)
    assert rc == 0, stderr[-3000:]
    assert not (free_dir / "run.journal.jsonl").exists(), "the journal outlived the records file"
    json_size = (free_dir / "run.json").stat().st_size
    records_size = (free_dir / "run.records.jsonl").stat().st_size
    # room for the result JSON (with a wide margin) but for only about a third of the records: less than the
    # journal takes too (its lines leave out the fields that hold their defaults: ~60 % of the records file here)
    limit = max(4 * json_size, records_size // 3)
    assert limit < records_size * 0.8, (json_size, records_size)

    rc, stdout, stderr, full_dir = bench("full", limit)
    records_path = full_dir / "run.records.jsonl"
    assert rc == 1, f"exit {rc}\n{stdout[-2000:]}\n{stderr[-3000:]}"
    assert "Traceback" not in stderr, stderr[-3000:]
    errors = [line for line in stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1, stderr[-3000:]
    assert str(records_path) in errors[0] and "File too large" in errors[0], errors[0]
    # the result JSON was written in full
    result = strict_json((full_dir / "run.json").read_text(), "run.json")
    assert result["num_prompts"] == FULL_PROMPTS and result["completed"] == FULL_PROMPTS, result
    # the records file ends after a whole line: every line is a complete record, and some are missing
    data = records_path.read_bytes()
    assert len(data) <= limit
    assert data == b"" or data.endswith(b"\n"), data[-200:]
    lines = data.decode().splitlines()
    assert 0 < len(lines) < FULL_PROMPTS, len(lines)
    for n, line in enumerate(lines):
        record = json.loads(line)  # a half-written line would not parse
        assert record["success"] and record["request_id"], n
    assert not list(full_dir.glob("*.tmp")), "a temporary file was left behind"
    # the records journal hit the limit first: one warning, the run went on with its texts in memory (every
    # record written has its text), and the journal is kept, ending after a whole line
    journal = full_dir / "run.journal.jsonl"
    warnings = [line for line in stderr.splitlines() if line.startswith("warning: cannot write the records journal")]
    assert len(warnings) == 1 and str(journal) in warnings[0], stderr[-3000:]
    assert all(json.loads(line)["generated_text"] for line in lines)
    kept = journal.read_bytes()
    assert kept.endswith(b"\n") and all(json.loads(line)["success"] for line in kept.splitlines())
