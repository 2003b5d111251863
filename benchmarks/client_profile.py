"""Where one client process spends its CPU at a given number of streams.

Pins ``llmload sim`` (fixed timing: TTFT 50 ms, ITL 10 ms, 200-token streams) to one core and ``llmload bench``
(closed loop at ``--max-concurrency C``) to the other, twice per level: once plain, for the CPU it costs (the
child's user + system time from ``wait4``: CPU µs per token and per request, the run's tokens/s), once under
cProfile, for where that time goes, grouped by the part of llmload (or gevent, Locust, the standard library)
the function belongs to. cProfile slows a process down by itself; its shares are what to read, not its totals.

    python benchmarks/client_profile.py --levels 64 256 512 --top 15

Not a test: timing depends on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from llmload.processes.simproc import SimProcess  # noqa: E402

#: (name, path fragment) in order: the first match names a function's part
PARTS = (
    ("transport (reactor, HTTP parser, pool)", "llmload/client/transport/"),
    ("stream reader (events -> record)", "llmload/client/reader.py"),
    ("dialect parse_event / SSE", "llmload/client/backends/"),
    ("dialect parse_event / SSE", "llmload/client/sse.py"),
    ("users (send, record hooks)", "llmload/client/users.py"),
    ("records", "llmload/client/records/"),
    ("events (llmload hooks)", "llmload/client/events.py"),
    ("dispatcher and sinks", "llmload/core/"),
    ("metrics (end of run)", "llmload/metrics/"),
    ("tokenizer and dataset (set-up)", "llmload/datasets/"),
    ("tokenizer and dataset (set-up)", "tokenizers"),
    ("other llmload", "llmload/"),
    ("Locust (events, stats)", "locust/"),
    ("gevent hub and greenlet switches", "gevent/"),
    ("json", "json/"),
    ("orjson", "orjson"),
)


def part_of(filename: str) -> str:
    for name, fragment in PARTS:
        if fragment in filename:
            return name
    if filename.startswith("~") or filename == "":
        return "builtins (C: recv, epoll, ...)"
    return "standard library and the rest"


def bench_cmd(url: str, concurrency: int, rounds: int, out: Path) -> list[str]:
    return ["-m", "llmload.cli", "bench", "--base-url", url, "--tokenizer", "builtin",
            "--num-prompts", str(concurrency * rounds), "--max-concurrency", str(concurrency),
            "--sharegpt-output-len", "200", "--ignore-eos", "--disable-tqdm", "--no-initial-test", "--save-result",
            "--result-dir", str(out), "--result-filename", "result.json", "--no-server-metrics"]


def run_child(argv: list[str], core: int) -> tuple[float, int]:
    """Run ``argv`` pinned to ``core``; its CPU seconds (user + system) and exit status."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=REPO,
                            preexec_fn=lambda: os.sched_setaffinity(0, {core}))
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{proc.stderr.read().decode()[-2000:] if proc.stderr else ''}")
    return usage.ru_utime + usage.ru_stime, status


def level(concurrency: int, rounds: int, work: Path, sim_core: int, client_core: int, top: int) -> dict:
    sim = SimProcess(["--ttft-ms", "50", "--itl-ms", "10"])
    try:
        os.sched_setaffinity(sim.pid, {sim_core})
        plain = work / f"plain-{concurrency}"
        cpu_s, _ = run_child([sys.executable, *bench_cmd(sim.url, concurrency, rounds, plain)], client_core)
        result = json.loads((plain / "result.json").read_text())
        profile = work / f"c{concurrency}.prof"
        run_child([sys.executable, "-m", "cProfile", "-o", str(profile),
                   *bench_cmd(sim.url, concurrency, rounds, work / f"prof-{concurrency}")], client_core)
    finally:
        sim.stop()
    stats = pstats.Stats(str(profile))
    by_part: dict[str, float] = defaultdict(float)
    total = 0.0
    rows = []
    for (filename, line, func), (_cc, calls, tottime, _cum, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        by_part[part_of(filename)] += tottime
        total += tottime
        rows.append((tottime, calls, f"{Path(filename).name}:{line} {func}" if filename != "~" else func))
    rows.sort(reverse=True)
    tokens = int(result["total_output_tokens"])
    requests = int(result["completed"])
    return {
        "concurrency": concurrency, "tokens_per_s": result["output_throughput"], "cpu_s": cpu_s,
        "cpu_us_per_token": cpu_s / max(1, tokens) * 1e6, "cpu_us_per_request": cpu_s / max(1, requests) * 1e6,
        "p99_itl_ms": result.get("p99_itl_ms"), "p99_ttft_ms": result.get("p99_ttft_ms"),
        "parts": sorted(((v / total * 100.0, k) for k, v in by_part.items()), reverse=True),
        "top": [(t / total * 100.0, calls, name) for t, calls, name in rows[:top]],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", type=int, nargs="+", default=[64, 256, 512])
    parser.add_argument("--rounds", type=int, default=2, help="requests per stream slot (default: %(default)s)")
    parser.add_argument("--top", type=int, default=12, help="functions listed per level (default: %(default)s)")
    parser.add_argument("--sim-core", type=int, default=1)
    parser.add_argument("--client-core", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="llmload-profile-") as tmp:
        for c in args.levels:
            r = level(c, args.rounds, Path(tmp), args.sim_core, args.client_core, args.top)
            print(f"\n== {c} streams: {r['tokens_per_s']:,.0f} tok/s, client CPU {r['cpu_s']:.2f} s = "
                  f"{r['cpu_us_per_token']:.1f} µs/token, {r['cpu_us_per_request']:,.0f} µs/request; "
                  f"p99 TTFT {r['p99_ttft_ms']:.1f} ms, p99 ITL {r['p99_itl_ms']:.2f} ms")
            print("   share of profiled CPU by part:")
            for share, name in r["parts"]:
                if share >= 0.5:
                    print(f"   {share:5.1f} %  {name}")
            print("   top functions (own time):")
            for share, calls, name in r["top"]:
                print(f"   {share:5.1f} %  {calls:>9,}  {name}")


if __name__ == "__main__":
    main()
