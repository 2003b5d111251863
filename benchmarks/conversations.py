"""TTFT by turn index with and without the simulator's prefix cache: ``llmload bench --multi-turn`` replays the
shipped ShareGPT sample's conversations against the built-in simulator (its default step-time profile, which
charges prefill per token) twice, ``--prefix-cache-tokens 0`` and on, and draws median TTFT and the cached
fraction of prompt tokens per turn (docs/conversations.md shows the figure). Simulated, not a real engine.
Not a test: timing depends on the machine (tests/integration/test_conversation_runs.py asserts with wide margins).

    python benchmarks/conversations.py --conversations 100 --rate 2
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIGURE = REPO / "docs" / "figures" / "conversations-ttft-by-turn.png"
RESULTS = REPO / "benchmarks" / "results" / "conversations.json"
CACHE = {"off": "0", "on": "400000"}


def run(cache: str, args: argparse.Namespace, out: Path) -> dict:
    """One multi-turn run against the built-in simulator; returns its result JSON."""
    sim = f"--prefix-cache-tokens {CACHE[cache]}"
    cmd = [sys.executable, "-m", "llmload.cli", "bench", "--multi-turn", "--num-prompts", str(args.conversations),
           "--request-rate", str(args.rate), "--max-turns", str(args.max_turns), "--output-len", "64",
           "--system-prompt-len", str(args.system_prompt_len), "--turn-think-time", "exp:1", "--seed", "3",
           "--sim-args", sim, "--save-result", "--disable-tqdm", "--result-dir", str(out / cache),
           "--result-filename", "run.json"]
    subprocess.run(cmd, check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    return json.loads((out / cache / "run.json").read_text())


def draw(results: dict[str, dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ttft_ax = plt.subplots(figsize=(7, 4))
    cached_ax = ttft_ax.twinx()
    for cache, style in (("off", "o-"), ("on", "s-")):
        rows = [r for r in results[cache]["turns"] if r["completed"] >= 3]
        turns = [r["turn"] for r in rows]
        ttft_ax.plot(turns, [r["median_ttft_ms"] for r in rows], style, label=f"median TTFT, prefix cache {cache}")
        if cache == "on":
            cached_ax.bar(turns, [100 * (r["cached_fraction"] or 0) for r in rows], alpha=0.2, color="tab:green",
                          label="cached prompt tokens (%)")
    ttft_ax.set_xlabel("turn")
    ttft_ax.set_ylabel("median TTFT (ms)")
    cached_ax.set_ylabel("cached prompt tokens, cache on (%)")
    cached_ax.set_ylim(0, 100)
    ttft_ax.set_title("TTFT by turn, llmload sim (simulated), with and without its prefix cache")
    lines, labels = ttft_ax.get_legend_handles_labels()
    bars, bar_labels = cached_ax.get_legend_handles_labels()
    ttft_ax.legend(lines + bars, labels + bar_labels, loc="upper left", fontsize=8)
    ttft_ax.set_zorder(cached_ax.get_zorder() + 1)
    ttft_ax.patch.set_visible(False)
    fig.tight_layout()
    FIGURE.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIGURE, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--conversations", type=int, default=100)
    parser.add_argument("--rate", type=float, default=2.0, help="conversations per second")
    parser.add_argument("--max-turns", type=int, default=6)
    parser.add_argument("--system-prompt-len", type=int, default=400)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = {cache: run(cache, args, Path(tmp)) for cache in CACHE}
    summary = {cache: [{k: row[k] for k in ("turn", "completed", "median_ttft_ms", "cached_fraction",
                                             "mean_prompt_tokens")} for row in result["turns"]]
               for cache, result in results.items()}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"args": vars(args), "turns": summary}, indent=2) + "\n")
    draw(results)
    for cache, rows in summary.items():
        print(f"prefix cache {cache}:")
        for row in rows:
            cached = "-" if row["cached_fraction"] is None else f"{100 * row['cached_fraction']:.0f}%"
            print(f"  turn {row['turn']:>3}: n={row['completed']:>3} median TTFT {row['median_ttft_ms']:7.1f} ms, "
                  f"prompt {row['mean_prompt_tokens']:7.1f} tok, cached {cached}")
    print(f"figure: {FIGURE.relative_to(REPO)}")


if __name__ == "__main__":
    main()
