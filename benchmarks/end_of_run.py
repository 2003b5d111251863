"""How long do the end-of-run statistics take for a million requests, and how much memory do they need?

Builds a run's records the way a master keeps them (issue 37): N synthetic records of ``--tokens`` tokens each,
written one by one to a records journal through :class:`~llmload.client.records.kept.KeptRecords` (arriving
from two "workers" interleaved, as a master sees them), then times the steps a run's end takes over them: the
send order, :func:`~llmload.metrics.compute_metrics` (every percentile exact, numpy's), the result JSON with its
per-request lists, and the records file. For each step: wall seconds and the process's peak RSS (ru_maxrss)
after it; and the RSS while the records were kept (bytes a request).

Each size runs in its own child process, so that peaks do not carry over. Not a test: timings depend on the
machine.

    python benchmarks/end_of_run.py                      # 10,000 and 1,000,000 requests of 16 tokens
    python benchmarks/end_of_run.py --sizes 10000 100000 --detailed
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

RESULTS = Path(__file__).resolve().parent / "results"


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def one_size(n: int, tokens: int, detailed: bool, folder: Path) -> dict:
    """The measurements for one run of ``n`` requests (in this process)."""
    import numpy as np

    from llmload.bench.results import write_json
    from llmload.client.records.file import write_records
    from llmload.client.records.journal import RecordJournal
    from llmload.client.records.kept import KeptRecords
    from llmload.client.records.record import RequestRecord
    from llmload.metrics import compute_metrics, request_lists

    rng = np.random.default_rng(0)
    out: dict = {"requests": n, "tokens": tokens, "rss_before_mib": round(rss_mib(), 1)}
    journal = RecordJournal(folder / "run.journal.jsonl", print)
    kept = KeptRecords(journal)
    t = time.perf_counter()
    gaps = rng.lognormal(-5.5, 0.3, size=(min(n, 4096), tokens))
    for i in range(n):
        k = i ^ 1 if i + 1 < n else i  # two workers' batches interleave: not quite send order
        t0 = 1000.0 + k * 0.001
        times = (t0 + 0.02 + np.cumsum(gaps[k % len(gaps)])).tolist()
        r = RequestRecord(request_id=f"r{k}", backend="openai-chat", prompt_len=16, expected_output_len=tokens,
                          intended_send=t0, dispatched_at=t0 + 1e-5, start=t0 + 2e-5, first_token=times[0],
                          chunk_times=times, chunk_tokens=[1] * tokens, output_tokens=tokens,
                          output_tokens_source="usage", server_prompt_tokens=16, generated_text=" tok" * tokens,
                          success=True, status_code=200, worker=f"worker{k % 2}")
        r.compact()
        kept.add(r, k)
    out["keep_s"] = round(time.perf_counter() - t, 2)
    out["rss_kept_mib"] = round(rss_mib(), 1)
    out["journal_bytes_per_request"] = round(journal.size / n, 1)
    steps = {}

    def step(name: str, fn: Any) -> Any:
        start = time.perf_counter()
        value = fn()
        steps[name] = {"s": round(time.perf_counter() - start, 2), "peak_rss_mib": round(peak_mib(), 1)}
        print(f"  {n:>9,} {name:<14} {steps[name]['s']:>7.2f} s  peak RSS {steps[name]['peak_rss_mib']:7.1f} MiB",
              file=sys.stderr, flush=True)
        return value

    records = step("send order", kept.in_send_order)
    metrics = step("statistics", lambda: compute_metrics(records, n * 0.001, selected_percentiles=(50, 90, 99, 99.9),
                                                         selected_metrics=("ttft", "tpot", "itl", "e2el")))

    def result() -> None:
        data = metrics.to_result_dict()
        data.update(request_lists(records, metrics, detailed=detailed, streamed=True))
        write_json(folder / "run.json", data)

    step("result JSON", result)
    step("records file", lambda: write_records(folder / "run.records.jsonl", records))
    out["steps"] = steps
    out["statistics_s"] = steps["send order"]["s"] + steps["statistics"]["s"]
    out["peak_rss_mib"] = round(peak_mib(), 1)
    out["p99_itl_ms"] = metrics.itl.percentiles_ms[2][1]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 1_000_000])
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--detailed", action="store_true", help="--save-detailed's lists in the result JSON too")
    parser.add_argument("--name", default="end_of_run")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        with tempfile.TemporaryDirectory(prefix="llmload-end-") as tmp:
            print(json.dumps(one_size(args.one, args.tokens, args.detailed, Path(tmp))))
        return 0
    rows = []
    for n in args.sizes:
        cmd = [sys.executable, __file__, "--one", str(n), "--tokens", str(args.tokens)]
        if args.detailed:
            cmd.append("--detailed")
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=False, env=os.environ.copy())
        if proc.returncode:
            print(f"end_of_run: {n} requests failed (exit {proc.returncode})", file=sys.stderr)
            return 1
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    print(f"{'requests':>10} {'kept RSS MiB':>12} {'B/req kept':>10} {'statistics s':>12} {'peak MiB':>9} "
          f"{'journal B/req':>13}")
    base = rows[0]
    for row in rows:
        per = ((row["rss_kept_mib"] - base["rss_kept_mib"]) * 2**20 / (row["requests"] - base["requests"])
               if row is not base else 0.0)
        print(f"{row['requests']:>10,} {row['rss_kept_mib']:>12.1f} {per:>10.1f} {row['statistics_s']:>12.2f} "
              f"{row['peak_rss_mib']:>9.1f} {row['journal_bytes_per_request']:>13.1f}")
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{args.name}.json"
    path.write_text(json.dumps(rows, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
