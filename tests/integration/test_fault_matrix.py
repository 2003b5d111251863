"""The fault matrix: real ``llmload bench`` runs against ``llmload sim`` injecting each fault at 5 %, 30 % and 100 %.

For every cell: the run finishes; every request is accounted for by kind, in the result JSON and in the records
(sent = completed + failed + cut off), and each request the simulator's trace says got the fault has the
fault's failure kind while every other one completed; failures stay out of the latency statistics; the exit
code follows the contract (0 when some requests completed, 1 when every request failed or the initial test
did). The three rates of one fault run at once (separate simulators and bench processes) to keep the file fast.

``pytest -s`` prints the matrix as the markdown table of docs/reliability.md; with ``LLMLOAD_FAULT_MATRIX=F``
it is also written to F.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import end_process, free_port, llmload_command, match_trace, offline_env

from llmload.client.failures import KINDS

RATES = (0.05, 0.3, 1.0)
PROMPTS = 40
OUT_LEN = 8
MODEL = "matrix-model"
TIMING = ("--ttft-ms", "5", "--itl-ms", "2", "--model", MODEL)
BENCH_TIMEOUT_S = 120.0
#: the stall outlasts the read timeout by seconds, so only stalled requests can time out
READ_TIMEOUT_S = 2
REQUEST_TIMEOUT_S = 3
STALL_S = 6
SLOW_HEADERS_S = 1


@dataclass(frozen=True)
class Fault:
    name: str
    #: simulator flags; "{rate}" is replaced by the cell's rate
    sim: tuple[str, ...]
    #: the failure kind a faulted request must get; None: faulted requests still complete
    kind: str | None
    #: the fault's name in the simulator's trace
    trace_fault: str
    bench: tuple[str, ...] = ()


FAULTS = (
    Fault("HTTP 500/503", ("--error-rate", "{rate}", "--error-codes", "500,503"), "http_5xx", "error"),
    Fault("HTTP 429 + Retry-After", ("--error-rate", "{rate}", "--error-codes", "429"), "http_429", "error"),
    Fault("422 unknown field", ("--error-rate", "{rate}", "--error-codes", "422"), "http_4xx", "error"),
    Fault("disconnect mid-stream", ("--disconnect-rate", "{rate}"), "disconnect", "disconnect"),
    Fault(f"stall {STALL_S} s past --read-timeout {READ_TIMEOUT_S}",
          ("--stall-rate", "{rate}", "--stall-s", str(STALL_S)), "read_timeout", "stall",
          bench=("--read-timeout", str(READ_TIMEOUT_S))),
    Fault(f"stall {STALL_S} s past --request-timeout {REQUEST_TIMEOUT_S}",
          ("--stall-rate", "{rate}", "--stall-s", str(STALL_S)), "request_timeout", "stall",
          bench=("--request-timeout", str(REQUEST_TIMEOUT_S))),
    Fault("malformed event", ("--malformed-rate", "{rate}"), "malformed_event", "malformed"),
    # --backend openai, as against transformers serve: --backend vllm sends ignore_eos with the random dataset
    # (today's vllm bench serve), which transformers serve refuses (422)
    Fault("error event in a 200 stream (transformers)", ("--dialect", "transformers", "--error-rate", "{rate}"),
          "error_event", "error", ("--backend", "openai")),
    Fault(f"slow headers ({SLOW_HEADERS_S} s)", ("--slow-headers-rate", "{rate}", "--slow-headers-s",
                                                str(SLOW_HEADERS_S)), None, "slow_headers"),
    Fault("200 JSON answer to a streaming request", ("--not-streamed-rate", "{rate}"), "not_streamed",
          "not_streamed"),
)


def _params() -> list:
    return [pytest.param(fault, id=fault.name.split(" (")[0].replace(" ", "-")) for fault in FAULTS]


#: (fault name, rate) -> outcome, for the table printed at the end
MATRIX: dict[tuple[str, float], str] = {}
#: cells outside the matrix: name -> outcome
OTHER: dict[str, str] = {}


@pytest.fixture(scope="module", autouse=True)
def matrix_table():
    yield
    if not MATRIX:
        return
    head = "| fault | " + " | ".join(f"{r:.0%}" for r in RATES) + " |"
    lines = [head, "|---" * (len(RATES) + 1) + "|"]
    for fault in FAULTS:
        cells = [MATRIX.get((fault.name, r), "skipped") for r in RATES]
        lines.append(f"| {fault.name} | " + " | ".join(cells) + " |")
    for name, outcome in OTHER.items():
        lines.append(f"| {name} | | | {outcome} |")
    table = "\n".join(lines)
    print("\n\nFault matrix (" + f"{PROMPTS} requests per cell)\n" + table)
    if os.environ.get("LLMLOAD_FAULT_MATRIX"):
        Path(os.environ["LLMLOAD_FAULT_MATRIX"]).write_text(table + "\n")


@dataclass
class Cell:
    rate: float
    trace_path: Path
    result_dir: Path
    argv: list[str]
    proc: subprocess.Popen | None = None
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""

    def describe(self) -> str:
        return (f"$ {' '.join(self.argv)}\nexit code {self.returncode}\n--- stdout ---\n{self.stdout[-4000:]}\n"
                f"--- stderr ---\n{self.stderr[-4000:]}")


def _read_trace(path: Path, want: int, timeout: float = 15.0) -> list[dict]:
    """The simulator's trace once it has ``want`` lines (a request the client dropped is written when the
    simulator sees the connection close, which can be just after bench exits)."""
    deadline = time.monotonic() + timeout
    while True:
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
        if len(lines) >= want or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


def _run_cells(cells: list[Cell], tmp_path: Path) -> None:
    """Start every cell's bench at once and wait for all; each child is ended by its PID whatever happens."""
    env = offline_env()
    try:
        for i, cell in enumerate(cells):
            out = open(tmp_path / f"bench-{i}.out", "w+")  # noqa: SIM115 - closed below
            err = open(tmp_path / f"bench-{i}.err", "w+")  # noqa: SIM115
            cell.proc = subprocess.Popen(cell.argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env,
                                         text=True, start_new_session=True)
            cell.proc.out, cell.proc.err = out, err  # type: ignore[attr-defined]
        deadline = time.monotonic() + BENCH_TIMEOUT_S
        for cell in cells:
            assert cell.proc is not None
            try:
                cell.returncode = cell.proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                cell.returncode = None
    finally:
        for cell in cells:
            if cell.proc is None:
                continue
            end_process(cell.proc)
            for name in ("out", "err"):
                f = getattr(cell.proc, name)
                f.seek(0)
                setattr(cell, "stdout" if name == "out" else "stderr", f.read())
                f.close()


@pytest.mark.parametrize("fault", _params())
@pytest.mark.slow
def test_fault_matrix_row(fault: Fault, start_sim, tmp_path: Path) -> None:
    cells = []
    for rate in RATES:
        sim_flags = [f.replace("{rate}", str(rate)) for f in fault.sim]
        trace = tmp_path / f"trace-{rate}.jsonl"
        sim = start_sim(*TIMING, *sim_flags, "--seed", "1", "--trace-file", str(trace))
        result_dir = tmp_path / f"result-{rate}"
        # --no-initial-test: the simulator's seeded draw would fault bench's test request as well
        argv = [*_bench_argv(sim.url, result_dir), "--no-initial-test", *fault.bench]
        cells.append(Cell(rate, trace, result_dir, argv))
    _run_cells(cells, tmp_path)
    for cell in cells:
        MATRIX[(fault.name, cell.rate)] = _check_cell(fault, cell)


def _bench_argv(url: str, result_dir: Path) -> list[str]:
    return [*llmload_command(), "bench", "--base-url", url, "--model", MODEL, "--tokenizer", "builtin",
            "--dataset-name", "random", "--random-input-len", "32", "--random-output-len", str(OUT_LEN),
            "--num-prompts", str(PROMPTS), "--request-rate", "inf", "--seed", "1", "--disable-tqdm",
            "--save-result", "--result-dir", str(result_dir), "--result-filename", "run.json"]


def _check_cell(fault: Fault, cell: Cell) -> str:
    """Assert the cell's contract; returns its outcome for the table."""
    assert cell.returncode is not None, f"did not finish within {BENCH_TIMEOUT_S} s\n{cell.describe()}"
    assert "Traceback" not in cell.stderr and "Traceback" not in cell.stdout, cell.describe()
    result = json.loads((cell.result_dir / "run.json").read_text())
    records = [json.loads(line) for line in (cell.result_dir / "run.records.jsonl").read_text().splitlines()]
    trace = _read_trace(cell.trace_path, PROMPTS)

    # every request sent is accounted for, once
    assert len(records) == PROMPTS, cell.describe()
    completed = sum(r["success"] and not r["cut_off"] for r in records)
    failed = sum(not r["success"] and not r["cut_off"] for r in records)
    cut = sum(r["cut_off"] for r in records)
    assert (result["completed"], result["failed"], result["cut_off"]) == (completed, failed, cut)
    assert result["sent"] == completed + failed + cut == PROMPTS
    assert cut == 0
    for r in records:
        assert (r["failure_kind"] == "") == r["success"], r
        assert r["failure_kind"] in ("", *KINDS), r
        if not r["success"]:
            assert r["error"] and "\n" not in r["error"], r
    by_kind: dict[str, int] = {}
    for r in records:
        if r["failure_kind"]:
            by_kind[r["failure_kind"]] = by_kind.get(r["failure_kind"], 0) + 1
    assert result["failures_by_kind"] == by_kind
    assert sum(by_kind.values()) == failed + cut

    # the server's ground truth: exactly the requests it faulted have the fault's kind, all others completed
    pairs = match_trace(records, trace)
    faulted = 0
    for rec, srv in pairs:
        if srv["fault"] == fault.trace_fault:
            faulted += 1
            if fault.kind is None:
                assert rec["success"], (rec, srv)
            else:
                assert rec["failure_kind"] == fault.kind, (rec, srv)
        else:
            assert srv["fault"] is None and rec["success"], (rec, srv)
    if fault.kind is not None:
        assert by_kind == ({fault.kind: faulted} if faulted else {}), (by_kind, faulted)
    if cell.rate >= 1.0:
        assert faulted == PROMPTS
    else:
        assert faulted < PROMPTS, "the seed faulted every request"

    # failures are left out of every latency statistic (and of the token totals)
    good = [r for r in records if r["success"]]
    ttfts = [(r["first_token"] - r["start"]) * 1000 for r in good]
    itls = [(b - a) * 1000 for r in good for a, b in zip(r["chunk_times"], r["chunk_times"][1:], strict=False)]
    assert result["mean_ttft_ms"] == pytest.approx(sum(ttfts) / len(ttfts) if ttfts else 0.0, rel=1e-9, abs=1e-9)
    assert result["mean_itl_ms"] == pytest.approx(sum(itls) / len(itls) if itls else 0.0, rel=1e-9, abs=1e-9)
    assert result["total_output_tokens"] == sum(r["output_tokens"] for r in good) == completed * OUT_LEN
    if fault.kind is None and faulted:
        # slowed headers are part of a completed request's TTFT
        slowed = [rec for rec, srv in pairs if srv["fault"] == fault.trace_fault]
        assert all(rec["first_token"] - rec["start"] >= SLOW_HEADERS_S for rec in slowed)

    # the summary on stdout has the same counts, one line per kind
    for kind, n in by_kind.items():
        assert any(line.startswith(f"{kind}:") and line.split()[1] == str(n) for line in cell.stdout.splitlines()), \
            cell.describe()
    assert ("Failures by kind" in cell.stdout) == bool(by_kind), cell.describe()

    # the exit code contract
    assert cell.returncode == (0 if completed else 1), cell.describe()
    kinds = ", ".join(f"{k} {n}" for k, n in by_kind.items()) or "no failure"
    return f"{kinds}; completed {completed}; exit {cell.returncode}"


@pytest.mark.slow
def test_initial_test_that_fails_exits_1(start_sim, child_runner, tmp_path: Path) -> None:
    """Without --no-initial-test a faulted first request stops bench before the run, with one line and exit 1."""
    sim = start_sim(*TIMING, "--error-rate", "1.0", "--error-codes", "503")
    run = child_runner.bench(*_bench_argv(sim.url, tmp_path / "result")[len(llmload_command()) + 1 :])
    assert run.returncode == 1, run.describe()
    assert "Traceback" not in run.stderr and "initial test request" in run.stderr, run.describe()
    assert "HTTP 503" in run.stderr, run.describe()
    assert not (tmp_path / "result" / "run.json").exists()


def _sim_requests(url: str) -> int:
    with urllib.request.urlopen(f"{url}/sim/stats", timeout=5) as resp:
        return int(json.loads(resp.read())["requests"])


@pytest.mark.slow
def test_cut_off_in_flight_and_waiting_are_counted(start_sim, tmp_path: Path) -> None:
    """SIGINT while requests are stalled in flight and others wait for a --max-concurrency slot: every one is
    cut off, counted as ``cut_off`` (in the JSON, the records and the summary), and the run exits 130."""
    concurrency = 10
    sim = start_sim(*TIMING, "--stall-rate", "1.0", "--stall-s", "60")
    result_dir = tmp_path / "result"
    argv = [*_bench_argv(sim.url, result_dir), "--no-initial-test", "--max-concurrency", str(concurrency),
            "--stop-timeout", "0"]
    cell = Cell(1.0, tmp_path / "none", result_dir, argv)
    with open(tmp_path / "out", "w+") as out, open(tmp_path / "err", "w+") as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=offline_env(),
                                text=True, start_new_session=True)
        try:
            deadline = time.monotonic() + 60
            while _sim_requests(sim.url) < concurrency:  # every slot holds a stalled stream
                assert proc.poll() is None and time.monotonic() < deadline, "bench never filled its slots"
                time.sleep(0.05)
            os.kill(proc.pid, signal.SIGINT)
            cell.returncode = proc.wait(timeout=60)
        finally:
            end_process(proc)
            out.seek(0)
            err.seek(0)
            cell.stdout, cell.stderr = out.read(), err.read()
    assert "Traceback" not in cell.stderr, cell.describe()
    assert cell.returncode == 130, cell.describe()
    result = json.loads((result_dir / "run.json").read_text())
    records = [json.loads(line) for line in (result_dir / "run.records.jsonl").read_text().splitlines()]
    assert len(records) == PROMPTS and all(r["cut_off"] and r["failure_kind"] == "cut_off" for r in records)
    assert result["sent"] == result["cut_off"] == PROMPTS and result["completed"] == result["failed"] == 0
    assert result["failures_by_kind"] == {"cut_off": PROMPTS}
    in_flight = [r for r in records if "in flight" in r["error"]]
    waiting = [r for r in records if "before this request was sent" in r["error"]]
    assert (len(in_flight), len(waiting)) == (concurrency, PROMPTS - concurrency), [r["error"] for r in records]
    assert any(line.startswith("cut_off:") and line.split()[1] == str(PROMPTS) for line in cell.stdout.splitlines())


def test_no_server_every_request_fails_to_connect(child_runner, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    run = child_runner.bench(*_bench_argv(url, tmp_path / "result")[len(llmload_command()) + 1 :],
                             "--no-initial-test")
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.describe()
    result = json.loads((tmp_path / "result" / "run.json").read_text())
    records = [json.loads(line) for line in (tmp_path / "result" / "run.records.jsonl").read_text().splitlines()]
    assert result["sent"] == result["failed"] == len(records) == PROMPTS
    assert result["failures_by_kind"] == {"connect": PROMPTS}
    assert all(r["failure_kind"] == "connect" and url.rsplit(":", 1)[1] in r["error"] for r in records)
    OTHER["no server listening (--no-initial-test)"] = f"connect {PROMPTS}; completed 0; exit {run.returncode}"
