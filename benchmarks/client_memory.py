"""How much memory one client process needs per open stream, and where it goes.

Two measurements, each against ``llmload sim`` (fixed timing, outputs long enough that every stream stays open):

1. ``llmload bench --max-concurrency C --num-prompts C`` (all C streams open at once) for each C of ``--streams``
   and each reader of ``--readers``: the bench process's peak RSS (``VmHWM``) and its RSS once all streams are open
   (``VmRSS``, sampled), then bytes per open stream between the smallest and the largest C; ``--whole-run``: the
   peak over the whole run (``wait4``'s ``ru_maxrss``), every stream to its end and the outputs after it.
2. ``--where``: in one gevent process, the transport alone (a shared ``Reactor``, a ``Pool`` per stream, as
   ``LLMUser`` has) opens C streams; ``tracemalloc`` compares the heap before and with all of them open, by the
   line that allocated, so the per-stream bytes are named (a greenlet's saved C stack is allocated at the line that
   switched away from it).

Not a test: the numbers depend on the machine, the allocator and the Python version.

    python benchmarks/client_memory.py --streams 10 1500
    python benchmarks/client_memory.py --streams 1500 --where
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from llmload.processes.simproc import SimProcess  # noqa: E402

#: TTFT 50 ms, a token every 100 ms, 400 tokens: each stream stays open ~40 s, far longer than C take to open
SIM = ["--ttft-ms", "50", "--itl-ms", "100"]
OUTPUT = 400


def _status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of ``pid`` in bytes (0 once it is gone)."""
    out = {"VmRSS": 0, "VmHWM": 0}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in out:
                out[key] = int(value.split()[0]) * 1024
    except OSError:
        pass
    return out


def _received(sim: SimProcess) -> int:
    """Requests the simulator has received."""
    import urllib.request

    with urllib.request.urlopen(f"{sim.url}/sim/stats", timeout=5) as r:
        return int(json.load(r).get("requests") or 0)


def bench_peak(streams: int, reader: str | None, whole_run: bool = False) -> dict:
    """One ``llmload bench`` with ``streams`` open at once: its RSS with all open and its peak RSS until then (or,
    ``whole_run``, over the whole run: every stream to its end, the metrics and outputs after it)."""
    with tempfile.TemporaryDirectory() as tmp, SimProcess([*SIM, "--max-num-seqs", str(streams + 16)]) as sim:
        cmd = [sys.executable, "-m", "llmload.cli", "bench", "--base-url", sim.url, "--tokenizer", "builtin",
               "--dataset-name", "random", "--random-input-len", "32", "--random-output-len", str(OUTPUT),
               "--ignore-eos", "--num-prompts", str(streams), "--max-concurrency", str(streams), "--disable-tqdm",
               "--no-initial-test", "--result-dir", tmp]
        env = dict(os.environ, LLMLOAD_READER=reader) if reader else None
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        open_rss = 0
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.25)
            if _received(sim) >= streams:
                time.sleep(1.0)  # every stream has its first chunks
                open_rss = _status(proc.pid)["VmRSS"]
                break
        peak = _status(proc.pid)["VmHWM"]
        if not whole_run:
            proc.send_signal(2)  # SIGINT: the run stops and keeps what it measured
        assert proc.stderr is not None
        err = proc.stderr.read()
        _pid, status, usage = os.wait4(proc.pid, 0)  # the child's own peak RSS, whole run included
        proc.returncode = os.waitstatus_to_exitcode(status)
        if whole_run:
            peak = usage.ru_maxrss * 1024
    return {"streams": streams, "reader": reader or "default", "open_rss": open_rss, "peak_rss": peak,
            "error": err.strip().splitlines()[-1] if proc.returncode not in (0, 130, 1) and err.strip() else None}


WHERE = r"""
import gevent.monkey; gevent.monkey.patch_all()
import gc, json, resource, sys, tracemalloc, gevent
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))  # a socket per stream
from llmload.client.transport import Pool, Reactor
url, n = sys.argv[1], int(sys.argv[2])
body = json.dumps({"model": "llmload-sim", "prompt": "hello " * 32, "max_tokens": 400, "stream": True,
                   "ignore_eos": True}).encode()
reactor = Reactor()
pools = [Pool(url, reactor=reactor) for _ in range(n)]
gc.collect(); tracemalloc.start(1); before = tracemalloc.take_snapshot()
lets = [gevent.spawn(p.request, "POST", "/v1/completions", {"Content-Type": "application/json"}, body)
        for p in pools]
while len(reactor.waiting) < n or min(len(w.parser.resp.lines) for w in reactor.waiting.values()) < 2:
    gevent.sleep(0.05)
    ended = [g for g in lets if g.dead]
    if ended:
        sys.exit(f"{len(ended)} streams ended before all were open: {ended[0].exception or ended[0].value.status}")
gc.collect(); after = tracemalloc.take_snapshot()
stats = after.compare_to(before, "lineno")
total = sum(s.size_diff for s in stats)
print(json.dumps({"reader": reactor.reader.name, "bytes_per_stream": total / n,
                  "top": [[str(s.traceback[0]), s.size_diff / n, s.count_diff / n] for s in stats[:12]]}))
sys.stdout.flush()
import os; os._exit(0)
"""


def where(streams: int, reader: str | None) -> dict:
    with SimProcess([*SIM, "--max-num-seqs", str(streams + 16)]) as sim:
        env = dict(os.environ, LLMLOAD_READER=reader) if reader else None
        out = subprocess.run([sys.executable, "-c", WHERE, sim.url, str(streams)], capture_output=True, text=True,
                             env=env, timeout=300)
    if out.returncode != 0:
        raise SystemExit(out.stderr[-2000:])
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, nargs="+", default=[10, 1500])
    parser.add_argument("--readers", nargs="+", choices=("compiled", "python"), default=[None])
    parser.add_argument("--where", action="store_true", help="also name the per-stream bytes of the transport")
    parser.add_argument("--whole-run", action="store_true",
                        help="peak RSS over the whole run (every stream to its end, ~45 s), not only until all are open")
    args = parser.parse_args()
    mib = 1024 * 1024
    for reader in args.readers:
        rows = [bench_peak(n, reader, args.whole_run) for n in sorted(args.streams)]
        for r in rows:
            print(f"{r['reader']:<9} {r['streams']:>5} streams open: RSS {r['open_rss'] / mib:6.1f} MiB, "
                  f"peak {r['peak_rss'] / mib:6.1f} MiB" + (f"  ({r['error']})" if r["error"] else ""), flush=True)
        if len(rows) > 1:
            lo, hi = rows[0], rows[-1]
            per = (hi["open_rss"] - lo["open_rss"]) / (hi["streams"] - lo["streams"])
            print(f"{lo['reader']:<9} {per / 1024:.1f} KiB per open stream", flush=True)
        if args.where:
            got = where(max(args.streams), reader)
            print(f"{got['reader']:<9} the transport alone: {got['bytes_per_stream'] / 1024:.1f} KiB per open stream "
                  "(tracemalloc), by the line that allocated:")
            for line, size, count in got["top"]:
                print(f"    {size / 1024:8.2f} KiB  {count:6.1f} blocks  {line}")


if __name__ == "__main__":
    main()
