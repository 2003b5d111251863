"""Does the client's memory grow with the number of requests, and by how much per request?

Starts ``llmload sim`` (default ``--profile tiny``) on 127.0.0.1, then ``llmload bench`` against it at a moderate
open-loop rate (default 20 req/s, Poisson) for ``--duration`` seconds (``--num-prompts`` = rate x duration), with
``--processes 2`` by default (``--single`` for one process). Every ``--interval`` seconds it reads VmRSS from
/proc/PID/status for the bench process (the master) and for each of its children (the workers); the simulator is
not part of the client and is not sampled. The x axis is requests completed, read from the simulator's
``GET /sim/stats`` at the same instant (received − running − waiting), minus those done before the main run.

Reported: RSS over time per process (CSV and JSON under benchmarks/results/, a PNG with ``--plot``), requests
completed, and the growth in bytes per request, a least-squares line of RSS against requests completed per process
and for the sum, fitted over the main run after a warm-up (``--warmup-fraction`` of the requests), with R² and
the slope of the second half over the first half (≈ 1: linear; < 0.5: flattens). The final metrics computation
after the last request is outside the fit; its peak is reported on its own. And the disk a run takes (issue 37): bench saves its
result into a temporary folder under ``--result-dir``; the journal's size is sampled with the RSS and fitted the
same way (bytes per request), and the records file's bytes per request and per generated token are read at the
end; the folder is removed after, unless ``--keep-run``.

Progress goes to stderr. Ctrl-C (or SIGTERM) stops bench with SIGINT, keeps sampling while it drains, writes what
was measured (marked interrupted) and stops every process it started, by PID; a second Ctrl-C kills at once.
Not a test: the numbers depend on the machine, the allocator and the Python version.

    python benchmarks/soak.py                         # 10 minutes, 20 req/s, 2 worker processes
    python benchmarks/soak.py --duration 60 --plot    # a short check
    python benchmarks/soak.py --single --rate 10 --constant-rate
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from llmload.common.errors import LLMLoadError
from llmload.processes.simproc import SimProcess

RESULTS = Path(__file__).resolve().parent / "results"
_PROGRESS = re.compile(r"^\[\s*(\d+)/(\d+)\]")
_MAIN_START = "Starting main benchmark run"
_SUMMARY_START = "Serving Benchmark Result"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- /proc -------------------------------------------------------------------------------------------------

def rss_kb(pid: int) -> int | None:
    """VmRSS of ``pid`` in kB, or None when it is gone (or a zombie, which has no VmRSS line)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks: with the PID, it names one process even after PID reuse."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def children(pid: int) -> list[int]:
    """Direct children of ``pid``, over all of its threads."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found.extend(int(x) for x in f.read().split())
        except OSError:
            pass
    return sorted(set(found))


def still_ours(pid: int, started: int | None) -> bool:
    return started is not None and start_time(pid) == started


def stop_pid(pid: int, started: int | None, first: int = signal.SIGTERM, wait_s: float = 5.0) -> None:
    """Signal one process we started (only if it is still that process), then SIGKILL it after ``wait_s``."""
    if not still_ours(pid, started):
        return
    try:
        os.kill(pid, first)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if not still_ours(pid, started) or rss_kb(pid) is None:  # gone, or a zombie waiting for its parent
            return
        time.sleep(0.1)
    if still_ours(pid, started):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def sim_completed(url: str) -> int | None:
    """Requests the simulator has finished: received − running − waiting (None if it does not answer)."""
    try:
        with urllib.request.urlopen(f"{url}/sim/stats", timeout=2) as resp:
            stats = json.loads(resp.read())
    except (OSError, ValueError):
        return None
    return int(stats["requests"]) - int(stats.get("running") or 0) - int(stats.get("waiting") or 0)


# -- the bench process -------------------------------------------------------------------------------------

class Bench:
    """``llmload bench`` in its own session (Ctrl-C reaches it only through us), its output read by threads."""

    def __init__(self, cmd: Sequence[str]) -> None:
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        self.started = start_time(self.proc.pid)
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self.main_started: float | None = None
        self.summary_at: float | None = None
        #: (monotonic time, requests done) from bench's own progress line
        self.progress: list[tuple[float, int]] = []
        self.total = 0
        self._threads = [threading.Thread(target=self._read, args=(s, out), daemon=True)
                         for s, out in ((self.proc.stdout, self.stdout), (self.proc.stderr, self.stderr))]
        for t in self._threads:
            t.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self, stream, out: list[str]) -> None:
        for line in stream:
            line = line.rstrip("\n")
            now = time.monotonic()
            for part in line.split("\r"):
                if not part:
                    continue
                out.append(part)
                match = _PROGRESS.match(part)
                if match:
                    self.progress.append((now, int(match.group(1))))
                    self.total = int(match.group(2))
                    continue
                if _MAIN_START in part and self.main_started is None:
                    self.main_started = now
                elif _SUMMARY_START in part and self.summary_at is None:
                    self.summary_at = now
                if out is self.stderr:
                    log(f"  bench: {part}")

    def interrupt(self) -> None:
        if self.proc.poll() is None and still_ours(self.pid, self.started):
            os.kill(self.pid, signal.SIGINT)

    def stop(self, wait_s: float) -> None:
        """SIGINT (bench drains and reports), then SIGTERM, then SIGKILL; always reaped."""
        if self.proc.poll() is None:
            self.interrupt()
            try:
                self.proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                stop_pid(self.pid, self.started, signal.SIGTERM, wait_s=5.0)
        self.proc.wait()
        for t in self._threads:
            t.join(timeout=2)


# -- fitting -----------------------------------------------------------------------------------------------

def fit(x: np.ndarray, y: np.ndarray) -> dict:
    """Least squares y = a + b·x: b (bytes/request), R², and the slopes of the two halves of the x range."""
    if len(x) < 4 or float(np.ptp(x)) == 0.0:
        return {"points": len(x)}
    b, a = np.polyfit(x, y, 1)
    residual = y - (a + b * x)
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum(residual ** 2)) / ss_tot if ss_tot > 0 else float("nan")
    mid = (x.min() + x.max()) / 2
    halves = []
    for sel in (x <= mid, x >= mid):
        halves.append(float(np.polyfit(x[sel], y[sel], 1)[0]) if sel.sum() >= 3 and np.ptp(x[sel]) > 0 else None)
    first, second = halves
    ratio = second / first if first and second is not None and abs(first) > 1e-9 else None
    return {
        "points": len(x),
        "bytes_per_request": round(float(b), 1),
        "intercept_mb": round(float(a) / 1e6, 2),
        "r2": round(r2, 4),
        "first_half_bytes_per_request": None if first is None else round(first, 1),
        "second_half_bytes_per_request": None if second is None else round(second, 1),
        "second_over_first": None if ratio is None else round(ratio, 2),
        "shape": shape(float(b), r2, ratio, float(np.ptp(y))),
    }


def shape(slope: float, r2: float, ratio: float | None, span_bytes: float) -> str:
    if span_bytes < 512 << 10 or abs(slope) < 100:
        return "flat (no growth to speak of)"
    if ratio is None:
        return "unknown"
    if ratio < 0.5:
        return "flattens"
    if ratio > 2.0:
        return "accelerates"
    return "linear" if r2 >= 0.9 else "linear but noisy"


# -- the run -----------------------------------------------------------------------------------------------

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of load (default 600)")
    parser.add_argument("--rate", type=float, default=20.0, help="requests/s (default 20)")
    parser.add_argument("--constant-rate", action="store_true", help="evenly spaced instead of Poisson")
    parser.add_argument("--processes", type=int, default=2, help="local worker processes; 0 = one process")
    parser.add_argument("--single", dest="processes", action="store_const", const=0, help="same as --processes 0")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between RSS samples (default 2)")
    parser.add_argument("--report-every", type=float, default=15.0, help="seconds between progress lines")
    parser.add_argument("--warmup-fraction", type=float, default=0.1,
                        help="leave the first part of the requests out of the fit (default 0.1)")
    parser.add_argument("--sim-args", default="--profile tiny", help='llmload sim flags (default "--profile tiny")')
    parser.add_argument("--bench-args", default="", help="extra llmload bench flags, e.g. \"--max-concurrency 64\"")
    parser.add_argument("--name", default=None, help="output file stem (default soak-<date>-<p>)")
    parser.add_argument("--result-dir", type=Path, default=RESULTS)
    parser.add_argument("--plot", action="store_true", help="also write a PNG (needs matplotlib)")
    parser.add_argument("--keep-run", action="store_true",
                        help="keep bench's own result, records file and journal (default: measured, then removed)")
    args = parser.parse_args()
    if args.duration <= 0 or args.rate <= 0 or args.interval <= 0 or args.processes < 0:
        parser.error("--duration, --rate and --interval must be > 0, --processes >= 0")
    if not 0 <= args.warmup_fraction < 1:
        parser.error("--warmup-fraction must be in [0, 1)")
    num_prompts = max(1, round(args.rate * args.duration))
    stem = args.name or f"soak-{time.strftime('%Y%m%d-%H%M%S')}-{'p' + str(args.processes) if args.processes else 'single'}"
    args.result_dir.mkdir(parents=True, exist_ok=True)
    probe = args.result_dir / f".{stem}.probe"
    probe.write_text("")  # unwritable result dir: fail now, not after the run
    probe.unlink()

    stopping = {"count": 0}
    bench: Bench | None = None

    def on_signal(signum: int, _frame: object) -> None:
        stopping["count"] += 1
        if bench is None:
            raise KeyboardInterrupt
        if stopping["count"] == 1:
            log(f"\nsoak: {signal.Signals(signum).name}: stopping bench (SIGINT), sampling while it drains; "
                "again to kill")
            bench.interrupt()
        else:
            log("soak: second signal: killing")
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    rows: list[dict] = []
    #: bench's result, records file and journal: their sizes are the disk a run takes
    run_dir = Path(tempfile.mkdtemp(prefix=f"{stem}-run-", dir=args.result_dir))
    workers: dict[int, int | None] = {}  # pid -> start time
    sim: SimProcess | None = None
    t0 = time.monotonic()
    interrupted = False
    try:
        log(f"soak: starting llmload sim {args.sim_args}")
        try:
            sim = SimProcess(shlex.split(args.sim_args))
        except LLMLoadError as exc:
            log(f"soak: {exc}")
            return 1
        log(f"soak: simulator at {sim.url} (pid {sim.pid}, not sampled)")
        cmd = [sys.executable, "-m", "llmload.cli", "bench", "--base-url", sim.url, "--tokenizer", "builtin",
               "--num-prompts", str(num_prompts), "--request-rate", f"{args.rate:g}"]
        if args.constant_rate:
            cmd.append("--constant-rate")
        if args.processes:
            cmd += ["--processes", str(args.processes)]
        cmd += ["--save-result", "--result-dir", str(run_dir), "--result-filename", "run.json"]
        cmd += shlex.split(args.bench_args)
        log(f"soak: {num_prompts} requests at {args.rate:g} req/s (~{args.duration:g} s): {shlex.join(cmd[1:])}")
        t0 = time.monotonic()
        bench = Bench(cmd)
        log(f"soak: bench pid {bench.pid}; sampling VmRSS every {args.interval:g} s")
        base_done: int | None = None
        first_rss: dict[int, int] = {}
        next_report = t0 + args.report_every
        next_sample = t0
        while True:
            now = time.monotonic()
            alive = bench.proc.poll() is None
            pids = [bench.pid, *children(bench.pid)] if alive else []
            for pid in pids[1:]:
                if pid not in workers:
                    workers[pid] = start_time(pid)
                    log(f"soak: worker pid {pid}")
            done = sim_completed(sim.url)
            if bench.main_started is not None and base_done is None and done is not None:
                base_done = done
            phase = ("startup" if bench.main_started is None else
                     "report" if bench.summary_at is not None or (bench.total and bench.progress
                                                                   and bench.progress[-1][1] >= bench.total)
                     else "run")
            journal_bytes = sum(p.stat().st_size for p in run_dir.glob("*.journal.jsonl"))
            for pid in pids:
                kb = rss_kb(pid)
                if kb is None:
                    continue
                if phase == "run":
                    first_rss.setdefault(pid, kb)
                rows.append({
                    "t_s": round(now - t0, 2), "phase": phase,
                    "completed": None if done is None or base_done is None else done - base_done,
                    "client_done": bench.progress[-1][1] if bench.progress else 0,
                    "role": "master" if pid == bench.pid else "worker",
                    "pid": pid, "rss_kb": kb, "journal_bytes": journal_bytes,
                })
            if now >= next_report and pids:
                parts = []
                for p in pids:
                    kb = rss_kb(p) or 0
                    grown = f" ({kb - first_rss[p]:+,} since run start)" if p in first_rss else ""
                    parts.append(f"{'master' if p == bench.pid else 'worker'} {p} {kb:,} kB{grown}")
                shown = "-" if done is None or base_done is None else f"{done - base_done}/{num_prompts}"
                log(f"soak: {now - t0:6.0f} s  {phase:<7} done {shown}  " + "  ".join(parts))
                next_report += args.report_every
            if not alive:
                break
            next_sample += args.interval
            time.sleep(max(0.0, next_sample - time.monotonic()))
    except KeyboardInterrupt:
        interrupted = True
    finally:
        interrupted = interrupted or stopping["count"] > 0
        if bench is not None:
            # the first Ctrl-C already sent SIGINT; a second one (KeyboardInterrupt) leaves no time to drain
            bench.stop(wait_s=1.0 if stopping["count"] > 1 else 30.0)
            for pid, started in workers.items():
                stop_pid(pid, started)  # workers that outlived their master
        if sim is not None:
            sim.stop()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    if bench is None:
        return 130
    try:
        return write_results(args, stem, rows, bench, num_prompts, interrupted, cmd, run_dir)
    finally:
        if not args.keep_run:
            shutil.rmtree(run_dir, ignore_errors=True)


def disk_used(rows: list[dict], run_dir: Path, summary: dict, requests: int, cutoff: float) -> dict:
    """The journal's growth per request completed (a fit over the run, as for RSS), and the records file's bytes
    per request and per generated token."""
    pts = sorted({(r["completed"], r["journal_bytes"]) for r in rows
                  if r["phase"] == "run" and r["completed"] is not None and r["completed"] >= cutoff})
    x, y = (np.array(v, dtype=float) for v in zip(*pts, strict=True)) if pts else (np.array([]), np.array([]))
    records = run_dir / "run.records.jsonl"
    size = records.stat().st_size if records.exists() else None
    tokens = summary.get("generated_tokens") or 0
    return {"journal_fit": fit(x, y), "records_file_bytes": size,
            "records_file_bytes_per_request": size / requests if size and requests else None,
            "records_file_bytes_per_token": size / tokens if size and tokens else None,
            "generated_tokens": tokens or None}


def write_results(args: argparse.Namespace, stem: str, rows: list[dict], bench: Bench, num_prompts: int,
                  interrupted: bool, cmd: list[str], run_dir: Path) -> int:
    out_csv = args.result_dir / f"{stem}.csv"
    with open(out_csv, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["t_s", "phase", "completed", "client_done", "role", "pid", "rss_kb",
                                               "journal_bytes"])
        writer.writeheader()
        writer.writerows(rows)

    summary = parse_summary(bench.stdout)
    completed_total = summary.get("successful", 0) + summary.get("failed", 0)
    master_pid = bench.pid
    pids = sorted({r["pid"] for r in rows}, key=lambda p: (p != master_pid, p))
    names = {p: "master" if p == master_pid else f"worker_pid{p}" for p in pids}
    run_rows = [r for r in rows if r["phase"] == "run" and r["completed"] is not None]
    max_done = max((r["completed"] for r in run_rows), default=0)
    cutoff = args.warmup_fraction * max_done
    fitted = [r for r in run_rows if r["completed"] >= cutoff]

    fits: dict[str, dict] = {}
    by_time: dict[float, dict[int, int]] = {}
    for r in fitted:
        by_time.setdefault(r["t_s"], {})[r["pid"]] = r["rss_kb"]
    done_at = {r["t_s"]: r["completed"] for r in fitted}
    for pid in pids:
        pts = [(r["completed"], r["rss_kb"] * 1024) for r in fitted if r["pid"] == pid]
        x, y = (np.array(v, dtype=float) for v in zip(*pts, strict=True)) if pts else (np.array([]), np.array([]))
        fits[names[pid]] = fit(x, y)
    # the sum only at instants where every process of the run was sampled
    full = [t for t, per in by_time.items() if len(per) == len(pids)]
    xs = np.array([done_at[t] for t in full], dtype=float)
    ys = np.array([sum(by_time[t].values()) * 1024 for t in full], dtype=float)
    fits["total"] = fit(xs, ys)

    processes = {}
    for pid in pids:
        series = [r for r in rows if r["pid"] == pid]
        run = [r["rss_kb"] for r in series if r["phase"] == "run"]
        processes[names[pid]] = {
            "pid": pid, "role": "master" if pid == master_pid else "worker",
            "rss_kb_first": series[0]["rss_kb"], "rss_kb_run_start": run[0] if run else None,
            "rss_kb_run_end": run[-1] if run else None, "rss_kb_peak": max(r["rss_kb"] for r in series),
            "rss_kb_peak_report": max((r["rss_kb"] for r in series if r["phase"] == "report"), default=None),
        }
    result = {
        "config": {"duration_s": args.duration, "rate": args.rate, "constant_rate": args.constant_rate,
                   "processes": args.processes, "num_prompts": num_prompts, "interval_s": args.interval,
                   "warmup_fraction": args.warmup_fraction, "sim_args": args.sim_args, "bench_cmd": cmd[1:],
                   "python": sys.version.split()[0]},
        "interrupted": interrupted,
        "bench_exit_code": bench.proc.returncode,
        "requests_completed": completed_total or max_done,
        "bench_summary": summary,
        "processes": processes,
        "fit": fits,
        "fit_note": "RSS (bytes) against requests completed by the whole client, over the main run after the "
                    "warm-up; for a worker, bytes per request it measured itself is about bytes_per_request x "
                    "processes",
        "disk": disk_used(rows, run_dir, summary, completed_total or max_done, cutoff),
        "samples_csv": out_csv.name,
        "bench_stdout": bench.stdout,
    }
    out_json = args.result_dir / f"{stem}.json"
    out_json.write_text(json.dumps(result, indent=1) + "\n")
    if args.plot:
        plot(args.result_dir / f"{stem}.png", rows, names, fits)

    print(f"soak: {result['requests_completed']} requests completed, bench exit {bench.proc.returncode}"
          + (", INTERRUPTED" if interrupted else ""))
    print(f"{'process':<18} {'start MiB':>9} {'end MiB':>8} {'peak MiB':>8} {'B/request':>10} {'R²':>6} "
          f"{'2nd/1st':>7}  shape")
    for name, f in fits.items():
        p = processes.get(name)
        start = f"{p['rss_kb_run_start'] / 1024:9.1f}" if p and p["rss_kb_run_start"] else f"{'':>9}"
        end = f"{p['rss_kb_run_end'] / 1024:8.1f}" if p and p["rss_kb_run_end"] else f"{'':>8}"
        peak = f"{p['rss_kb_peak'] / 1024:8.1f}" if p else f"{'':>8}"
        if "bytes_per_request" in f:
            ratio = f["second_over_first"]
            print(f"{name:<18} {start} {end} {peak} {f['bytes_per_request']:10.0f} {f['r2']:6.3f} "
                  f"{ratio if ratio is not None else '-':>7}  {f['shape']}")
        else:
            print(f"{name:<18} {start} {end} {peak}  (too few samples to fit: {f['points']})")
    disk = result["disk"]
    journal = disk["journal_fit"].get("bytes_per_request")
    print("disk: journal " + (f"{journal:,.0f} B/request" if journal is not None else "(too few samples)")
          + (f", records file {disk['records_file_bytes_per_request']:,.0f} B/request" if
             disk["records_file_bytes_per_request"] else "")
          + (f" ({disk['records_file_bytes_per_token']:,.1f} B/token)" if disk["records_file_bytes_per_token"] else ""))
    print(f"wrote {out_csv}, {out_json}" + (f", {out_json.with_suffix('.png')}" if args.plot else ""))
    return 130 if interrupted else (0 if bench.proc.returncode == 0 else 1)


def parse_summary(lines: list[str]) -> dict:
    keys = {"Successful requests": "successful", "Failed requests": "failed", "Cut off by end of run": "cut_off",
            "Benchmark duration (s)": "duration_s", "Request throughput (req/s)": "req_per_s",
            "Lost with dead workers": "lost", "Total generated tokens": "generated_tokens"}
    out: dict = {}
    for line in lines:
        name, _, value = line.partition(":")
        name, value = name.strip(), value.strip()
        try:
            number = float(value)
        except ValueError:
            continue
        if name in keys:
            out[keys[name]] = int(number) if number.is_integer() else number
        elif re.fullmatch(r"worker\d+ records \(ok\)", name):
            out.setdefault("worker_records", {})[name.split()[0]] = int(number)
    return out


def plot(path: Path, rows: list[dict], names: dict[int, str], fits: dict[str, dict]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("soak: matplotlib is not installed: no PNG")
        return
    fig, (ax_t, ax_n) = plt.subplots(1, 2, figsize=(12, 4.5))
    for pid, name in names.items():
        series = [r for r in rows if r["pid"] == pid]
        ax_t.plot([r["t_s"] for r in series], [r["rss_kb"] / 1024 for r in series], label=name)
        run = [r for r in series if r["phase"] == "run" and r["completed"] is not None]
        f = fits.get(name, {})
        label = f"{name}: {f['bytes_per_request']:.0f} B/req" if "bytes_per_request" in f else name
        ax_n.plot([r["completed"] for r in run], [r["rss_kb"] / 1024 for r in run], ".", ms=3, label=label)
    ax_t.set(xlabel="time (s)", ylabel="VmRSS (MiB)", title="RSS over time")
    ax_n.set(xlabel="requests completed", ylabel="VmRSS (MiB)", title="RSS against requests (main run)")
    for ax in (ax_t, ax_n):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
