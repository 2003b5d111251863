"""Today's ``vllm bench serve`` flags, checked where they land: at the simulator, which records every request's
headers and body (``llmload sim --trace-requests``). Sampling flags, ``--extra-body`` (over everything, as
vLLM), ``--header``, ``--request-id-prefix``; no ``temperature`` by default and ``ignore_eos`` for the random
dataset (today's meanings), ``--vllm-compat 0.7`` for 0.7's; vLLM-internal flags refused with exit 2; the
result JSON's always-on per-request lists."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import trace_lines

pytestmark = pytest.mark.slow

BASE = ("--tokenizer", "builtin", "--num-prompts", "4", "--seed", "2", "--request-rate", "20", "--save-result",
        "--disable-tqdm", "--no-initial-test")
SHAPED = ("--temperature", "0.5", "--top-p", "0.9", "--top-k", "20", "--min-p", "0.05", "--frequency-penalty",
          "0.1", "--presence-penalty", "0.2", "--repetition-penalty", "1.1", "--logprobs", "2",
          "--extra-body", '{"temperature": 0.3, "seed": 7}', "--header", "X-Tenant=a", "X-Request-Id=mine",
          "--request-id-prefix", "bench-abc-")


@pytest.fixture
def sim(start_sim, tmp_path: Path):
    trace = tmp_path / "trace.jsonl"
    return start_sim("--ttft-ms", "5", "--itl-ms", "1", "--trace-file", trace, "--trace-requests"), trace


def requests_seen(trace: Path, since: int) -> list[dict]:
    return [line["request"] for line in trace_lines(trace)[since:]]


@pytest.mark.parametrize(("name", "extra", "check"), [
    ("defaults: no temperature, ignore_eos for random", ("--dataset-name", "random", "--random-input-len", "16",
                                                         "--random-output-len", "4"),
     lambda body, headers, rid: "temperature" not in body and body["ignore_eos"] is True
     and headers["x-request-id"] == rid),
    ("sampling, extra body over them, headers, id prefix", ("--backend", "openai-chat", *SHAPED),
     lambda body, headers, rid: body["temperature"] == 0.3 and body["seed"] == 7 and body["top_p"] == 0.9
     and body["top_k"] == 20 and body["min_p"] == 0.05 and body["frequency_penalty"] == 0.1
     and body["presence_penalty"] == 0.2 and body["repetition_penalty"] == 1.1 and body["logprobs"] == 2
     and headers["x-tenant"] == "a" and headers["x-request-id"] == "bench-abc-" + rid),
    ("--output-len: every dataset's output length (sharegpt)", ("--output-len", "6"),
     lambda body, headers, rid: body["max_tokens"] == 6),
    ("--input-len/--output-len: random's lengths", ("--dataset-name", "random", "--input-len", "24",
                                                    "--output-len", "5"),
     lambda body, headers, rid: body["max_tokens"] == 5 and body["ignore_eos"] is True),
    ("--vllm-compat 0.7: temperature 0, no forced ignore_eos", ("--dataset-name", "random", "--random-input-len",
                                                                 "16", "--random-output-len", "4", "--vllm-compat",
                                                                 "0.7"),
     lambda body, headers, rid: body["temperature"] == 0.0 and "ignore_eos" not in body),
])
def test_each_flag_reaches_the_request_as_vllm_sends_it(child_runner, sim, name: str, extra: tuple, check) -> None:
    sim, trace = sim
    before = len(trace_lines(trace)) if trace.exists() else 0
    run = child_runner.bench("--base-url", sim.url, *BASE, *extra, timeout=120)
    assert run.returncode == 0, run.describe()
    seen = requests_seen(trace, before)
    records = run.records()
    assert len(seen) == len(records) == 4, name
    by_id = {r["request_id"]: r for r in records}
    for request in seen:
        rid = request["headers"]["x-request-id"].removeprefix("bench-abc-")
        assert rid in by_id, (name, request["headers"])
        assert check(request["body"], request["headers"], rid), (name, request)
        assert "authorization" not in request["headers"]
    if "--input-len" in extra:
        # 24 tokens less the tokenizer's special ones, as vLLM's random dataset (and --random-input-len 24)
        lens = {r["prompt_len"] for r in records}
        assert len(lens) == 1 and 22 <= lens.pop() <= 24, [r["prompt_len"] for r in records]
    result = run.result()  # the per-request lists today's vLLM always writes
    assert len(result["latencies"]) == len(result["queue_times"]) == 4 and result["rtfx"] == 0.0
    assert "start_times" not in result and "ttfts" not in result


def test_save_detailed_adds_start_times(child_runner, sim) -> None:
    sim, _ = sim
    run = child_runner.bench("--base-url", sim.url, *BASE, "--save-detailed", timeout=120)
    assert run.returncode == 0, run.describe()
    result, records = run.result(), run.records()
    assert result["start_times"] == [r["start"] for r in records]
    assert result["latencies"] == pytest.approx([r["chunk_times"][-1] - r["start"] for r in records])


@pytest.mark.parametrize(("argv", "message"), [
    (("--profile",), "--profile is a vLLM-internal flag"),
    (("--plot-timeline",), "--plot-timeline is a vLLM-internal flag"),
    (("--tokenizer-mode", "mistral"), "--tokenizer-mode is a vLLM-internal flag"),
    (("--extra-body", "{nope"), "--extra-body: not JSON"),
    (("--extra-body", "[1]"), "--extra-body: expected a JSON object"),
    (("--header", "NoEquals"), "--header: expected KEY=VALUE"),
    (("--chat-template-kwargs", '{"enable_thinking": false}'), "--chat-template-kwargs: llmload applies no"),
    (("--random-batch-size", "4"), "--random-batch-size puts several prompts into one pooling request"),
    (("--skip-tokenizer-init",), "--skip-tokenizer-init works with --dataset-name custom only"),
    (("--random-range-ratio", '{"input": 0.5}'), "it must contain 'input' and 'output' keys"),
    (("--random-range-ratio", '{"input": 0.5, "output": 1.5}'), "output_range_ratio must be in [0, 1)"),
])
def test_refused_and_bad_flags_are_one_line_exit_2(child_runner, argv: tuple, message: str) -> None:
    run = child_runner.bench("--base-url", "http://127.0.0.1:9", *BASE, *argv, timeout=60)
    assert run.returncode == 2, run.describe()
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:") or ": error: " in line]
    assert len(errors) == 1 and message in errors[0], run.stderr[-1500:]
    assert "Traceback" not in run.stderr


def test_append_result_makes_a_json_lines_file(child_runner, sim, tmp_path: Path) -> None:
    sim, _ = sim
    out = tmp_path / "appended"
    for _ in range(2):
        run = child_runner.bench("--base-url", sim.url, *BASE, "--append-result", "--result-dir", out,
                                 "--result-filename", "runs.jsonl", timeout=120)
        assert run.returncode == 0, run.describe()
    lines = (out / "runs.jsonl").read_text().split("\n")
    assert len(lines) == 2 and all(json.loads(line)["completed"] == 4 for line in lines)


def test_the_contract_vllm_bench_sweep_serve_relies_on(child_runner, sim, tmp_path: Path) -> None:
    """``vllm bench sweep serve --bench-cmd 'llmload bench ...'`` appends exactly these four flags, runs the command
    with check=True (exit 0 expected) and reads the file back as one JSON object (docs/vllm-compat.md)."""
    sim, _ = sim
    out = tmp_path / "exp" / "SERVE--a-BENCH--b"
    run = child_runner.bench("--base-url", sim.url, *BASE, "--percentile-metrics", "ttft,tpot,itl,e2el",
                             "--save-result", "--result-dir", out, "--result-filename", "run=0.json", timeout=120)
    assert run.returncode == 0, run.describe()
    data = json.loads((out / "run=0.json").read_text())  # one object, standard JSON
    assert isinstance(data, dict) and data["completed"] == 4
    for key in ("request_throughput", "output_throughput", "max_concurrency", "median_ttft_ms", "p99_tpot_ms",
                "mean_itl_ms", "median_e2el_ms", "latencies", "queue_times"):
        assert key in data, key


def test_a_short_dataset_is_oversampled_unless_told_not(child_runner, sim, tmp_path: Path) -> None:
    sim, _ = sim
    rows = tmp_path / "three.jsonl"
    rows.write_text("".join(json.dumps({"prompt": f"tell me about the number {i}", "output_len": 3}) + "\n"
                            for i in range(3)))
    args = ("--base-url", sim.url, *BASE, "--dataset-name", "custom", "--dataset-path", rows)
    filled = child_runner.bench(*args, "--num-prompts", "5", "--skip-tokenizer-init", timeout=120)
    assert filled.returncode == 0, filled.describe()
    records = filled.records()
    assert len(records) == 5 and len({r["request_id"] for r in records}) == 5
    assert "repeats drawn by --seed fill --num-prompts 5" in filled.stderr
    assert filled.result()["tokenizer_id"] == "builtin"  # --skip-tokenizer-init counts with the builtin one
    kept = child_runner.bench(*args, "--num-prompts", "5", "--no-oversample", timeout=120)
    assert kept.returncode == 0, kept.describe()
    assert len(kept.records()) == 3 and "fewer than --num-prompts 5" in kept.stderr


def test_vllm_s_other_datasets_reach_the_server(child_runner, sim, tmp_path: Path) -> None:
    sim, trace = sim
    question = tmp_path / "question.jsonl"
    question.write_text("".join(json.dumps({"question_id": i, "category": "qa", "turns": [f"what is {i}?"]}) + "\n"
                                for i in range(4)))
    local_hf = tmp_path / "hf" / "train.jsonl"
    local_hf.parent.mkdir()
    local_hf.write_text("".join(json.dumps({"question": f"why {i}?"}) + "\n" for i in range(4)))
    burst = tmp_path / "burst.csv"
    burst.write_text("Timestamp,Model,Request tokens,Response tokens\n1,GPT-4,20,5\n2,GPT-4,30,6\n")
    for extra, max_tokens in ((("--dataset-name", "spec_bench", "--dataset-path", question, "--output-len", "7"),
                               {7}),
                              (("--dataset-name", "burstgpt", "--dataset-path", burst), {5, 6}),
                              (("--dataset-name", "hf", "--dataset-path", local_hf.parent, "--hf-output-len", "3"),
                               {3}),
                              (("--dataset-name", "sonnet", "--sonnet-input-len", "100", "--sonnet-prefix-len",
                                "30", "--sonnet-output-len", "4"), {4})):
        before = len(trace_lines(trace)) if trace.exists() else 0
        run = child_runner.bench("--base-url", sim.url, *BASE, *extra, timeout=120)
        assert run.returncode == 0, run.describe()
        seen = requests_seen(trace, before)
        assert len(seen) == 4 and {r["body"]["max_tokens"] for r in seen} <= max_tokens, seen
    missing = child_runner.bench("--base-url", sim.url, *BASE, "--dataset-name", "burstgpt", timeout=60)
    assert missing.returncode == 2 and "needs --dataset-path pointing at a BurstGPT CSV" in missing.stderr
