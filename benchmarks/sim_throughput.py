"""How many chunks per second can ``llmload sim`` send on time?

Starts ``llmload sim`` in fixed-timing mode pinned to one CPU, drives it from the other CPUs with a cheap
raw-socket client (epoll, counting events, so the client is not what limits the rate) whose streams start
evenly over one stream's duration (a steady load, not synchronized bursts), and reports, after a warm-up,
the achieved chunks/s, the simulator's CPU use and its send lateness (actual − scheduled send time) from
``/sim/stats``; and, first, how much time the machine itself takes from a busy process when every core is
busy, the floor under any p99 lateness. Not a test: timing depends on the machine.

    python benchmarks/sim_throughput.py --streams 500 --itl-ms 10 --seconds 10
"""

from __future__ import annotations

import argparse
import json
import os
import re
import selectors
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any


def start_sim(extra: list[str]) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "llmload.cli", "sim", "--port", "0", *extra],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    match = re.search(r":(\d+) ", line)
    if not match:
        proc.kill()
        raise SystemExit(f"simulator did not start: {line!r}")
    return proc, int(match.group(1))


def get(port: int, path: str, method: str = "GET") -> dict:
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return json.loads(data.split(b"\r\n\r\n", 1)[1])


def drive(port: int, streams: int, max_tokens: int, seconds: float, stagger_s: float,
          warmup_s: float = 0.0, on_warm: Callable[[], None] | None = None) -> tuple[int, int, float]:
    """Keep ``streams`` streaming requests in flight for ``warmup_s + seconds``; returns (chunks, requests,
    elapsed) of the last ``seconds``.

    The first sends are spread evenly over ``stagger_s`` (pass one whole stream's duration), from inside the
    read loop: streams that start together end together, and their successors then arrive in one burst every
    stream duration, which measures burst handling instead of steady throughput. After the warm-up the
    simulator's lateness count starts afresh (``POST /sim/stats/reset``) and ``on_warm`` is called."""
    body = json.dumps(
        {"model": "llmload-sim", "prompt": "benchmark", "max_tokens": max_tokens, "stream": True, "ignore_eos": True}
    ).encode()
    request = (
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
        % len(body)
        + body
    )
    sel = selectors.DefaultSelector()
    tails: dict[socket.socket, bytes] = {}
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(streams)]
    t0 = time.perf_counter()
    starts = [(t0 + i * stagger_s / streams, s) for i, s in enumerate(socks)]
    starts.reverse()
    chunks = requests = 0
    start = t0
    warm = t0 + warmup_s
    deadline = warm + seconds
    warming = warmup_s > 0
    while (now := time.perf_counter()) < deadline:
        while starts and starts[-1][0] <= now:
            s = starts.pop()[1]
            s.sendall(request)
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ)
            tails[s] = b""
        if warming and now >= warm:
            get(port, "/sim/stats/reset", "POST")
            if on_warm is not None:
                on_warm()
            warming = False
            chunks = requests = 0
            start = time.perf_counter()
        timeout = min(0.1, max(0.0, starts[-1][0] - now)) if starts else 0.1
        for key, _ in sel.select(timeout=timeout):
            s = key.fileobj
            data = s.recv(1 << 20)
            if not data:
                raise SystemExit("simulator closed a connection")
            chunks += data.count(b"data: {")
            buf = tails[s] + data
            if buf.endswith(b"0\r\n\r\n") and b"[DONE]" in buf[-64:]:
                requests += 1
                tails[s] = b""
                s.sendall(request)
            else:
                tails[s] = buf[-64:]
    elapsed = time.perf_counter() - start
    for s in socks:
        s.close()
    return chunks, requests, elapsed


def _spin(core: int, seconds: float, report: Any) -> tuple[int, float, float]:
    """Spin on ``core`` for ``seconds``, timing every gap of more than 0.5 ms between two clock reads:
    (stalls, ms stalled, longest ms). Nothing in this process waits, so every gap is time the machine took."""
    os.sched_setaffinity(0, {core})
    stalls, stalled, longest = 0, 0.0, 0.0
    last = time.monotonic()
    end = last + seconds
    while last < end:
        now = time.monotonic()
        if now - last > 0.0005:
            stalls += 1
            stalled += now - last
            longest = max(longest, now - last)
        last = now
    result = (stalls, stalled * 1000, longest * 1000)
    if report is not None:
        report.send(result)
    return result


def machine_stalls(seconds: float = 3.0) -> dict:
    """How much time the machine itself takes from a busy process when every core is busy (a VM's steal,
    interrupts): one spinning process per core, each timing its own gaps. A punctual simulator cannot be more
    punctual than this; it is the floor under its p99 lateness."""
    import multiprocessing

    cores = sorted(os.sched_getaffinity(0))
    ctx = multiprocessing.get_context("fork")
    pipes, procs = [], []
    for core in cores[1:]:
        mine, theirs = ctx.Pipe()
        proc = ctx.Process(target=_spin, args=(core, seconds, theirs))
        proc.start()
        pipes.append(mine)
        procs.append(proc)
    results = [_spin(cores[0], seconds, None), *(p.recv() for p in pipes)]
    for proc in procs:
        proc.join()
    os.sched_setaffinity(0, set(cores))
    worst = max(results, key=lambda r: r[1])
    return {"stalls_per_s": round(worst[0] / seconds, 1), "stalled_percent": round(worst[1] / seconds / 10, 2),
            "longest_ms": round(worst[2], 1)}


def children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=500, help="concurrent streaming requests")
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--ttft-ms", type=float, default=20.0)
    parser.add_argument("--max-tokens", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=0.0,
                        help="seconds before measuring (at least one stream's duration + 0.5 s: all streams started)")
    parser.add_argument("--sim-core", type=int, default=None,
                        help="pin the simulator to this CPU and the driver to the others (default: the last CPU)")
    parser.add_argument("--workers", type=int, default=1, help="simulator processes (SO_REUSEPORT)")
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    parser.add_argument("--no-stalls", action="store_true",
                        help="skip measuring the machine's own stalls with every core busy (3 s)")
    args = parser.parse_args()
    stalls = None if args.no_stalls else machine_stalls()
    proc, port = start_sim(["--ttft-ms", str(args.ttft_ms), "--itl-ms", str(args.itl_ms), "--workers", str(args.workers)])
    try:
        cpu0 = cpu_seconds(proc.pid)
        cores = sorted(os.sched_getaffinity(0))
        if len(cores) > 1 and args.workers == 1:
            sim_core = cores[-1] if args.sim_core is None else args.sim_core
            for pid in [proc.pid, *children(proc.pid)]:
                os.sched_setaffinity(pid, {sim_core})
            os.sched_setaffinity(0, set(cores) - {sim_core})
        warm_cpu: list[float] = []

        def measured_from_here() -> None:
            warm_cpu.append(cpu_seconds(proc.pid))

        stream_s = (args.ttft_ms + args.max_tokens * args.itl_ms) / 1000
        chunks, requests, elapsed = drive(port, args.streams, args.max_tokens, args.seconds, stream_s,
                                          warmup_s=max(args.warmup, stream_s + 0.5), on_warm=measured_from_here)
        cpu = (cpu_seconds(proc.pid) - (warm_cpu[0] if warm_cpu else cpu0)) / elapsed
        stats = get(port, "/sim/stats")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    result = {
        "streams": args.streams,
        "itl_ms": args.itl_ms,
        "offered_chunks_per_s": round(args.streams * 1000 / args.itl_ms),
        "chunks_per_s": round(chunks / elapsed),
        "requests_completed": requests,
        "sim_cpu_percent": round(100 * cpu, 1),
        "workers": args.workers,
        "lateness_us": stats["lateness_us"],
        "machine_stalls (every core busy)": stalls,
    }
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>22}: {value}")


if __name__ == "__main__":
    main()
