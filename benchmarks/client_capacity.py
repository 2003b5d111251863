"""How much of the physical floor does one llmload process drive, and how accurately?

Side by side in one run, on the same server: ``llmload sim`` (fixed timing: TTFT 50 ms, ITL 10 ms, 200-token
streams, 64-token prompts, with its trace file) pinned to one CPU; on the other, in turn, the *floor reader* (a
raw-socket epoll loop that sends, reads and counts events and does nothing else: what one Python process can
possibly do) and one ``llmload bench`` process, each closed loop at concurrency c with 4c requests. A fresh
simulator serves each client, so each has its own ground truth: the send time of every chunk (the server's
p99 ITL is "truth" below).

Per client and level it prints tokens/s (and llmload's share of the floor's), p50/p99 TTFT, p99 ITL (per
chunk: a read that brings k events gives one gap and k-1 zeros, as every client measures), the server's own p99
ITL for that run, CPU µs per token and per request (the process's user + system time; for llmload also without
its fixed start-up cost, measured by a one-request run), and for llmload the closed-loop successor gap (a
request's start minus the end of the request whose slot it took).

Each level then checks what llmload promises (issue 33; a regression of a5f4d2c went unseen without it): p99 ITL
within 1 ms of the server's truth, p99 TTFT at most 5 ms above the floor reader's (which stamps a read when it
returns, so it is no better than the kernel's stamp llmload uses), tokens/s at least 97 % of the floor's. It prints
PASS or FAIL for each and exits 1 when one failed; docs/performance.md records the results by commit.

``--scale`` measures how llmload scales over processes on a machine too small to give each its own core: at a
load the simulator serves easily, ``--processes 1`` and ``--processes 2`` pinned together to one CPU, comparing
the CPU every process together spends per token. When two processes spend no more per token than one, N
processes on N free cores give N times one's capacity (less the master's merge, benchmarks/master_merge.py).
Not a test: timing depends on the machine.

    python benchmarks/client_capacity.py --levels 64 256 512
    python benchmarks/client_capacity.py --scale --scale-concurrency 128
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from llmload.processes.simproc import SimProcess

TTFT_MS, ITL_MS, OUTPUT, PROMPT = 50, 10, 200, 64
#: the accuracy llmload holds against the floor reader at every level (issue 33)
ITL_P99_WITHIN_MS = 1.0
TTFT_P99_OVER_FLOOR_MS = 5.0
MIN_SHARE_OF_FLOOR = 0.97


def _pct(values, p: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float) * 1000.0, p)) if len(values) else float("nan")


# -- the floor reader (runs as a child: python client_capacity.py --floor-reader PORT C N) --------------------


def floor_reader(port: int, concurrency: int, total: int) -> dict:
    """Closed loop at ``concurrency`` over ``total`` streaming requests, reading with one epoll set; returns
    TTFTs, per-chunk ITLs and the span, for the parent to print."""
    prompt = "word " * (PROMPT - 1)
    body = json.dumps({"model": "llmload-sim", "prompt": prompt, "max_tokens": OUTPUT, "stream": True,
                       "ignore_eos": True}).encode()
    request = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\n\r\n" % len(body)) + body
    ep = select.epoll()
    socks: dict[int, socket.socket] = {}
    sent_at: dict[int, float] = {}
    last_event: dict[int, float] = {}
    tails: dict[int, bytes] = {}
    ttfts: list[float] = []
    itls: list[float] = []
    started = finished = 0
    perf = time.perf_counter

    def send(fd: int) -> None:
        nonlocal started
        started += 1
        tails[fd] = b""
        last_event.pop(fd, None)
        sent_at[fd] = perf()
        socks[fd].sendall(request)

    t0 = perf()
    for _ in range(min(concurrency, total)):
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        socks[s.fileno()] = s
        ep.register(s.fileno(), select.EPOLLIN)
        send(s.fileno())
    end = t0
    while finished < total:
        for fd, _ in ep.poll(1.0):
            data = os.read(fd, 65536)
            t = perf()
            if not data:
                raise SystemExit("the server closed a connection")
            seen = tails[fd] + data
            events = seen.count(b"data: {") - tails[fd].count(b"data: {")
            if events:
                if fd in last_event:
                    itls.append(t - last_event[fd])
                else:
                    ttfts.append(t - sent_at[fd])
                    events -= 1
                itls.extend([0.0] * events)
                last_event[fd] = t
            if seen.endswith(b"0\r\n\r\n"):
                finished += 1
                end = t
                if started < total:
                    send(fd)
                continue
            tails[fd] = seen[-16:]
    for s in socks.values():
        s.close()
    return {"ttfts": ttfts, "itls": itls, "span": end - t0, "requests": total}


# -- running each client ----------------------------------------------------------------------------------


def _server_truth(trace: Path) -> list[float]:
    """Every inter-chunk gap the server sent, from its trace."""
    gaps: list[float] = []
    with open(trace) as f:
        for line in f:
            chunks = json.loads(line).get("chunks") or []
            gaps.extend(np.diff(chunks).tolist())
    return gaps


def _children_cpu() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_pinned(cmd: list[str], core: int, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, float]:
    """Run ``cmd`` pinned to ``core``; returns it and its CPU seconds. RUSAGE_CHILDREN grows by exactly a
    child's time (its own and its reaped descendants') when it is reaped, and nothing else is reaped meanwhile
    (the simulator is stopped later)."""
    before = _children_cpu()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: os.sched_setaffinity(0, {core}))
    out, err = proc.communicate()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err), _children_cpu() - before


def run_floor(c: int, work: Path, sim_core: int, client_core: int) -> dict:
    trace = work / f"floor-{c}.jsonl"
    with SimProcess(["--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS), "--trace-file", str(trace)]) as sim:
        os.sched_setaffinity(sim.pid, {sim_core})
        port = int(sim.url.rsplit(":", 1)[1])
        done, cpu = run_pinned([sys.executable, __file__, "--floor-reader", str(port), str(c), str(4 * c)],
                               client_core)
    if done.returncode != 0:
        raise SystemExit(f"floor reader failed at c={c}: {done.stderr.strip()[-500:]}")
    got = json.loads(done.stdout)
    tokens = got["requests"] * OUTPUT
    return {"client": "floor reader", "c": c, "tok_s": tokens / got["span"], "ttft": got["ttfts"],
            "itl": got["itls"], "truth_itl": _server_truth(trace), "cpu_s": cpu, "tokens": tokens,
            "requests": got["requests"], "gap": []}


def _bench_cmd(url: str, c: int, n: int, out: Path, processes: int = 1) -> list[str]:
    cmd = [sys.executable, "-m", "llmload.cli", "bench", "--base-url", url, "--tokenizer", "builtin",
           "--dataset-name", "random", "--random-input-len", str(PROMPT), "--random-output-len", str(OUTPUT),
           "--ignore-eos", "--num-prompts", str(n), "--max-concurrency", str(c), "--disable-tqdm",
           "--save-result", "--result-dir", str(out), "--result-filename", "result.json"]
    return cmd + (["--processes", str(processes)] if processes > 1 else [])


def _successor_gaps(records: list[dict], c: int) -> list[float]:
    """Closed loop: the k-th request past the first c took the slot the k-th request to end gave up."""
    starts = sorted(r["start"] for r in records)[c:]
    ends = sorted(r["chunk_times"][-1] for r in records if r["chunk_times"])
    return [s - e for s, e in zip(starts, ends, strict=False)]


def run_llmload(c: int, work: Path, sim_core: int, client_core: int, processes: int = 1,
                requests: int | None = None, reader: str | None = None) -> dict:
    """One llmload run; ``reader``: LLMLOAD_READER for it (None: what this installation chooses)."""
    trace = work / f"llmload-{c}-p{processes}-{reader}.jsonl"
    out = work / f"llmload-{c}-p{processes}-{reader}"
    n = requests or 4 * c
    env = dict(os.environ, LLMLOAD_READER=reader) if reader else None
    with SimProcess(["--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS), "--trace-file", str(trace)]) as sim:
        os.sched_setaffinity(sim.pid, {sim_core})
        fixed, fixed_cpu = run_pinned(_bench_cmd(sim.url, 1, 1, work / "fixed", processes), client_core, env)
        done, cpu = run_pinned(_bench_cmd(sim.url, c, n, out, processes), client_core, env)
    if done.returncode != 0 or fixed.returncode != 0:
        raise SystemExit(f"llmload bench failed at c={c}: {(done.stderr or fixed.stderr).strip()[-500:]}")
    with open(out / "result.records.jsonl") as f:
        records = [json.loads(line) for line in f]
    ok = [r for r in records if r["success"]]
    ttft = [r["first_token"] - r["start"] for r in ok]
    itl = [g for r in ok for g in np.diff(r["chunk_times"]).tolist()]
    start = min(r["start"] for r in ok)
    end = max(r["chunk_times"][-1] for r in ok)
    tokens = sum(r["output_tokens"] for r in ok)
    with open(out / "result.json") as f:
        ran = (json.load(f).get("client") or {}).get("reader") or "?"
    name = f"llmload {ran}" + (f" ({processes} proc)" if processes > 1 else "")
    return {"client": name, "c": c, "reader": ran,
            "tok_s": tokens / (end - start), "ttft": ttft, "itl": itl, "truth_itl": _server_truth(trace),
            "cpu_s": cpu, "fixed_cpu_s": fixed_cpu, "tokens": tokens, "requests": len(ok),
            "gap": _successor_gaps(ok, c)}


def _row(r: dict, floor: dict | None) -> str:
    share = f"{100 * r['tok_s'] / floor['tok_s']:5.1f} %" if floor else "      "
    per_token = 1e6 * r["cpu_s"] / r["tokens"]
    run_only = r["cpu_s"] - r.get("fixed_cpu_s", 0.0)
    gap = f"{_pct(r['gap'], 50):6.2f} / {_pct(r['gap'], 99):6.2f}" if r["gap"] else "     -"
    return (f"{r['c']:>4} {r['client']:<18} {r['tok_s']:>8,.0f} {share} | {_pct(r['ttft'], 50):6.1f} / "
            f"{_pct(r['ttft'], 99):6.1f} | {_pct(r['itl'], 99):6.2f} (truth {_pct(r['truth_itl'], 99):5.2f}) | "
            f"{per_token:6.1f} / {1e6 * run_only / r['tokens']:6.1f} | {1e6 * r['cpu_s'] / r['requests']:8,.0f} | "
            f"{gap}")


HEADER = (f"{'c':>4} {'client':<18} {'tok/s':>8} {'floor':>7} | {'TTFT p50/p99 ms':>15} | "
          f"{'ITL p99 ms (server)':>20} | {'CPU µs/token':>15} | {'µs/request':>10} | successor gap p50/p99 ms\n"
          f"{'':>4} {'':<18} {'':>8} {'':>7} | {'':>15} | {'':>20} | {'all / the run':>15} |")


def checks(mine: dict, floor: dict) -> list[tuple[str, bool]]:
    """What llmload must hold at one level, each with whether it held."""
    itl, truth = _pct(mine["itl"], 99), _pct(mine["truth_itl"], 99)
    ttft, floor_ttft = _pct(mine["ttft"], 99), _pct(floor["ttft"], 99)
    share = mine["tok_s"] / floor["tok_s"]
    return [
        (f"p99 ITL {itl:.2f} ms within {ITL_P99_WITHIN_MS:g} ms of the server's {truth:.2f}",
         abs(itl - truth) <= ITL_P99_WITHIN_MS),
        (f"p99 TTFT {ttft:.1f} ms at most {TTFT_P99_OVER_FLOOR_MS:g} ms above the floor's {floor_ttft:.1f}",
         ttft <= floor_ttft + TTFT_P99_OVER_FLOOR_MS),
        (f"{100 * share:.1f} % of the floor's tokens/s (>= {100 * MIN_SHARE_OF_FLOOR:.0f} %)",
         share >= MIN_SHARE_OF_FLOOR),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", type=int, nargs="+", default=[64, 256, 512])
    parser.add_argument("--scale", action="store_true", help="compare --processes 1 and 2 instead")
    parser.add_argument("--scale-concurrency", type=int, default=128)
    parser.add_argument("--json", type=Path, help="also write every row's summary here")
    parser.add_argument("--readers", nargs="+", choices=("compiled", "python"), default=None,
                        help="run llmload once per reader (LLMLOAD_READER); default: the one this install chooses")
    parser.add_argument("--floor-reader", nargs=3, type=int, metavar=("PORT", "C", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor_reader:
        print(json.dumps(floor_reader(*args.floor_reader)))
        return
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        raise SystemExit("needs two CPUs: one for the simulator, one for the client")
    sim_core, client_core = cores[-1], cores[0]
    rows: list[dict] = []
    failed = False
    print(HEADER)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.scale:
            c = args.scale_concurrency
            for processes in (1, 2):
                rows.append(run_llmload(c, work, sim_core, client_core, processes, requests=8 * c))
                print(_row(rows[-1], None), flush=True)
            one, two = rows
            ratio = (one["cpu_s"] - one["fixed_cpu_s"]) / one["tokens"] / (
                (two["cpu_s"] - two["fixed_cpu_s"]) / two["tokens"])
            print(f"\nCPU per token, one process / two processes together: {ratio:.2f} "
                  f"(>= 0.90: two processes on two free cores give >= 90 % of twice one's capacity)")
        else:
            verdicts: list[tuple[int, str, bool]] = []
            for c in args.levels:
                floor = run_floor(c, work, sim_core, client_core)
                print(_row(floor, None), flush=True)
                rows.append(floor)
                for reader in args.readers or [None]:
                    mine = run_llmload(c, work, sim_core, client_core, reader=reader)
                    print(_row(mine, floor), flush=True)
                    rows.append(mine)
                    verdicts += [(c, f"{mine['reader']:<8} {what}", held) for what, held in checks(mine, floor)]
            print()
            for c, what, held in verdicts:
                print(f"{'PASS' if held else 'FAIL'}  c={c:<4} {what}")
            failed = not all(held for _c, _what, held in verdicts)
    if args.json:
        summary = [{k: v for k, v in r.items() if not isinstance(v, list)} | {
            "ttft_p50_ms": _pct(r["ttft"], 50), "ttft_p99_ms": _pct(r["ttft"], 99),
            "itl_p99_ms": _pct(r["itl"], 99), "server_itl_p99_ms": _pct(r["truth_itl"], 99),
            "gap_p99_ms": _pct(r["gap"], 99) if r["gap"] else None} for r in rows]
        args.json.write_text(json.dumps(summary, indent=1))
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
