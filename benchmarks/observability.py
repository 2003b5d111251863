"""The figure of docs/observability.md: the study's setting (500 ShareGPT prompts at unlimited rate) against the
built-in simulator's stall profile, its /metrics scraped every 0.25 s, then ``llmload report``'s "Server and client
over time". Simulated, not a real engine.

    python benchmarks/observability.py
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIGURE = REPO / "docs" / "figures" / "observability-stall-server.png"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        bench = [sys.executable, "-m", "llmload.cli", "bench", "--sim-args", "--profile l40-qwen3-8b-stall",
                 "--num-prompts", "500", "--seed", "1", "--server-metrics-interval", "0.25", "--save-result",
                 "--result-dir", str(run), "--result-filename", "stall.json", "--disable-tqdm"]
        subprocess.run(bench, check=True, cwd=REPO)
        report = [sys.executable, "-m", "llmload.cli", "report", str(run / "stall.json"), "--output",
                  str(Path(tmp) / "report")]
        subprocess.run(report, check=True, cwd=REPO)
        FIGURE.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(tmp) / "report" / "server.png", FIGURE)
    print(f"figure: {FIGURE.relative_to(REPO)}")


if __name__ == "__main__":
    main()
