"""llmload bench prints vLLM's summary block and writes vLLM's result JSON, consistent with its records file."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
from support import json_type

RULE = "=" * 50
HEADING = "============ Serving Benchmark Result ============"


def section(title: str) -> str:
    """vLLM's section rule: the title centred in 50 dashes."""
    return "{s:{c}^{n}}".format(s=title, c="-", n=50)


def pword(p: float) -> str:
    """vLLM's percentile word: 99.0 -> "99", 99.9 -> "99.9"."""
    return str(int(p)) if int(p) == p else str(p)


#: today's vllm bench serve result block, in print order: (label, shown only when)
VLLM_HEAD_LABELS = [
    ("Successful requests:", None),
    ("Failed requests:", None),
    ("Maximum request concurrency:", "max_concurrency"),
    ("Request rate configured (RPS):", "finite_rate"),
    ("Benchmark duration (s):", None),
    ("Total input tokens:", None),
    ("Total generated tokens:", None),
    ("Request throughput (req/s):", None),
    ("Request goodput (req/s):", "goodput"),
    ("Output token throughput (tok/s):", None),
    ("Peak output token throughput (tok/s):", None),
    ("Peak concurrent requests:", None),
    ("Total token throughput (tok/s):", None),
]
#: metric -> (name in lines, section title), vLLM's order
VLLM_SECTIONS = {
    "ttft": ("TTFT", "Time to First Token"),
    "tpot": ("TPOT", "Time per Output Token (excl. 1st token)"),
    "itl": ("ITL", "Inter-token Latency"),
    "e2el": ("E2EL", "End-to-end Latency"),
}
#: a result written the way vLLM's benchmark_serving.py --save-result --save-detailed writes it (tests/data/README.md)
VLLM_FIXTURE = Path(__file__).resolve().parents[1] / "data" / "vllm_benchmark_serving_result.json"
VLLM_DETAILED_KEYS = ["input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors"]
_STAT_KEY = re.compile(r"(mean|median|std|p\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el)_ms")


def vllm_result() -> dict:
    return json.loads(VLLM_FIXTURE.read_text())


#: vLLM's keys present in every run (the per-request lists only with --save-detailed, the statistics per
#: --percentile-metrics / --metric-percentiles)
VLLM_KEYS = [k for k in vllm_result() if k not in VLLM_DETAILED_KEYS and not _STAT_KEY.fullmatch(k)]
#: newer vLLM (``vllm bench serve``): the backend is also ``endpoint_type``, and the peak output rate
VLLM_KEYS_NEW = ["endpoint_type", "max_output_tokens_per_s", "max_concurrent_requests"]


def expected_lines(*, metrics: list[str], percentiles: list[float], goodput: bool, max_concurrency: bool,
                   finite_rate: bool = False) -> list[str]:
    shown = {"goodput": goodput, "max_concurrency": max_concurrency, "finite_rate": finite_rate}
    lines = [HEADING] + [label for label, when in VLLM_HEAD_LABELS if when is None or shown[when]]
    for key in ("ttft", "tpot", "itl", "e2el"):
        if key in metrics:
            name, title = VLLM_SECTIONS[key]
            lines += [section(title), f"Mean {name} (ms):", f"Median {name} (ms):"]
            lines += [f"P{pword(p)} {name} (ms):" for p in percentiles]
    return [*lines, RULE]


def vllm_block(stdout: str) -> list[str]:
    """The lines of the ``Serving Benchmark Result`` block, heading and closing rule included."""
    lines = stdout.splitlines()
    assert lines.count(HEADING) == 1, f"expected one {HEADING!r} line in:\n{stdout}"
    start = lines.index(HEADING)
    end = lines.index(RULE, start)
    return lines[start:end + 1]


def block_labels(block: list[str]) -> tuple[list[str], dict[str, str]]:
    """Labels (rules kept whole) in order, and label -> printed value; checks vLLM's ``{:<40} {:<10}``."""
    labels, values = [], {}
    for line in block:
        if line in (HEADING, RULE) or re.fullmatch(r"-+[^-].*[^-]-+", line):
            labels.append(line)
            continue
        label, value = line[:40].rstrip(), line[41:]
        assert line[:40] == label.ljust(40) and line[40] == " ", f"label not left-justified in 40: {line!r}"
        assert len(value) >= 10 and value == value.strip().ljust(len(value)), f"value not {{:<10}}: {line!r}"
        labels.append(label)
        values[label] = value.strip()
    return labels, values


def dist(values_s: list[float], percentiles: list[float]) -> dict[str, float]:
    """numpy statistics in ms the way docs/design.md "Metric definitions" defines them (empty list -> 0)."""
    a = np.asarray(values_s, dtype=float) * 1000.0 if values_s else np.zeros(1)
    out = {"mean": float(np.mean(a)), "median": float(np.median(a)), "std": float(np.std(a))}
    for p in percentiles:
        out[f"p{pword(p)}"] = float(np.percentile(a, p))
    return out


def recompute(records: list[dict], duration: float, percentiles: list[float],
              slos_ms: dict[str, float] | None = None) -> dict[str, float]:
    """Every reported number, from the raw records alone (docs/design.md "Metric definitions")."""
    done = [r for r in records if r["success"] and not r["cut_off"]]
    ttfts = [r["first_token"] - r["start"] for r in done]
    e2els = [r["chunk_times"][-1] - r["start"] for r in done]
    itls = [float(g) for r in done for g in np.diff(r["chunk_times"])]
    tpots = [(r["chunk_times"][-1] - r["first_token"]) / (r["output_tokens"] - 1) for r in done
             if r["output_tokens"] > 1]
    # vLLM's total_input_tokens: the client-side (dataset) prompt lengths, whatever the server's usage says
    total_in = sum(r["prompt_len"] for r in done)
    total_out = sum(r["output_tokens"] for r in done)
    out: dict[str, float] = {
        "completed": len(done),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": len(done) / duration,
        "output_throughput": total_out / duration,
        "total_token_throughput": (total_in + total_out) / duration,
    }
    for name, values in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2el", e2els)):
        for stat, v in dist(values, percentiles).items():
            out[f"{stat}_{name}_ms"] = v
    if slos_ms:
        good = 0
        for r in done:
            ttft = r["first_token"] - r["start"]
            e2el = r["chunk_times"][-1] - r["start"]
            tpot = (e2el - ttft) / (r["output_tokens"] - 1) if r["output_tokens"] > 1 else 0.0
            value = {"ttft": ttft, "tpot": tpot, "e2el": e2el}
            good += all(value[k] * 1000.0 <= slo for k, slo in slos_ms.items())
        out["request_goodput"] = good / duration
        out["_good"] = good
    return out


def vllm_schedule(n: int, rate: float, burstiness: float, seed: int) -> np.ndarray:
    """vLLM's get_request(): np.random.seed(seed), one gamma draw per request, cumulative, rescaled so the
    last send lands at n / rate (docs/design.md "Schedule"). Written out here as the reference."""
    state = np.random.get_state()
    try:
        np.random.seed(seed)
        delays = []
        for _ in range(n):
            theta = 1.0 / (rate * burstiness)
            delays.append(np.random.gamma(shape=burstiness, scale=theta))
    finally:
        np.random.set_state(state)
    for i in range(1, n):
        delays[i] += delays[i - 1]
    factor = (n / rate) / delays[-1]
    return np.array([d * factor for d in delays])


# -- runs -----------------------------------------------------------------------------------------------------

MAIN_PERCENTILES = [50.0, 90.0, 99.9]
MAIN_SLOS = {"ttft": 10.0, "tpot": 4.0}
MAIN_PROMPTS = 24


@pytest.fixture(scope="module")
def sim(start_sim_module):
    return start_sim_module("--profile", "tiny", "--tokenizer", "builtin")


@pytest.fixture(scope="module")
def main_run(child_runner_module, sim):
    """Every vLLM option that changes the block or the JSON: goodput, concurrency, e2el, custom percentiles."""
    run = child_runner_module.bench(
        "--base-url", sim.url, "--tokenizer", "builtin", "--num-prompts", MAIN_PROMPTS, "--max-concurrency", "8",
        "--goodput", *(f"{k}:{v:g}" for k, v in MAIN_SLOS.items()), "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", ",".join(f"{p:g}" for p in MAIN_PERCENTILES), "--save-result", "--save-detailed",
        "--gpus", "2", "--gpu-type", "L40S", "--gpu-hour-cost", "1.5",
    )
    assert run.returncode == 0, run.describe()
    return run


@pytest.fixture(scope="module")
def default_run(child_runner_module, sim):
    """No optional flags: no goodput, no concurrency line, default metrics and percentiles."""
    run = child_runner_module.bench("--base-url", sim.url, "--tokenizer", "builtin", "--num-prompts", "10",
                                    "--save-result")
    assert run.returncode == 0, run.describe()
    return run


@pytest.fixture(scope="module")
def vllm_like_run(child_runner_module, sim):
    """The options the vLLM fixture was written with: 12 prompts, 4 at a time, infinite rate, no goodput,
    --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 90,99, --save-detailed."""
    theirs = vllm_result()
    run = child_runner_module.bench(
        "--base-url", sim.url, "--tokenizer", "builtin", "--num-prompts", theirs["num_prompts"],
        "--max-concurrency", theirs["max_concurrency"], "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", "90,99", "--save-result", "--save-detailed",
    )
    assert run.returncode == 0, run.describe()
    return run


# -- the summary block ----------------------------------------------------------------------------------------

@pytest.mark.slow
def test_summary_labels_all_options(main_run) -> None:
    labels, _ = block_labels(vllm_block(main_run.stdout))
    want = expected_lines(metrics=["ttft", "tpot", "itl", "e2el"], percentiles=MAIN_PERCENTILES, goodput=True,
                          max_concurrency=True)
    assert labels == want


@pytest.mark.slow
def test_summary_labels_defaults(default_run) -> None:
    labels, _ = block_labels(vllm_block(default_run.stdout))
    assert labels == expected_lines(metrics=["ttft", "tpot", "itl"], percentiles=[99.0], goodput=False,
                                    max_concurrency=False)


def test_summary_values_are_the_json_values(main_run) -> None:
    _, shown = block_labels(vllm_block(main_run.stdout))
    data = main_run.result()
    ints = {"Successful requests:": "completed", "Total input tokens:": "total_input_tokens",
            "Total generated tokens:": "total_output_tokens", "Maximum request concurrency:": "max_concurrency"}
    for label, key in ints.items():
        assert shown[label] == str(data[key]), label
    floats = {"Benchmark duration (s):": "duration", "Request throughput (req/s):": "request_throughput",
              "Request goodput (req/s):": "request_goodput", "Output token throughput (tok/s):": "output_throughput",
              "Total token throughput (tok/s):": "total_token_throughput"}
    for key, (name, _) in VLLM_SECTIONS.items():
        floats[f"Mean {name} (ms):"] = f"mean_{key}_ms"
        floats[f"Median {name} (ms):"] = f"median_{key}_ms"
        for p in MAIN_PERCENTILES:
            floats[f"P{pword(p)} {name} (ms):"] = f"p{pword(p)}_{key}_ms"
    for label, key in floats.items():
        assert shown[label] == f"{data[key]:.2f}", f"{label} printed {shown[label]}, JSON {key}={data[key]}"


# -- the result JSON ------------------------------------------------------------------------------------------

def test_json_keys_all_options(main_run) -> None:
    data = main_run.result()
    missing = [k for k in VLLM_KEYS + VLLM_KEYS_NEW + VLLM_DETAILED_KEYS if k not in data]
    for key in ("ttft", "tpot", "itl", "e2el"):
        for stat in ["mean", "median", "std", *(f"p{pword(p)}" for p in MAIN_PERCENTILES)]:
            if f"{stat}_{key}_ms" not in data:
                missing.append(f"{stat}_{key}_ms")
    assert not missing, f"missing vLLM keys: {missing}"
    assert "p99_ttft_ms" not in data, "p99 was not asked for (--metric-percentiles 50,90,99.9)"
    assert data["num_prompts"] == MAIN_PROMPTS
    assert data["max_concurrency"] == 8
    assert data["request_rate"] == "inf", "vLLM writes an infinite rate as the string 'inf'"
    assert data["backend"] == data["endpoint_type"] == "vllm"
    assert data["tokenizer_id"] == "builtin"
    assert data["burstiness"] == 1.0
    # two GPUs at $1.50 an hour: the cost of a million output tokens at the run's own output rate
    assert data["gpus"] == 2 and data["gpu_type"] == "L40S" and data["gpu_hour_cost"] == 1.5
    assert data["output_throughput_per_gpu"] == pytest.approx(data["output_throughput"] / 2)
    assert data["cost_per_million_output_tokens"] == pytest.approx(2 * 1.5 / (data["output_throughput"] * 3600) * 1e6)
    assert "Cost per 1M output tokens (USD):" in main_run.stdout


@pytest.mark.slow
def test_json_has_vllm_keys_with_vllm_types(vllm_like_run) -> None:
    """Every key of a real vLLM --save-result --save-detailed file, with the same JSON type (lists: the same
    item types), in ours from the same options; an infinite rate as the string "inf", as vLLM writes it."""
    theirs = vllm_result()
    ours = vllm_like_run.result()
    missing = sorted(set(theirs) - set(ours))
    assert not missing, f"vLLM keys missing from our result JSON: {missing}"
    wrong = {k: {"ours": json_type(ours[k]), "vllm": json_type(v)} for k, v in theirs.items()
             if json_type(ours[k]) != json_type(v)}
    assert not wrong, f"keys with another JSON type than vLLM's: {wrong}"
    assert ours["request_rate"] == theirs["request_rate"] == "inf"
    assert ours["request_goodput"] is None and ours["max_concurrency"] == theirs["max_concurrency"]
    assert len(ours["ttfts"]) == len(ours["itls"]) == ours["num_prompts"] == theirs["num_prompts"]


def test_json_keys_defaults(default_run) -> None:
    data = default_run.result()
    missing = [k for k in VLLM_KEYS + VLLM_KEYS_NEW if k not in data]
    for key in ("ttft", "tpot", "itl"):
        missing += [f"{s}_{key}_ms" for s in ("mean", "median", "std", "p99") if f"{s}_{key}_ms" not in data]
    assert not missing, f"missing vLLM keys: {missing}"
    assert data["request_goodput"] is None, "vLLM writes null goodput without --goodput"
    assert data["max_concurrency"] is None
    assert not [k for k in data if k.endswith("_e2el_ms")], "e2el was not in --percentile-metrics"
    assert not [k for k in VLLM_DETAILED_KEYS if k in data], "per-request lists only with --save-detailed"


def test_json_values_recomputed_from_records(main_run) -> None:
    data = main_run.result()
    records = main_run.records()
    assert len(records) == MAIN_PROMPTS
    assert all(r["success"] for r in records), [r["error"] for r in records if not r["success"]]
    span = max(r["chunk_times"][-1] for r in records) - min(r["start"] for r in records)
    duration = data["duration"]
    # the run ends after its last request (and before the records file is written): at least the span
    assert span - 1e-6 <= duration <= span + 5.0, f"duration {duration} s vs records spanning {span} s"
    want = recompute(records, duration, MAIN_PERCENTILES, MAIN_SLOS)
    want.pop("_good")  # how many met the SLOs: any number is fine here
    for key, value in want.items():
        assert data[key] == pytest.approx(value, rel=1e-9, abs=1e-9), key
    # the server's own prompt-token count sits beside vLLM's (the dataset's), with their difference
    server = [r["prompt_len"] if r["server_prompt_tokens"] is None else r["server_prompt_tokens"] for r in records]
    if any(r["server_prompt_tokens"] is not None for r in records):
        assert data["total_input_tokens_server"] == sum(server)
        assert data["prompt_tokens_server_minus_dataset"] == sum(server) - data["total_input_tokens"]
    else:
        assert data["total_input_tokens_server"] is None


def test_json_defaults_recomputed_from_records(default_run) -> None:
    data = default_run.result()
    want = recompute(default_run.records(), data["duration"], [99.0])
    for key in list(want):
        if key.endswith("_e2el_ms"):
            del want[key]
    for key, value in want.items():
        assert data[key] == pytest.approx(value, rel=1e-9, abs=1e-9), key


def test_detailed_lists_match_records(main_run) -> None:
    data = main_run.result()
    records = main_run.records()
    n = data["num_prompts"]
    for key in VLLM_DETAILED_KEYS:
        assert len(data[key]) == n, key
    assert sum(data["output_lens"]) == data["total_output_tokens"]
    assert sorted(data["output_lens"]) == sorted(r["output_tokens"] for r in records)
    assert sorted(data["input_lens"]) == sorted(r["prompt_len"] for r in records)  # the dataset's, as vLLM
    assert sorted(data["ttfts"]) == pytest.approx(sorted(r["first_token"] - r["start"] for r in records))
    pooled = sorted(g for itls in data["itls"] for g in itls)
    assert pooled == pytest.approx(sorted(float(g) for r in records for g in np.diff(r["chunk_times"])))
    assert all(isinstance(t, str) and t for t in data["generated_texts"])
    assert data["errors"] == [""] * n


def test_default_result_filename(default_run, main_run) -> None:
    for run, concurrency in ((default_run, ""), (main_run, "-concurrency8")):
        data = run.result()
        model = data["model_id"].split("/")[-1]
        name = run.result_path().name
        m = re.fullmatch(rf"vllm-infqps{concurrency}-{re.escape(model)}-(\d{{8}}-\d{{6}})\.json", name)
        assert m, f"{name!r} is not vLLM's default file name"
        assert m.group(1) == data["date"]
        datetime.strptime(m.group(1), "%Y%m%d-%H%M%S")
        assert run.records_path().exists()


# -- open-loop arrivals ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("burstiness", "seed"), [(1.0, 7), (0.5, 3)])
@pytest.mark.slow
def test_request_rate_follows_vllm_schedule(child_runner, sim, burstiness: float, seed: int) -> None:
    n, rate = 20, 20.0
    run = child_runner.bench("--base-url", sim.url, "--tokenizer", "builtin", "--num-prompts", n, "--seed", seed,
                             "--request-rate", f"{rate:g}", "--burstiness", f"{burstiness:g}",
                             "--sharegpt-output-len", "8", "--save-result", "--result-filename", "rate.json")
    assert run.returncode == 0, run.describe()
    records = run.records()
    assert len(records) == n
    data = run.result()
    assert data["request_rate"] == rate and data["burstiness"] == burstiness
    intended = np.sort(np.array([r["intended_send"] for r in records], dtype=float))
    want = vllm_schedule(n, rate, burstiness, seed)
    # the run's clock origin is unknown: the first request is sent d0 after it
    got = intended - intended[0] + want[0]
    assert np.max(np.abs(got - want)) < 0.003, f"intended offsets {got} vs vLLM's {want}"
    # and the requests really went out on that schedule (open loop: never early, never far behind)
    sent = np.array([r["start"] - r["intended_send"] for r in records])
    assert sent.min() > -0.001, f"a request was sent {-sent.min() * 1000:.2f} ms early"
    # behind schedule by a busy machine's scheduling, not by a closed loop (which lags by whole requests)
    assert np.median(sent) < 0.1, f"median send lag {np.median(sent) * 1000:.2f} ms"
