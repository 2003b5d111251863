"""How many chunks per second can ``llmload sim`` send on time?

Starts ``llmload sim`` in fixed-timing mode, drives it with a cheap raw-socket client (a separate process
reading with epoll and counting events, so the client is not what limits the rate), and reports the
achieved chunks/s, the simulator's CPU use and its send lateness (actual − scheduled send time) from
``GET /sim/stats``. Not a test: timing depends on the machine.

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


def get(port: int, path: str) -> dict:
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return json.loads(data.split(b"\r\n\r\n", 1)[1])


def drive(port: int, streams: int, max_tokens: int, seconds: float, stagger_s: float = 0.01) -> tuple[int, int, float]:
    """Keep ``streams`` streaming requests in flight for ``seconds``; returns (chunks, requests, elapsed)."""
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
    # Stagger the first sends over one inter-token gap, as independent clients would be; streams that all
    # start together stay in lockstep and measure burst handling instead of steady throughput.
    t0 = time.perf_counter()
    for i, s in enumerate(socks):
        while time.perf_counter() < t0 + i * stagger_s / streams:
            pass
        s.sendall(request)
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
        tails[s] = b""
    chunks = requests = 0
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        for key, _ in sel.select(timeout=0.1):
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
    for s in tails:
        s.close()
    return chunks, requests, elapsed


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
    parser.add_argument("--workers", type=int, default=1, help="simulator processes (SO_REUSEPORT)")
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    args = parser.parse_args()
    proc, port = start_sim(["--ttft-ms", str(args.ttft_ms), "--itl-ms", str(args.itl_ms), "--workers", str(args.workers)])
    try:
        cpu0 = cpu_seconds(proc.pid)
        chunks, requests, elapsed = drive(port, args.streams, args.max_tokens, args.seconds, args.itl_ms / 1000)
        cpu = (cpu_seconds(proc.pid) - cpu0) / elapsed
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
        "lateness_us (worst worker)": stats["lateness_us"],
    }
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>22}: {value}")


if __name__ == "__main__":
    main()
