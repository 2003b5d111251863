"""How long from the command to the first request, and where the time goes.

Each way in is launched as a user would launch it; the first request's arrival is read from the simulator's
trace (``received``: CLOCK_MONOTONIC, the clock ``time.monotonic()`` reads here), so the number is what a user
waits before anything is measured. Each run's stderr lines are stamped as they arrive, which shows the steps
(simulator start, tokenizer and dataset, workers connecting, the initial test).

    python benchmarks/startup.py --repeat 3

Not a test: timing depends on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
INITIAL_TEST_ID = "llmload-initial-test"  # llmload.core.schedule.INITIAL_TEST_ID
#: the workload: small, so that what is measured is start-up, not the run
WORKLOAD = ["--num-prompts", "20", "--sharegpt-output-len", "4", "--tokenizer", "builtin"]


def stamped_run(argv: list[str], env: dict[str, str], timeout: float = 300.0) -> tuple[float, list[tuple[float, str]]]:
    """Run ``argv``; returns its launch time (monotonic) and its stderr lines with the monotonic time each came."""
    lines: list[tuple[float, str]] = []
    launched = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append((time.monotonic(), line.rstrip()))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    proc.wait(timeout=timeout)
    reader.join(timeout=5)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}:\n" + "\n".join(x for _, x in lines[-20:]))
    return launched, lines


def first_received(trace: Path) -> tuple[float, float | None]:
    """When the server got the first request, and the first request of the run itself (not the initial test)."""
    rows = [json.loads(x) for x in trace.read_text().splitlines() if x.strip()]
    run = [r["received"] for r in rows if r.get("client_id") != INITIAL_TEST_ID]
    return min(r["received"] for r in rows), (min(run) if run else None)


def start_sim(trace: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "llmload.cli", "sim", "--host", "127.0.0.1", "--port", "0",
                             "--ttft-ms", "5", "--itl-ms", "2", "--trace-file", str(trace)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO)
    assert proc.stdout is not None
    m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", proc.stdout.readline())
    if not m:
        proc.kill()
        raise SystemExit("the simulator did not start")
    return proc, m.group(1)


def ways(tmp: Path) -> dict[str, tuple[list[str], Path, bool]]:
    """name -> (argv, the simulator trace it writes, whether it starts its own simulator)."""
    llmload = [sys.executable, "-m", "llmload.cli"]
    out: dict[str, tuple[list[str], Path, bool]] = {}
    for name, extra in (("bench (built-in sim)", []), ("bench --processes 2 (built-in sim)", ["--processes", "2"])):
        trace = tmp / f"{len(out)}.jsonl"
        out[name] = ([*llmload, "bench", *WORKLOAD, *extra, "--disable-tqdm", "--request-rate", "100",
                      "--sim-args", f"--ttft-ms 5 --itl-ms 2 --trace-file {trace}"], trace, True)
    trace = tmp / "sweep.jsonl"
    out["sweep, first point (built-in sim)"] = (
        [*llmload, "sweep", "-o", str(tmp / "sweep"), "--request-rates", "100", "--no-figures", *WORKLOAD,
         "--disable-tqdm", "--sim-args", f"--ttft-ms 5 --itl-ms 2 --trace-file {trace}"], trace, True)
    for name, extra in (("locust -f --headless", []), ("locust -f --headless --processes 2", ["--processes", "2"])):
        trace = tmp / f"{len(out)}.jsonl"
        out[name] = ([sys.executable, "-m", "locust", "-f", "locustfiles/sharegpt.py", "--headless", "--arrival",
                      "open", "--request-rate", "100", *WORKLOAD, *extra], trace, False)
    return out


def measure(name: str, argv: list[str], trace: Path, own_sim: bool,
            env: dict[str, str]) -> tuple[float, float, list]:
    sim = None
    if not own_sim:
        sim, url = start_sim(trace)
        argv = [*argv, "--host", url]
        if "--processes" in argv:
            from socket import socket

            with socket() as s:
                s.bind(("127.0.0.1", 0))
                port = str(s.getsockname()[1])
            argv += ["--master-bind-port", port, "--master-port", port]
    try:
        launched, lines = stamped_run(argv, env)
    finally:
        if sim is not None:
            sim.terminate()
            sim.wait(timeout=15)
    first, first_run = first_received(trace)
    return first - launched, (first_run or first) - launched, [(t - launched, line) for t, line in lines]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each way in (default: %(default)s)")
    parser.add_argument("--steps", action="store_true", help="print each run's stamped stderr lines")
    args = parser.parse_args()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("LLMLOAD_CLUSTER_TOKEN", None)
    print(f"{'way in':<40} {'first request (s)':>18} {'first run request (s)':>22}  (medians; runs)")
    with tempfile.TemporaryDirectory(prefix="llmload-startup-") as tmp_dir:
        tmp = Path(tmp_dir)
        for name, (argv, trace, own_sim) in ways(tmp).items():
            times, run_times = [], []
            for k in range(args.repeat):
                for path in (trace, tmp / "sweep"):
                    if path.is_file():
                        path.unlink()
                seconds, run_seconds, lines = measure(name, argv, trace, own_sim, env)
                times.append(seconds)
                run_times.append(run_seconds)
                if args.steps and k == 0:
                    print(f"  -- {name}")
                    for t, line in lines[:25]:
                        print(f"  {t:7.3f} s  {line[:110]}")
            shown = " ".join(f"{t:.2f}/{r:.2f}" for t, r in zip(times, run_times, strict=True))
            print(f"{name:<40} {statistics.median(times):>18.2f} {statistics.median(run_times):>22.2f}  {shown}",
                  flush=True)


if __name__ == "__main__":
    main()
