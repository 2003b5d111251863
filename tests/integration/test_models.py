"""Several models and LoRA adapters in one run, against the simulator serving them: the weighted mix follows
its weights, every record names its model (and the server saw that model), ``by_model`` adds up to the run,
the same seed gives the same assignment with ``--processes 2`` and with ``locust -f``; and an adapter swap costs
what the simulator says, so a mix over more adapters than fit is slower than one adapter.
"""

from __future__ import annotations

import json
import math
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
from support import trace_lines

pytestmark = pytest.mark.slow

ADAPTERS = ("alpha", "beta", "gamma")
WEIGHTS = (5, 3, 2)
PROMPTS = 60
WORKLOAD = ("--tokenizer", "builtin", "--num-prompts", str(PROMPTS), "--seed", "9", "--sharegpt-output-len", "8",
            "--ignore-eos", "--request-rate", "40")
MIX = ("--model", ",".join(ADAPTERS), "--model-selection", "weighted", "--model-weights",
       ",".join(map(str, WEIGHTS)))


def test_a_weighted_three_adapter_mix(child_runner, start_sim, tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    sim = start_sim("--ttft-ms", "10", "--itl-ms", "2", "--lora-modules", ",".join(ADAPTERS), "--max-loras", "3",
                    "--trace-file", trace)
    with urllib.request.urlopen(f"{sim.url}/v1/models", timeout=10) as resp:
        listed = {m["id"]: m["parent"] for m in json.loads(resp.read())["data"]}
    assert listed == {"llmload-sim": None, **dict.fromkeys(ADAPTERS, "llmload-sim")}
    runs = {}
    for name, extra in (("one", ()), ("two", ("--processes", "2"))):
        run = child_runner.bench("--base-url", sim.url, *WORKLOAD, *MIX, *extra, "--save-result", "--disable-tqdm",
                                 timeout=180)
        assert run.returncode == 0, run.describe()
        runs[name] = (run.result(), run.records())
        paths = run.result_path()
    served = Counter(t["model"] for t in trace_lines(trace) if t["client_id"].startswith(("synth", "r")))
    for name, (result, records) in runs.items():
        counts = Counter(r["model"] for r in records)
        assert set(counts) == set(ADAPTERS) and sum(counts.values()) == PROMPTS, (name, counts)
        for adapter, weight in zip(ADAPTERS, WEIGHTS, strict=True):
            p = weight / sum(WEIGHTS)
            assert abs(counts[adapter] - p * PROMPTS) <= 4 * math.sqrt(PROMPTS * p * (1 - p)), (name, counts)
        by_model = result["by_model"]
        assert {m: v["completed"] for m, v in by_model.items()} == dict(counts), (name, by_model)
        assert sum(v["total_output_tokens"] for v in by_model.values()) == result["total_output_tokens"]
    # the same requests named the same adapters in one process and in two
    assignment = {name: {r["request_id"]: r["model"] for r in records} for name, (_, records) in runs.items()}
    assert sorted(assignment["one"].values()) == sorted(assignment["two"].values())
    assert Counter(assignment["one"].values()) == Counter(assignment["two"].values())
    # and the server received each request under the name its record gives (the probes named the first)
    assert sum(served.values()) >= 2 * PROMPTS and set(served) >= set(ADAPTERS)
    # llmload report shows the same per-model numbers, from the records alone
    from llmload.report.loader import load_run
    from llmload.report.parts import model_tables_markdown
    from llmload.report.stats import RunStats

    table = model_tables_markdown([RunStats(load_run(paths))])
    rows = {line.split("|")[1].strip(): int(line.split("|")[2]) for line in table if line.startswith("| ")
            and line.split("|")[1].strip() in ADAPTERS}
    assert table[0] == "## Per model" and rows == {m: v["completed"] for m, v in runs["two"][0]["by_model"].items()}


def test_locust_names_the_same_adapters_round_robin(child_runner, start_sim, tmp_path: Path) -> None:
    sim = start_sim("--ttft-ms", "10", "--itl-ms", "2", "--lora-modules", ",".join(ADAPTERS))
    records_path = tmp_path / "records.jsonl"
    run = child_runner.locust("-f", "locustfiles/sharegpt.py", "--headless", "--host", sim.url, "-t", "60s",
                              *WORKLOAD, "--arrival", "open", "--lora-modules", *ADAPTERS, "--lora-assignment",
                              "round-robin", "--llm-records", str(records_path), timeout=120)
    assert run.returncode == 0, run.describe()
    records = [json.loads(line) for line in records_path.read_text().splitlines() if line.strip()]
    assert len(records) == PROMPTS and all(r["success"] for r in records)
    bench = child_runner.bench("--base-url", sim.url, *WORKLOAD, "--lora-modules", *ADAPTERS, "--lora-assignment",
                               "round-robin", "--save-result", "--disable-tqdm", timeout=180)
    assert bench.returncode == 0, bench.describe()
    assert ({r["request_id"]: r["model"] for r in records}
            == {r["request_id"]: r["model"] for r in bench.records()})
    assert Counter(r["model"] for r in records) == dict.fromkeys(ADAPTERS, PROMPTS // 3)


def test_more_adapters_than_fit_pay_a_load_on_every_swap(child_runner, start_sim, tmp_path: Path) -> None:
    load_s = 0.2
    trace = tmp_path / "trace.jsonl"
    sim = start_sim("--ttft-ms", "10", "--itl-ms", "2", "--lora-modules", ",".join(ADAPTERS), "--max-loras", "1",
                    "--lora-load-ms", str(load_s * 1000), "--trace-file", trace)
    ttfts = {}
    for name, adapters in (("mix", ADAPTERS), ("one", ADAPTERS[:1])):
        run = child_runner.bench("--base-url", sim.url, "--tokenizer", "builtin", "--num-prompts", "9", "--seed", "9",
                                 "--sharegpt-output-len", "4", "--ignore-eos", "--max-concurrency", "1",
                                 "--lora-modules", *adapters, "--lora-assignment", "round-robin", "--no-initial-test",
                                 "--save-result", "--disable-tqdm", timeout=180)
        assert run.returncode == 0, run.describe()
        ttfts[name] = [r["first_token"] - r["start"] for r in run.records()]
    loads = [t["lora_load_s"] for t in trace_lines(trace)]
    # one at a time over three adapters with one slot: every request swaps its adapter in, and waits for it;
    # over one adapter only the first request of the run (its adapter was gamma's slot before) loads
    assert loads[:9] == [load_s] * 9 and loads[9:] == [load_s] + [0.0] * 8, loads
    assert min(ttfts["mix"]) >= load_s and sorted(ttfts["one"])[-2] < load_s, ttfts
    stats = json.loads(urllib.request.urlopen(f"{sim.url}/sim/stats", timeout=10).read())
    assert stats["lora"] == {"loads": 10, "loaded": [ADAPTERS[0]], "max_loras": 1}, stats["lora"]
    # and its /metrics says so the way vLLM does, which a Prometheus parser reads
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"{sim.url}/metrics", timeout=10).read().decode()
    info = [s for f in text_string_to_metric_families(text) for s in f.samples if s.name == "vllm:lora_requests_info"]
    assert [s.labels for s in info] == [{"max_lora": "1", "running_lora_adapters": ADAPTERS[0],
                                         "waiting_lora_adapters": ""}], info  # fixed timing: the loaded one

    # the batching engine, many at a time over three adapters with one slot: as in vLLM, the batch never runs
    # two adapters at once (a request for another adapter waits until the running adapter's requests finish)
    trace = tmp_path / "engine.jsonl"
    sim = start_sim("--lora-modules", ",".join(ADAPTERS), "--max-loras", "1", "--lora-load-ms", "20",
                    "--trace-file", trace)
    run = child_runner.bench("--base-url", sim.url, "--tokenizer", "builtin", "--num-prompts", "12", "--seed", "9",
                             "--sharegpt-output-len", "4", "--ignore-eos", "--max-concurrency", "6",
                             "--lora-modules", *ADAPTERS, "--lora-assignment", "round-robin", "--no-initial-test",
                             "--save-result", "--disable-tqdm", timeout=180)
    assert run.returncode == 0 and run.result()["completed"] == 12, run.describe()
    spans = [(t["admitted"], t["ended"], t["model"]) for t in trace_lines(trace)]
    assert len(spans) == 12 and all(a is not None for a, _, _ in spans)
    # (admission is on the engine's step clock, which may trail the sending clock of "ended" by up to 50 ms)
    overlap = [(m0 == m1, min(e0, e1) - max(a0, a1)) for i, (a0, e0, m0) in enumerate(spans)
               for a1, e1, m1 in spans[i + 1:]]
    assert all(same or during < 0.05 for same, during in overlap), sorted(overlap)[-3:]
    assert any(same and during > 0.05 for same, during in overlap)  # one adapter's requests did run together
