"""Do the four ways in measure the same thing? One workload against one fixed-timing ``llmload sim`` through
``llmload bench``, ``llmload bench --processes 2``, ``locust -f --headless`` and ``locust -f --headless
--processes 2``: per way in, the request count, token totals, median TTFT and ITL, and (open loop) how far each
request's send time was from vLLM's schedule for the seed (``start - intended_send``).
Not a test: timing depends on the machine (tests/integration/test_equivalence.py asserts with wide margins).

    python benchmarks/ways_in.py --prompts 200 --rate 20
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import median

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from llmload.processes.simproc import SimProcess  # noqa: E402

MODES = ("bench", "bench --processes 2", "locust -f", "locust -f --processes 2")


def run(mode: str, url: str, workload: list[str], loop: list[str], out: Path) -> list[dict]:
    processes = ["--processes", "2"] if "processes" in mode else []
    if mode.startswith("bench"):
        cmd = [sys.executable, "-m", "llmload.cli", "bench", "--base-url", url, *workload, *loop, *processes,
               "--save-result", "--disable-tqdm", "--result-dir", str(out), "--result-filename", "run.json"]
        records = out / "run.records.jsonl"
    else:
        records = out / "records.jsonl"
        cmd = [sys.executable, "-m", "locust", "-f", str(REPO / "locustfiles/sharegpt.py"), "--headless", "--host",
               url, "-t", "600s", *workload, *loop, *processes, "--llm-records", str(records)]
    subprocess.run(cmd, check=True, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return [json.loads(line) for line in records.read_text().splitlines() if line.strip()]


def describe(records: list[dict]) -> dict[str, float]:
    itls = [b - a for r in records for a, b in zip(r["chunk_times"], r["chunk_times"][1:], strict=False)]
    out = {"requests": len(records), "output_tokens": sum(r["output_tokens"] for r in records),
           "ttft_p50_ms": 1000 * median(r["first_token"] - r["start"] for r in records),
           "itl_p50_ms": 1000 * median(itls)}
    sends = [r["start"] - r["intended_send"] for r in records if r["intended_send"] is not None]
    if sends:
        out["send_error_p50_ms"] = 1000 * median(sends)
        out["send_error_max_ms"] = 1000 * max(sends)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--users", type=int, default=8, help="closed loop: concurrency")
    args = parser.parse_args()
    workload = ["--num-prompts", str(args.prompts), "--seed", "7", "--tokenizer", "builtin",
                "--sharegpt-output-len", "50", "--ignore-eos"]
    loops = {
        "open": ({"bench": ["--request-rate", str(args.rate)]},
                 {"locust": ["--arrival", "open", "--request-rate", str(args.rate)]}),
        "closed": ({"bench": ["--max-concurrency", str(args.users), "--think-time", "fixed:0"]},
                   {"locust": ["--arrival", "closed", "-u", str(args.users), "-r", "1000"]}),
    }
    with SimProcess(["--ttft-ms", "20", "--itl-ms", "10", "--tokenizer", "builtin"]) as sim, \
            tempfile.TemporaryDirectory() as tmp:
        for loop, (bench_flags, locust_flags) in loops.items():
            print(f"== {loop} loop")
            for k, mode in enumerate(MODES):
                flags = bench_flags["bench"] if mode.startswith("bench") else locust_flags["locust"]
                out = Path(tmp) / f"{loop}{k}"
                out.mkdir()
                stats = describe(run(mode, sim.url, workload, flags, out))
                print(f"{mode:<26} " + "  ".join(f"{key} {value:.3f}" if isinstance(value, float) else
                                                  f"{key} {value}" for key, value in stats.items()))


if __name__ == "__main__":
    main()
