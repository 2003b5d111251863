"""How accurately does one llmload worker process measure TTFT and ITL, and up to what load?

Pins ``llmload sim`` (fixed timing: TTFT 50 ms, ITL 10 ms, 200-token outputs, with its trace file) to one
core and one ``llmload bench`` process to the other, runs each concurrency level, and prints per level the
streamed tokens/s, the client's CPU, and the client's TTFT and ITL (p50, p99) next to the ground truth from
the server's trace: the send time of every chunk, on the same CLOCK_MONOTONIC as the client's perf_counter, so
true TTFT = first chunk sent − client's send time, and |err| = client arrival − server send.
Not a test: timing depends on the machine.

    python benchmarks/client_accuracy.py --levels 32 128 256 512 1024 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from llmload.processes.simproc import SimProcess


def _pct(values: list[float], p: float) -> float:
    return float(np.percentile(np.asarray(values) * 1000.0, p)) if values else float("nan")


def run_level(concurrency: int, rounds: int, workdir: Path, sim_core: int, client_core: int) -> dict:
    trace = workdir / f"trace-{concurrency}.jsonl"
    sim = SimProcess(["--ttft-ms", "50", "--itl-ms", "10", "--trace-file", str(trace)])
    try:
        os.sched_setaffinity(sim.pid, {sim_core})
        out = workdir / f"c{concurrency}"
        cmd = [
            sys.executable, "-m", "llmload.cli", "bench", "--base-url", sim.url, "--tokenizer", "builtin",
            "--num-prompts", str(concurrency * rounds), "--max-concurrency", str(concurrency),
            "--sharegpt-output-len", "200", "--ignore-eos", "--disable-tqdm", "--save-result",
            "--result-dir", str(out), "--result-filename", "result.json",
        ]
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: os.sched_setaffinity(0, {client_core}))
        _stdout, stderr = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"bench failed at c={concurrency}: {stderr.strip().splitlines()[-1:]}")
        wall = time.perf_counter() - t0
    finally:
        sim.stop()
    result = json.loads((out / "result.json").read_text())
    with open(out / "result.records.jsonl") as f:
        records = [json.loads(line) for line in f]
    server = {}
    with open(trace) as f:
        for line in f:
            entry = json.loads(line)
            if entry["client_id"]:
                server[entry["client_id"]] = entry
    c_ttft, c_itl, s_ttft, s_itl, d_ttft, d_itl = [], [], [], [], [], []
    for r in records:
        s = server.get(r["request_id"])
        if not r["success"] or s is None or len(s["chunks"]) != len(r["chunk_times"]):
            continue
        ct = r["first_token"] - r["start"]
        # ground truth: when the first token left the server, from the client's own send time (same clock)
        st = s["chunks"][0] - r["start"]
        c_ttft.append(ct)
        s_ttft.append(st)
        d_ttft.append(abs(ct - st))
        ci = np.diff(r["chunk_times"])
        si = np.diff(s["chunks"])
        c_itl.extend(ci)
        s_itl.extend(si)
        d_itl.extend(np.abs(ci - si))
    health = result.get("client_health", {})
    return {
        "concurrency": concurrency,
        "tok_per_s": round(result["total_output_tokens"] / result["duration"]),
        "client_cpu_pct": health.get("cpu_percent_mean"),
        "ttft_p50": (_pct(c_ttft, 50), _pct(s_ttft, 50)),
        "ttft_p99": (_pct(c_ttft, 99), _pct(s_ttft, 99)),
        "itl_p50": (_pct(c_itl, 50), _pct(s_itl, 50)),
        "itl_p99": (_pct(c_itl, 99), _pct(s_itl, 99)),
        "abs_err_p99_ms": (_pct(d_ttft, 99), _pct(d_itl, 99)),
        "matched": len(c_ttft),
        "wall_s": round(wall, 1),
        "bottleneck": health.get("bottleneck"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", type=int, nargs="+", default=[32, 128, 256, 512, 1024])
    parser.add_argument("--rounds", type=int, default=2, help="requests per stream slot")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    sim_core, client_core = cores[0], cores[-1]
    with tempfile.TemporaryDirectory() as tmp:
        rows = [run_level(c, args.rounds, Path(tmp), sim_core, client_core) for c in args.levels]
    if args.json:
        print(json.dumps(rows))
        return
    print(f"{'c':>5} {'tok/s':>7} {'cpu%':>5} | {'TTFT p50':>17} {'TTFT p99':>17} | {'ITL p50':>15} {'ITL p99':>15}"
          f" | {'|err| p99 ttft/itl':>18}")
    print(f"{'':>5} {'':>7} {'':>5} | {'client / server':>17} {'client / server':>17} | {'client/server':>15} "
          f"{'client/server':>15} |")
    for r in rows:
        f = lambda pair: f"{pair[0]:7.2f} / {pair[1]:7.2f}"  # noqa: E731
        g = lambda pair: f"{pair[0]:6.2f}/{pair[1]:6.2f}"  # noqa: E731
        print(f"{r['concurrency']:>5} {r['tok_per_s']:>7} {r['client_cpu_pct']:>5} | {f(r['ttft_p50'])} "
              f"{f(r['ttft_p99'])} | {g(r['itl_p50'])}  {g(r['itl_p99'])} | "
              f"{r['abs_err_p99_ms'][0]:7.2f} / {r['abs_err_p99_ms'][1]:5.2f}"
              + ("  CLIENT BOTTLENECK" if r["bottleneck"] else ""))


if __name__ == "__main__":
    main()
