"""Generate the small synthetic Mooncake-format trace shipped in the package, ``llmload/data/``.

The real Mooncake traces (Kimi's production traffic, FAST'25) may not be copied into the project, so this
writes a stand-in of the same format and the same kind of reuse, one JSON object a line::

    {"timestamp": ms, "input_length": tokens, "output_length": tokens, "hash_ids": [block ids...]}

What resembles the real conversation trace: every prompt begins with a shared system-prompt block (id 0);
requests come from sessions of 1-6 turns, and each later turn of a session repeats its session's earlier
blocks and adds new ones (the history grows), so identical leading ids mean a reusable prefix; arrivals are
Poisson at ~1 request/s with a session's turns 5-30 s apart; the last block of a prompt is partial. Blocks are
512 tokens. Smaller than the real trace (mean ~3,000 input tokens instead of ~12,000) so it replays in
seconds against ``llmload sim``.

Deterministic: the same seed gives a byte-identical file. Stdlib + numpy only.

    python datasets/make_mooncake_sample.py    # writes llmload/data/mooncake_sample.jsonl
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

BLOCK = 512
OUT = Path(__file__).resolve().parents[1] / "llmload" / "data" / "mooncake_sample.jsonl"


def generate(requests: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    next_id = 1
    rows: list[tuple[float, int, int, list[int]]] = []
    t = 0.0
    while len(rows) < requests:
        t += rng.exponential(2.0)  # a new session every ~2 s
        blocks = [0]  # the shared system prompt
        turn_at = t
        for _ in range(int(rng.integers(1, 7))):
            grow = int(rng.integers(1, 5))
            blocks += list(range(next_id, next_id + grow))
            next_id += grow
            input_length = (len(blocks) - 1) * BLOCK + int(rng.integers(1, BLOCK))
            rows.append((turn_at, input_length, int(rng.integers(16, 400)), list(blocks)))
            turn_at += float(rng.uniform(5.0, 30.0))
    rows.sort(key=lambda r: r[0])
    return [{"timestamp": int(ts * 1000), "input_length": n, "output_length": m, "hash_ids": ids}
            for ts, n, m, ids in rows[:requests]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=120)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=OUT)
    args = parser.parse_args()
    rows = generate(args.requests, args.seed)
    args.output.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"wrote {len(rows)} requests to {args.output}")


if __name__ == "__main__":
    main()
