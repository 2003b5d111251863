"""A mixed workload: a locustfile with two weighted user classes (short chats beside long summaries), each
with its own goodput SLO. Records carry their class; the summary breaks every metric down by class and judges
each class against its own SLO — in the open loop (each request's class drawn by weight from the seed) and in
the closed loop (Locust's weighted users)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

LOCUSTFILE = '''
from llmload.locust import ShareGPTUser


class ShortChat(ShareGPTUser):
    weight = 3
    goodput = {"ttft": 60000}   # met by every request


class LongSummary(ShareGPTUser):
    weight = 1
    goodput = {"e2el": 0.001}   # met by none
'''


def class_section(text: str, name: str) -> str:
    m = re.search(rf"^-+{name}-+$(.*?)(?=^-+\w+-+$|^=+$)", text, re.M | re.S)
    assert m, f"no {name} section in the by-class summary:\n{text[-4000:]}"
    return m.group(1)


def count(section: str, label: str) -> float:
    m = re.search(rf"^{re.escape(label)}\s+([\d.]+)", section, re.M)
    assert m, f"no {label!r} in\n{section}"
    return float(m.group(1))


@pytest.mark.parametrize("loop", [("--arrival", "open", "--request-rate", "40"),
                                  ("--arrival", "open", "--request-rate", "40", "--processes", "2"),
                                  ("--arrival", "closed", "-u", "8", "-r", "100")],
                         ids=["open", "open-2-processes", "closed"])
@pytest.mark.slow
def test_metrics_and_goodput_by_user_class(child_runner, start_sim, tmp_path: Path, loop: tuple[str, ...]) -> None:
    sim = start_sim("--ttft-ms", "10", "--itl-ms", "2")
    locustfile = tmp_path / "mixed.py"
    locustfile.write_text(LOCUSTFILE)
    records_path = tmp_path / "records.jsonl"
    run = child_runner.locust("-f", str(locustfile), "--headless", "--host", sim.url, "-t", "120s",
                              "--num-prompts", "60", "--tokenizer", "builtin", "--sharegpt-output-len", "5",
                              *loop, "--llm-records", str(records_path), timeout=180)
    assert run.returncode == 0, run.describe()
    records = [json.loads(line) for line in records_path.read_text().splitlines() if line.strip()]
    assert len(records) == 60 and all(r["success"] for r in records), run.describe()
    by_class = {name: [r for r in records if r["user_class"] == name] for name in ("ShortChat", "LongSummary")}
    assert sum(len(v) for v in by_class.values()) == 60, {r["user_class"] for r in records}
    assert len(by_class["ShortChat"]) > len(by_class["LongSummary"]) > 0  # weights 3:1
    assert "By user class" in run.stderr, run.describe()
    for name, recs in by_class.items():
        section = class_section(run.stderr, name)
        assert count(section, "Successful requests:") == len(recs)
        assert count(section, "Total generated tokens:") == sum(r["output_tokens"] for r in recs)
    assert count(class_section(run.stderr, "ShortChat"), "Request goodput (req/s):") > 0
    assert count(class_section(run.stderr, "LongSummary"), "Request goodput (req/s):") == 0
