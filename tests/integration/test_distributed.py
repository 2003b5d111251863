"""Distributed runs (`--processes N`, `--master`/`--worker`, `locust --processes`) measure what one process does and lose no result."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from support import (
    ChildProcesses,
    assert_sent_once_but_the_batch_window,
    free_port,
    is_run_request,
    llmload_command,
    locust_argv,
    locust_command,
    offline_env,
    tail,
    trace_lines,
    wait_for_text,
)

pytestmark = pytest.mark.slow

LOCUSTFILE = "locustfiles/sharegpt.py"
PROMPTS = 80
#: a fixed-timing workload: every request asks for 20 tokens, sent at exactly 40 req/s
WORKLOAD = ("--sharegpt-output-len", "20", "--ignore-eos", "--constant-rate", "--request-rate", "40",
            "--num-prompts", str(PROMPTS), "--seed", "0", "--save-result", "--disable-tqdm")
SIM_TTFT_MS, SIM_ITL_MS = 50.0, 25.0
SIM_TIMING = f"--ttft-ms {SIM_TTFT_MS:g} --itl-ms {SIM_ITL_MS:g}"
#: medians compared with the truth and across runs: a fifth of an ITL, far above a busy machine's median noise,
#: far below an error of one ITL (a chunk miscounted, a start taken at dispatch)
MEDIAN_TOL_MS = SIM_ITL_MS / 5


# -- process bookkeeping -----------------------------------------------------------------------------------

def _alive_and_ours(pid: int, marker: str) -> bool:
    """``pid`` still runs and its command line names ``marker`` (guards against a recycled PID)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return marker in cmdline


class Procs(ChildProcesses):
    """Children of one test, and the ``--processes`` workers they start (own sessions): ended by PID / group."""

    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp)
        #: process groups of grandchildren (``--processes`` workers start their own session): pid -> marker
        self.groups: dict[int, str] = {}

    def adopt_workers(self, stderr_text: str) -> None:
        """Remember the local worker PIDs ``llmload bench --processes`` announced, to end them should they outlive it."""
        m = re.search(r"local worker processes \(pids ([\d ]+)\)", stderr_text)
        if m:
            for pid in m.group(1).split():
                self.groups[int(pid)] = "--worker"

    def close(self) -> None:
        super().close()
        for pid, marker in self.groups.items():
            if _alive_and_ours(pid, marker):
                try:
                    os.killpg(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Procs]:
    with Procs(tmp_path) as p:
        yield p


def wait(proc: subprocess.Popen, err: Path, timeout: float) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{proc.args} still running after {timeout} s\n{tail(err)}")


def wait_for_lines(path: Path, n: int, proc: subprocess.Popen, timeout: float) -> None:
    """Wait until the sim trace ``path`` has ``n`` lines (a line per finished request)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text(errors="replace").count("\n") >= n:
            return
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    pytest.fail(f"{path.name} did not reach {n} requests within {timeout} s (exit {proc.poll()})")


def start_sim(procs: Procs, name: str, *args: str) -> str:
    """``llmload sim`` on a free loopback port; returns its URL once it listens."""
    proc, out, _ = procs.start(name, [*llmload_command(), "sim", "--host", "127.0.0.1", "--port", "0", *args])
    wait_for_text(out, r"listening on http://127\.0\.0\.1:\d+\b", proc, 30)
    return re.search(r"listening on (http://127\.0\.0\.1:\d+)\b", out.read_text()).group(1)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# -- one bench run and what it left ------------------------------------------------------------------------

class BenchRun:
    def __init__(self, result_dir: Path, sim_trace: Path, stdout: str, stderr: str) -> None:
        self.stdout, self.stderr = stdout, stderr
        found = sorted(result_dir.glob("*.json"))
        assert len(found) == 1, f"expected one result JSON in {result_dir}: {found}\n{stderr[-3000:]}"
        self.result = json.loads(found[0].read_text())
        self.records = read_jsonl(found[0].with_name(found[0].name[:-5] + ".records.jsonl"))
        self.trace = read_jsonl(sim_trace)

    def server_requests(self) -> list[dict]:
        """The server's trace lines of the benchmark itself: the initial probe request finishes before the
        run starts, so it is the first line received."""
        ordered = sorted(self.trace, key=lambda t: t["received"])
        return ordered[1:]


def bench_argv(tmp: Path, name: str, sim_trace: Path, *extra: str) -> list[str]:
    return [*llmload_command(), "bench", "--sim-args", f"{SIM_TIMING} --trace-file {sim_trace}", *WORKLOAD,
            "--result-dir", str(tmp / name), *extra]


def run_bench(procs: Procs, tmp: Path, name: str, *extra: str, workers: int = 0) -> BenchRun:
    """``llmload bench`` with the fixed workload; ``workers`` > 0 adds ``--master`` and that many separately
    started ``llmload bench --worker`` processes."""
    sim_trace = tmp / f"{name}.sim.jsonl"
    if workers:
        port = free_port()
        extra = (*extra, "--master", "--expect-workers", str(workers), "--master-bind-host", "127.0.0.1",
                 "--master-bind-port", str(port))
    master, out, err = procs.start(name, bench_argv(tmp, name, sim_trace, *extra))
    worker_procs = [procs.start(f"{name}-w{k}", [*llmload_command(), "bench", "--worker", "--master-host",
                                                 "127.0.0.1", "--master-port", str(port)])
                    for k in range(workers)]
    rc = wait(master, err, 120)
    procs.adopt_workers(err.read_text(errors="replace"))
    stdout, stderr = out.read_text(errors="replace"), err.read_text(errors="replace")
    assert rc == 0, f"{' '.join(master.args)}\nexit {rc}\n{stdout[-3000:]}\n{stderr[-3000:]}"
    for proc, _, werr in worker_procs:
        assert wait(proc, werr, 15) == 0, tail(werr)  # a worker exits when its master quits
    return BenchRun(tmp / name, sim_trace, stdout, stderr)


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) * 1000.0


def server_timing(run: BenchRun) -> dict[str, float]:
    """TTFT and ITL percentiles (ms) as the server sent them (sim trace: monotonic send times)."""
    reqs = run.server_requests()
    ttfts = [t["chunks"][0] - t["received"] for t in reqs]
    itls = [b - a for t in reqs for a, b in zip(t["chunks"], t["chunks"][1:], strict=False)]
    return {"ttft_p50": pct(ttfts, 50), "ttft_p99": pct(ttfts, 99), "itl_p50": pct(itls, 50),
            "itl_p99": pct(itls, 99)}


# -- (a) one process, --processes 2, master + 2 separate workers: the same numbers -------------------------

@pytest.mark.serial
def test_same_workload_same_results_with_1_process_2_processes_and_2_remote_workers(procs, tmp_path: Path) -> None:
    runs = {
        "single": run_bench(procs, tmp_path, "single"),
        "processes2": run_bench(procs, tmp_path, "processes2", "--processes", "2"),
        "master2": run_bench(procs, tmp_path, "master2", workers=2),
    }
    for name, run in runs.items():
        res = run.result
        assert res["completed"] == PROMPTS and res["failed"] == 0 and res["not_sent"] == 0, (name, run.stdout)
        assert len(run.records) == PROMPTS, (name, len(run.records))
        assert all(r["success"] and not r["cut_off"] for r in run.records), name
        assert re.search(rf"Successful requests:\s+{PROMPTS}\b", run.stdout), (name, run.stdout)
        assert len(run.server_requests()) == PROMPTS, (name, len(run.trace))
        assert all(t["status"] == "ok" for t in run.server_requests()), name
    for name in ("processes2", "master2"):
        run = runs[name]
        assert re.search(r"Workers:\s+2\b", run.stdout), run.stdout
        assert re.search(r"Lost with dead workers:\s+0\b", run.stdout), run.stdout
        assert run.result["lost_with_workers"] == 0
        workers = {w["worker"]: w for w in run.result["workers"]}
        assert sorted(workers) == ["worker0", "worker1"], run.result["workers"]
        assert [w["records"] for w in workers.values()] == [PROMPTS // 2] * 2, run.result["workers"]
        assert not any(w["lost"] for w in workers.values())
        # one global schedule, split: every request exactly once under the id the 1-process run gives it
        assert sorted(r["request_id"] for r in run.records) == sorted(r["request_id"] for r in runs["single"].records)
        assert len({r["request_id"] for r in run.records}) == PROMPTS
        assert Counter(r["worker"] for r in run.records) == {"worker0": PROMPTS // 2, "worker1": PROMPTS // 2}

    base = runs["single"]
    base_prompts = sorted(r["prompt_len"] for r in base.records)
    base_server_prompts = sorted(t["prompt_tokens"] for t in base.server_requests())
    assert base_prompts == base_server_prompts
    base_offsets = np.sort([r["intended_send"] for r in base.records])
    base_offsets -= base_offsets[0]
    np.testing.assert_allclose(base_offsets, np.arange(PROMPTS) / 40.0, atol=1e-6)
    report = {}
    for name, run in runs.items():
        # the same requests: the same prompts (client and server side), the same output sizes
        assert sorted(r["prompt_len"] for r in run.records) == base_prompts, name
        assert sorted(t["prompt_tokens"] for t in run.server_requests()) == base_server_prompts, name
        assert Counter(r["output_tokens"] for r in run.records) == {20: PROMPTS}, name
        assert Counter(t["completion_tokens"] for t in run.server_requests()) == {20: PROMPTS}, name
        assert Counter(len(t["chunks"]) for t in run.server_requests()) == {20: PROMPTS}, name
        assert Counter(t["max_tokens"] for t in run.server_requests()) == {20: PROMPTS}, name
        assert run.result["total_input_tokens"] == base.result["total_input_tokens"], name
        assert run.result["total_output_tokens"] == base.result["total_output_tokens"] == 20 * PROMPTS, name
        # the same schedule: send offsets i/40 s (worker clocks moved onto the master's timeline)
        # (each batch's clock offset is read on its worker: a few us apart, more if a worker is preempted
        # between its two clock reads; 5 ms is a fifth of the 25 ms spacing)
        offsets = np.sort([r["intended_send"] for r in run.records])
        np.testing.assert_allclose(offsets - offsets[0], base_offsets, atol=5e-3, err_msg=name)
        report[name] = {"server": server_timing(run),
                        "client": {k: run.result[f"median_{k}_ms"] for k in ("ttft", "tpot", "itl")}}
    # the server sent with the same fixed timing in every run, and the client measures what the server sent,
    # with one process or several. (Tails are not compared: on a small machine the p99 is the scheduling of
    # four processes on the cores, the simulator's included, not the measurement.)
    for name, numbers in report.items():
        srv, client = numbers["server"], numbers["client"]
        assert abs(srv["ttft_p50"] - SIM_TTFT_MS) < MEDIAN_TOL_MS and abs(srv["itl_p50"] - SIM_ITL_MS) < MEDIAN_TOL_MS, (
            f"{name}: the simulator did not keep its fixed timing (machine overloaded?): {report}")
        assert abs(client["ttft"] - srv["ttft_p50"]) < MEDIAN_TOL_MS, (name, report)
        assert abs(client["itl"] - srv["itl_p50"]) < MEDIAN_TOL_MS, (name, report)
        assert abs(client["tpot"] - SIM_ITL_MS) < MEDIAN_TOL_MS, (name, report)
        for key, value in client.items():
            assert abs(value - report["single"]["client"][key]) < MEDIAN_TOL_MS, (name, key, report)


# -- (b) a worker killed with SIGKILL mid-run --------------------------------------------------------------

KILL_PROMPTS = 120


def test_worker_killed_mid_run_is_reported_and_its_records_kept(procs, tmp_path: Path) -> None:
    sim_trace = tmp_path / "kill.sim.jsonl"
    port = free_port()
    argv = [*llmload_command(), "bench", "--sim-args", f"--ttft-ms 20 --itl-ms 10 --trace-file {sim_trace}",
            "--sharegpt-output-len", "100", "--ignore-eos", "--constant-rate", "--request-rate", "20",
            "--num-prompts", str(KILL_PROMPTS), "--save-result", "--disable-tqdm", "--result-dir",
            str(tmp_path / "kill"), "--master", "--expect-workers", "2", "--master-bind-host", "127.0.0.1",
            "--master-bind-port", str(port)]
    # the 6 s schedule goes to the workers in parts of 2 s: the kill hands over parts not yet sent as well
    master, out, err = procs.start("kill-master", argv, offline_env({"LLMLOAD_PART_S": "2"}))
    worker_argv = [*llmload_command(), "bench", "--worker", "--master-host", "127.0.0.1", "--master-port", str(port)]
    # start them one after the other so the survivor is worker0 and the victim worker1
    w0, _, w0err = procs.start("kill-w0", worker_argv)
    wait_for_text(err, r"1/2 workers connected", master, 60)
    w1, _, _ = procs.start("kill-w1", worker_argv)
    wait_for_text(err, r"Starting main benchmark run", master, 60)
    # 6 s of schedule, 1 s per request: kill once 40 have finished (~3 s in), with about 10 of each worker's
    # streaming and half the schedule still ahead (a condition, not a sleep: a slow start-up shifts it)
    wait_for_lines(sim_trace, 1 + 40, master, 60)
    assert w1.poll() is None, "worker1 ended before it was killed"
    os.kill(w1.pid, signal.SIGKILL)
    t_kill = time.monotonic()  # CLOCK_MONOTONIC, the clock of the sim trace and of the records
    w1.wait(timeout=5)

    rc = wait(master, err, 90)
    stdout, stderr = out.read_text(errors="replace"), err.read_text(errors="replace")
    assert rc == 0, f"exit {rc}\n{stdout[-3000:]}\n{stderr[-3000:]}"
    assert wait(w0, w0err, 15) == 0, tail(w0err)
    run = BenchRun(tmp_path / "kill", sim_trace, stdout, stderr)

    # the loss is reported: summary, log and JSON name worker1
    lost = run.result["lost_with_workers"]
    workers = {w["worker"]: w for w in run.result["workers"]}
    assert workers["worker1"]["lost"] is True and workers["worker0"]["lost"] is False, run.result["workers"]
    assert re.search(r"worker1 records \(LOST\):\s+\d+", stdout), stdout
    assert re.search(r"worker0 records \(ok\):\s+\d+", stdout), stdout
    assert re.search(rf"Lost with dead workers:\s+{lost}\b", stdout), stdout
    assert "worker1 disappeared" in stderr, stderr[-3000:]
    assert "share goes out in" in stdout + stderr, stderr[-3000:]
    assert lost >= 1, f"nothing was in flight with worker1 when it was killed?\n{stdout}"

    # every request is accounted for: in the records file, or lost with worker1 — none twice, none unsent
    ids = [r["request_id"] for r in run.records]
    assert len(ids) == len(set(ids)), Counter(ids).most_common(3)
    assert len(run.records) + lost == KILL_PROMPTS, (len(run.records), lost)
    assert run.result["not_sent"] == 0
    assert all(r["success"] for r in run.records), [r["error"] for r in run.records if not r["success"]][:3]
    # with their texts (held in the master's records journal during the run, which is gone now)
    assert all(r["generated_text"] for r in run.records)
    assert not list((tmp_path / "kill").glob("*.journal.jsonl")), sorted((tmp_path / "kill").iterdir())
    by_worker = Counter(r["worker"] for r in run.records)
    assert by_worker["worker1"] == workers["worker1"]["records"] >= 1, by_worker
    assert by_worker["worker0"] == workers["worker0"]["records"], by_worker

    server: dict[str, list[dict]] = {}
    for t in run.server_requests():
        server.setdefault(t["client_id"], []).append(t)
    # what worker1 shipped before it died is kept, and is what the server really sent it
    for r in run.records:
        if r["worker"] != "worker1":
            continue
        match = [t for t in server.get(r["request_id"], []) if t["status"] == "ok" and t["received"] < t_kill
                 and abs(t["received"] - r["start"]) < 0.5]
        assert match, f"worker1's record {r['request_id']} has no finished server request before the kill"
        assert r["output_tokens"] == match[0]["completion_tokens"] == 100
        assert len(r["chunk_times"]) == len(match[0]["chunks"])
    # every request the server had finished well before the kill (>= 6 record batches ago) reached the file
    finished_before = {cid for cid, ts in server.items() for t in ts
                       if t["status"] == "ok" and t["chunks"] and t["chunks"][-1] < t_kill - 1.5}
    assert finished_before, "no request had finished 1.5 s before the kill: the check below checks nothing"
    missing = finished_before - set(ids)
    assert not missing, f"{len(missing)} requests finished > 1.5 s before the kill are not in the records file"
    # the lost ones were sent (the server saw them) and are exactly the ids absent from the file
    absent = {cid for cid in server if is_run_request(cid)} - set(ids)
    assert len(absent) == lost, (sorted(absent), lost)
    assert all(server.get(i) for i in absent), [i for i in absent if not server.get(i)]
    assert any(t["status"] == "client_closed" for i in absent for t in server[i]), \
        "no stream of the killed worker was cut by its death"


# -- (c) locust -f --processes 2 -t: requests in flight at the deadline are not dropped --------------------

@dataclass
class LocustRun:
    returncode: int
    stderr: str
    records: list[dict] | None
    trace: list[dict]

    def logs(self, n: int = 4000) -> str:
        """Locust's and llmload's log lines (not the stats tables)."""
        lines = [ln for ln in self.stderr.splitlines() if "locust." in ln or "llmload" in ln or "Error" in ln]
        return "\n".join(lines)[-n:]


def test_worker_joining_mid_run_takes_a_share_of_what_is_not_yet_due(procs, tmp_path: Path) -> None:
    """A second worker that connects while the run is going gets requests moved from the first; each request is
    still sent exactly once and every one is in the records."""
    sim_trace = tmp_path / "join.sim.jsonl"
    port = free_port()
    argv = [*llmload_command(), "bench", "--sim-args", f"{SIM_TIMING} --trace-file {sim_trace}",
            "--sharegpt-output-len", "20", "--ignore-eos", "--constant-rate", "--request-rate", "20",
            "--num-prompts", "160", "--save-result", "--disable-tqdm", "--result-dir", str(tmp_path / "join"),
            "--master", "--expect-workers", "1", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port)]
    worker = [*llmload_command(), "bench", "--worker", "--master-host", "127.0.0.1", "--master-port", str(port)]
    master, out, err = procs.start("join", argv)
    procs.start("join-w0", worker)
    wait_for_text(err, "Starting main benchmark run", master, 90)
    # mid-run: the 8 s schedule has begun (a fresh worker needs a second or more to start and connect)
    wait_for_lines(sim_trace, 1 + 5, master, 60)
    procs.start("join-w1", worker)
    assert wait(master, err, 90) == 0, tail(err)
    run = BenchRun(tmp_path / "join", sim_trace, out.read_text(), err.read_text())
    assert "joined: it takes" in run.stderr, tail(err)
    by_worker = Counter(r["worker"] for r in run.records)
    assert set(by_worker) == {"worker0", "worker1"} and by_worker["worker1"] > 0, by_worker
    ids = [r["request_id"] for r in run.records]
    assert len(ids) == 160 and len(set(ids)) == 160, Counter(ids).most_common(3)
    assert all(r["success"] for r in run.records)
    # the server saw each request exactly once (no double sends after the move)
    sent = Counter(t["client_id"] for t in run.server_requests())
    assert len(sent) == 160 and max(sent.values()) == 1, sent.most_common(3)


@pytest.fixture(scope="module")
def locust_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocustRun]:
    """One ``locust -f locustfiles/sharegpt.py --headless --processes 2 -t 10s`` run against a simulator whose
    100-token streams take 2 s, so that streams are in flight when the time is up. (Locust's -t clock starts
    while the workers still build their workload, up to ~5 s on a busy 2-core machine: 10 s leaves time for
    some streams to finish.)"""
    tmp = tmp_path_factory.mktemp("locust")
    procs = Procs(tmp)
    try:
        sim_trace = tmp / "sim.jsonl"
        url = start_sim(procs, "sim", "--ttft-ms", "20", "--itl-ms", "20", "--trace-file", str(sim_trace))
        records_path = tmp / "records.jsonl"
        port = free_port()  # never the default 5557: another master on this host would adopt our workers
        proc, _, err = procs.start("locust", [
            *locust_command(), "-f", LOCUSTFILE, "--headless", "--processes", "2", "--master-bind-host",
            "127.0.0.1", "--master-bind-port", str(port), "--master-port", str(port), "-u", "8", "-r", "8",
            "-t", "10s", "--host", url, "--tokenizer", "builtin", "--max-tokens", "100", "--ignore-eos",
            "--num-prompts", "200", "--llm-records", str(records_path)])
        rc = wait(proc, err, 90)
        yield LocustRun(rc, err.read_text(errors="replace"),
                        read_jsonl(records_path) if records_path.exists() else None,
                        read_jsonl(sim_trace) if sim_trace.exists() else [])
    finally:
        procs.close()


def _check_ran(run: LocustRun) -> list[dict]:
    assert run.returncode == 0, f"exit {run.returncode}\n{run.logs()}"
    assert "failed to send heartbeat" not in run.stderr, (
        "the master declared its workers missing: they blocked their event loop for over 3 s while building "
        f"the workload at test start (llmload/plugin.py configure_users), so the run stopped early:\n{run.logs()}")
    assert run.records is not None, f"no records file\n{run.logs()}"
    return run.records


def _pair(records: list[dict], trace: list[dict]) -> list[tuple[dict, dict]]:
    """Match each record to the server's line for it: same X-Request-Id, nearest receive time, one to one."""
    candidates = sorted(
        ((abs(t["received"] - r["start"]), ri, ti)
         for ri, r in enumerate(records) for ti, t in enumerate(trace) if t["client_id"] == r["request_id"]),
        key=lambda c: c[0])
    used_r: set[int] = set()
    used_t: set[int] = set()
    pairs = []
    for dt, ri, ti in candidates:
        if ri in used_r or ti in used_t or dt > 0.5:
            continue
        used_r.add(ri)
        used_t.add(ti)
        pairs.append((records[ri], trace[ti]))
    unmatched_r = [records[i]["request_id"] for i in range(len(records)) if i not in used_r]
    unmatched_t = [(trace[i]["client_id"], trace[i]["status"]) for i in range(len(trace)) if i not in used_t]
    assert not unmatched_r, f"in the records file, never seen by the server: {unmatched_r[:10]}"
    assert not unmatched_t, f"seen by the server, missing from the records file: {unmatched_t[:10]}"
    return pairs


def test_locust_distributed_run_time_limit_loses_no_finished_request(locust_run: LocustRun) -> None:
    records = _check_ran(locust_run)
    assert {r["worker"] for r in records} == {"worker0", "worker1"}, Counter(r["worker"] for r in records)
    failed = [r for r in records if not r["success"] and not r["cut_off"]]
    assert not failed, [r["error"] for r in failed][:3]
    cut = [r for r in records if r["cut_off"]]
    assert cut, "no stream was in flight at the deadline: the test did not test the stop"
    assert any(r["success"] for r in records), "no request finished"
    assert all(not r["success"] and r["error"] for r in cut)

    # none silently missing: every request the server saw is in the file once, and nothing else is
    pairs = _pair(records, locust_run.trace)
    last_client_data = max(r["chunk_times"][-1] for r in records if r["chunk_times"])
    for rec, srv in pairs:
        if srv["status"] == "ok":
            if rec["success"]:
                # recorded as a success, with what the server sent
                assert rec["output_tokens"] == srv["completion_tokens"] == 100, rec["request_id"]
                assert len(rec["chunk_times"]) == len(srv["chunks"]), rec["request_id"]
            else:
                # only a stream whose last chunk was on the wire as the run was stopped may be cut off
                assert srv["chunks"][-1] > last_client_data - 0.2, (rec["request_id"], "finished, not recorded")
        else:
            assert srv["status"] == "client_closed" and rec["cut_off"], (rec["request_id"], srv["status"])


def test_locust_workers_send_their_own_shares_of_the_prompts(locust_run: LocustRun) -> None:
    """With 200 prompts and a few dozen requests no prompt is due twice: each worker takes its own share (as
    ``llmload bench --processes`` does), so two workers do not replay the same prompts side by side."""
    records = _check_ran(locust_run)
    by_id: dict[str, list[str]] = {}
    for r in records:
        by_id.setdefault(r["request_id"], []).append(r["worker"])
    repeated = {k: v for k, v in by_id.items() if len(v) > 1}
    assert not repeated, (
        f"{len(repeated)} of {len(by_id)} prompts were sent more than once, by: {list(repeated.items())[:4]}")


# -- locust -f --processes 2 with a worker SIGKILLed mid-run --------------------------------------------------

LOCUST_KILL_PROMPTS = 200


def _start_locust_processes(procs: Procs, tmp_path: Path, name: str, prompts: int, rate: str, output_len: str,
                            env: dict[str, str]) -> tuple[subprocess.Popen, Path, Path, Path, Path]:
    """A simulator with a trace, then ``locust -f --processes 2`` in an open loop against it: the master
    process, its stdout and stderr, the simulator's trace and the records file."""
    sim_trace = tmp_path / f"{name}.sim.jsonl"
    url = start_sim(procs, f"{name}-sim", "--ttft-ms", "20", "--itl-ms", "10", "--trace-file", str(sim_trace))
    records_path = tmp_path / f"{name}.records.jsonl"
    argv = locust_argv("-f", LOCUSTFILE, "--headless", "--host", url, "--processes", "2", "-t", "180s",
                       "--arrival", "open", "--request-rate", rate, "--num-prompts", str(prompts),
                       "--seed", "3", "--tokenizer", "builtin", "--sharegpt-output-len", output_len, "--ignore-eos",
                       "--llm-records", str(records_path))
    proc, out, err = procs.start(name, argv, env)
    return proc, out, err, sim_trace, records_path


def test_locust_processes_worker_killed_hands_its_unsent_requests_to_the_other(procs, tmp_path: Path) -> None:
    """As in llmload bench: the run completes, the loss is reported, the dead worker's unsent requests are sent
    by the other, each once, and every planned request is accounted for."""
    import psutil

    # the 10 s schedule goes to the workers in parts of 2 s: the kill hands over parts not yet sent as well
    proc, out, err, sim_trace, records_path = _start_locust_processes(
        procs, tmp_path, "lkill", LOCUST_KILL_PROMPTS, "20", "50", offline_env({"LLMLOAD_PART_S": "2"}))
    # ~10 s of schedule; kill once 40 requests have finished (a condition: a slow start-up shifts it)
    wait_for_lines(sim_trace, 40, proc, 90)
    workers = psutil.Process(proc.pid).children()
    assert len(workers) == 2, workers
    workers[-1].kill()
    t_kill = time.monotonic()
    rc = wait(proc, err, 150)
    stdout, stderr = out.read_text(errors="replace"), err.read_text(errors="replace")
    assert rc == 0, f"exit {rc}\n{stdout[-3000:]}\n{stderr[-3000:]}"

    # the loss is reported: which worker, what was in flight with it, what went to the other
    m = re.search(r"(worker\d) disappeared: (\d+) records received from it, (\d+) requests in flight with it are "
                  r"lost, (\d+) unsent requests re-assigned", stderr)
    assert m, stderr[-3000:]
    victim, victim_records, lost, handed = m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4))
    assert handed > 0, "the kill came after worker's last send?"
    assert "share goes out in" in stderr, stderr[-3000:]
    assert re.search(rf"Lost with dead workers:\s+{lost}\b", stderr), stderr[-3000:]
    assert re.search(r"Not sent \(run stopped early\):\s+0\b", stderr), stderr[-3000:]
    assert re.search(rf"Requests in the schedule:\s+{LOCUST_KILL_PROMPTS}\b", stderr), stderr[-3000:]

    # every request is accounted for: in the records file, or lost with the victim; none twice, none unsent
    records = read_jsonl(records_path)
    ids = [r["request_id"] for r in records]
    assert len(ids) == len(set(ids)), Counter(ids).most_common(3)
    assert len(records) + lost == LOCUST_KILL_PROMPTS, (len(records), lost)
    assert all(r["success"] for r in records), [r["error"] for r in records if not r["success"]][:3]
    by_worker = Counter(r["worker"] for r in records)
    survivor = next(w for w in by_worker if w != victim)
    assert by_worker[victim] <= victim_records, by_worker
    # the survivor sent its own half and the victim's unsent requests
    assert by_worker[survivor] == LOCUST_KILL_PROMPTS // 2 + handed, (by_worker, handed)
    late = [r for r in records if r["worker"] == survivor and r["start"] - r["intended_send"] > 1.0]
    assert late, "no re-assigned request was sent after the kill"

    # the server answered each request once: a request the victim had released was not sent again
    answered = Counter(t["client_id"] for t in trace_lines(sim_trace) if t["status"] == "ok"
                       and is_run_request(t["client_id"]))
    assert max(answered.values()) == 1, answered.most_common(3)
    assert set(ids) <= set(answered), set(ids) - set(answered)
    assert sum(1 for t in trace_lines(sim_trace) if t["received"] > t_kill) > 0


LOCUST_FREEZE_PROMPTS = 48


def test_locust_processes_worker_frozen_then_resumed_sends_nothing_twice(procs, tmp_path: Path) -> None:
    """A ``locust -f`` worker whose heartbeats stop (SIGSTOP here; in CI a start-up that held a starved worker's
    loop) is taken for lost and its unsent requests go to the other; when it wakes it asks the master before
    sending more, and the other sends what it was given once. Seen in CI before the fix: 60 records of 30
    requests (the survivor read the handed-over requests both from its share's list, which they had been
    appended to, and from their own loop; the frozen worker sent its given-away share as well). The share goes
    whole (a short run), not in parts, as it did there."""
    import psutil

    proc, out, err, sim_trace, records_path = _start_locust_processes(
        procs, tmp_path, "lfreeze", LOCUST_FREEZE_PROMPTS, "4", "20", offline_env())
    wait_for_lines(sim_trace, 8, proc, 90)  # ~12 s of schedule: freeze a worker ~2 s in
    workers = psutil.Process(proc.pid).children()
    assert len(workers) == 2, workers
    frozen = workers[-1]
    frozen.suspend()
    t_stop = time.monotonic()
    try:
        wait_for_text(err, r"worker\d disappeared", proc, 60)  # Locust missed its heartbeats (~3 s)
    finally:
        frozen.resume()
    rc = wait(proc, err, 150)
    stdout, stderr = out.read_text(errors="replace"), err.read_text(errors="replace")
    assert rc == 0, f"exit {rc}\n{stdout[-3000:]}\n{stderr[-3000:]}"
    assert "this worker was frozen: asking the master" in stderr, stderr[-3000:]
    assert re.search(r"worker\d is back after a freeze", stderr), stderr[-3000:]

    # each request reached the server once, but for one or two of the batch window (2 req/s a worker)
    twice = assert_sent_once_but_the_batch_window(sim_trace, LOCUST_FREEZE_PROMPTS, t_stop)
    records = read_jsonl(records_path)
    assert len(records) <= LOCUST_FREEZE_PROMPTS + len(twice), Counter(r["worker"] for r in records)


def test_a_local_worker_that_dies_at_start_up_is_a_one_line_error_at_once(procs, tmp_path: Path) -> None:
    """A ``--processes`` worker that cannot start says why, and the master stops waiting for it (it used to wait
    the whole --expect-workers-max-wait with the worker's error thrown away)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import os, sys\n"
        "if '--worker' in sys.argv:\n"
        "    sys.stderr.write('boom: this worker cannot start\\n')\n"
        "    sys.stderr.flush()\n"
        "    os._exit(7)\n")
    env = offline_env({"PYTHONPATH": os.pathsep.join(filter(None, (str(site), os.environ.get("PYTHONPATH"))))})
    started = time.monotonic()
    proc, _out, err = procs.start("dies", [*llmload_command(), "bench", "--processes", "2", "--num-prompts", "5",
                                          "--tokenizer", "builtin", "--sim-args", SIM_TIMING,
                                          "--expect-workers-max-wait", "120", "--disable-tqdm"], env)
    rc = wait(proc, err, 100)
    stderr = err.read_text(errors="replace")
    assert rc == 1, stderr[-2000:]
    assert time.monotonic() - started < 90, "the master waited for the dead worker"
    assert re.search(r"local worker process \d+ exited with code 7 before the run started: boom: this worker "
                     r"cannot start", stderr), stderr[-2000:]
    assert "Traceback" not in stderr, stderr[-3000:]


TOKEN_PROMPTS = 30


def test_locust_master_with_a_cluster_token_gives_no_share_to_a_stranger_and_ignores_it(procs, tmp_path: Path) -> None:
    """``locust -f`` has bench's cluster token: a worker that cannot prove it holds the token gets no share, is
    told to quit, and nothing it sends counts; the worker that holds it sends the whole schedule."""
    sim_trace = tmp_path / "tok.sim.jsonl"
    url = start_sim(procs, "tok-sim", "--ttft-ms", "20", "--itl-ms", "5", "--trace-file", str(sim_trace))
    token_file = tmp_path / "token"
    token_file.write_text("right-token\n")
    port = free_port()
    records_path = tmp_path / "tok.records.jsonl"
    common = ("-f", LOCUSTFILE, "--tokenizer", "builtin", "--sharegpt-output-len", "10", "--ignore-eos")
    master, _, master_err = procs.start("tok-master", locust_argv(
        *common, "--headless", "--master", "--expect-workers", "2", "--master-bind-host", "127.0.0.1",
        "--master-bind-port", str(port), "--host", url, "-t", "120s", "--arrival", "open", "--request-rate", "20",
        "--num-prompts", str(TOKEN_PROMPTS), "--seed", "5", "--cluster-token-file", str(token_file),
        "--llm-records", str(records_path)))
    friend, _, _ = procs.start("tok-friend", locust_argv(*common, "--worker", "--master-port", str(port)),
                               env=offline_env({"LLMLOAD_CLUSTER_TOKEN": "right-token"}))
    stranger, _, stranger_err = procs.start("tok-stranger", locust_argv(*common, "--worker", "--master-port",
                                                                         str(port)),
                                            env=offline_env({"LLMLOAD_CLUSTER_TOKEN": "wrong-token"}))
    rc = wait(master, master_err, 150)
    stderr = master_err.read_text(errors="replace")
    assert rc == 0, f"exit {rc}\n{stderr[-3000:]}"
    assert "failed to authenticate with the cluster token" in stderr, stderr[-3000:]
    # the stranger was told to quit: it ends by itself
    try:
        stranger.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the stranger still runs after the master told it to quit\n{tail(stranger_err)}")
    records = read_jsonl(records_path)
    assert len(records) == TOKEN_PROMPTS, len(records)
    assert len({r["worker"] for r in records}) == 1, Counter(r["worker"] for r in records)
    assert len({r["request_id"] for r in records}) == TOKEN_PROMPTS
    assert re.search(rf"Requests in the schedule:\s+{TOKEN_PROMPTS}\b", stderr), stderr[-3000:]
    assert re.search(r"Not sent \(run stopped early\):\s+0\b", stderr), stderr[-3000:]
    friend.wait(timeout=60)


# -- --processes auto ------------------------------------------------------------------------------------------

def test_processes_auto_starts_one_worker_per_usable_core_less_the_masters(procs, tmp_path: Path) -> None:
    """``--processes auto``: one worker per core of the process's CPU affinity (the child inherits the test's),
    less one for the master when there are more than two; the run is the same run."""
    from llmload.options.argtypes import auto_processes

    cores = len(os.sched_getaffinity(0))
    expected = auto_processes(cores)
    run = run_bench(procs, tmp_path, "auto", "--processes", "auto")
    assert f"Started {expected} local worker processes" in run.stderr, run.stderr[-2000:]
    assert f"--processes auto: {cores} cores this process may use" in run.stderr, run.stderr[-2000:]
    assert re.search(rf"Workers:\s+{expected}\b", run.stdout), run.stdout
    assert run.result["completed"] == PROMPTS and run.result["failed"] == 0 and run.result["not_sent"] == 0
    assert sorted(w["worker"] for w in run.result["workers"]) == [f"worker{k}" for k in range(expected)]
