"""How much memory and time do ``llmload report`` and ``llmload compare`` take for a long run?

Writes a synthetic llmload run of N requests (a result JSON and its ``.records.jsonl``, as ``llmload bench
--save-result`` leaves them; 16 chunks a request by default, ~5 ms apart, 300 req/s, a few failures), then runs
``llmload report RUN`` and ``llmload compare RUN RUN`` each in a fresh process and reads that process's peak RSS
(``ru_maxrss``) and wall time. With several ``--requests`` values it also gives the growth per request between
the smallest and the largest (issue 37: reading a run of a million requests in bounded memory).

    python benchmarks/report_memory.py --requests 10000 100000 1000000
    python benchmarks/report_memory.py --requests 20000 --skip-compare

Results go to benchmarks/results/report_memory.json (``--name``). Not a test: the numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson

RESULTS = Path(__file__).resolve().parent / "results"
#: runs the CLI in this process and prints its own peak RSS (kB) last, so the parent reads the child alone
_MEASURE = ("import resource, sys\nfrom llmload.cli import main\ncode = 0\ntry:\n    main(sys.argv[1:])\n"
            "except SystemExit as exc:\n    code = exc.code or 0\n"
            "print('maxrss_kb', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\nsys.exit(code)\n")


def write_run(folder: Path, requests: int, chunks: int = 16, seed: int = 0, name: str = "run") -> Path:
    """A synthetic run: ``<name>.json`` and ``<name>.records.jsonl`` in ``folder``; returns the JSON's path.
    Every 97th request fails before its first token; the others stream ``chunks`` one-token chunks."""
    rng = np.random.default_rng(seed)
    sends = np.cumsum(rng.exponential(1 / 300.0, size=requests)) + 1000.0
    ttfts = rng.gamma(4.0, 0.01, size=requests)
    gaps = rng.gamma(8.0, 0.0006, size=(requests, max(chunks - 1, 0)))
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{name}.records.jsonl", "wb") as f:
        for k in range(requests):
            start = float(sends[k])
            row: dict = {"request_id": f"random-{k}", "backend": "openai", "prompt_len": 16,
                         "expected_output_len": chunks, "intended_send": start, "dispatched_at": start,
                         "start": start}
            if k % 97 == 13:
                row.update(success=False, error="HTTP 503: overloaded", failure_kind="http")
            else:
                first = start + float(ttfts[k])
                times = np.concatenate([[first], first + np.cumsum(gaps[k])]).tolist()
                row.update(first_token=first, chunk_times=times, chunk_tokens=[1] * len(times),
                           output_tokens=len(times), output_tokens_source="usage", success=True,
                           generated_text="x" * len(times))
            f.write(orjson.dumps(row) + b"\n")
    duration = float(sends[-1] - sends[0]) + 1.0
    result = {"label": name, "duration": duration, "ttft_rule": "first_content", "total_requests": requests,
              "base_url": "http://127.0.0.1:8000", "request_rate": 300.0, "completed": requests}
    path = folder / f"{name}.json"
    path.write_text(json.dumps(result))
    return path


def measure(args: list[str]) -> dict:
    """Run ``llmload ARGS`` in a fresh process: exit code, wall seconds, peak RSS (MiB)."""
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _MEASURE, *args], capture_output=True, text=True)
    wall = time.perf_counter() - began
    peak = next((int(line.split()[1]) for line in done.stdout.splitlines() if line.startswith("maxrss_kb")), 0)
    if done.returncode:
        print(done.stdout[-2000:], done.stderr[-2000:], file=sys.stderr)
    return {"exit_code": done.returncode, "wall_s": round(wall, 2), "peak_mib": round(peak / 1024, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--chunks", type=int, default=16, help="chunks a request (default 16)")
    parser.add_argument("--skip-compare", action="store_true")
    parser.add_argument("--name", default="report_memory")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="llmload-report-memory-") as tmp:
        for n in sorted(args.requests):
            folder = Path(tmp) / str(n)
            began = time.perf_counter()
            run = write_run(folder, n, args.chunks)
            size = (folder / "run.records.jsonl").stat().st_size
            print(f"{n:,} requests: records file {size / 2**20:.1f} MiB, written in "
                  f"{time.perf_counter() - began:.1f} s", file=sys.stderr, flush=True)
            row = {"requests": n, "chunks": args.chunks, "records_mib": round(size / 2**20, 1),
                   "report": measure(["report", str(run), "--output", str(folder / "report")])}
            print(f"  report: {row['report']}", file=sys.stderr, flush=True)
            if not args.skip_compare:
                row["compare"] = measure(["compare", str(run), str(run), "--output", str(folder / "compare")])
                print(f"  compare: {row['compare']}", file=sys.stderr, flush=True)
            rows.append(row)
            for path in folder.glob("run.*"):
                path.unlink()
    out = {"python": sys.version.split()[0], "rows": rows}
    if len(rows) > 1:
        lo, hi = rows[0], rows[-1]
        span = hi["requests"] - lo["requests"]
        out["growth_bytes_per_request"] = {
            kind: round((hi[kind]["peak_mib"] - lo[kind]["peak_mib"]) * 2**20 / span, 1)
            for kind in ("report", "compare") if kind in lo and kind in hi}
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{args.name}.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
