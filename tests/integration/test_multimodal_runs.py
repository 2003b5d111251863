"""Images and pooling end to end: ``llmload bench`` against the simulator, which records every request's body
(``--trace-requests``). vLLM's command lines for a VLM benchmark and for embeddings and rerank run unchanged;
image counts follow the flags; the server's prompt tokens exceed the text's by exactly the images' tokens; every
pooling backend gives E2E percentiles and no TTFT; a custom dataset's local images arrive byte for byte; bad input
is one line and exit 2 before the first request (docs/multimodal.md)."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pytest
from PIL import Image
from support import trace_lines

from llmload.sim.images import image_tokens

pytestmark = pytest.mark.slow

VLM = "Qwen/Qwen2.5-VL-3B-Instruct"
#: vLLM's documented random-mm benchmark (docs/benchmarking, "Synthetic multimodal"), word for word after the binary
VLLM_MM_COMMAND = ("--backend", "openai-chat", "--model", VLM, "--endpoint", "/v1/chat/completions",
                   "--dataset-name", "random-mm", "--num-prompts", "30", "--max-concurrency", "10",
                   "--random-prefix-len", "25", "--random-input-len", "300", "--random-output-len", "40",
                   "--random-range-ratio", "0.2", "--random-mm-base-items-per-request", "2",
                   "--random-mm-num-mm-items-range-ratio", "0.5",
                   "--random-mm-limit-mm-per-prompt", '{"image": 3, "video": 0}',
                   "--random-mm-bucket-config", "{(224, 224, 1): 0.5, (336, 280, 1): 0.5, (720, 1280, 16): 0.0}",
                   "--request-rate", "inf", "--ignore-eos", "--seed", "42")


@pytest.fixture
def sim(start_sim, tmp_path: Path):
    trace = tmp_path / "trace.jsonl"
    return start_sim("--ttft-ms", "5", "--itl-ms", "1", "--model", f"{VLM},BAAI/bge-m3",
                     "--trace-file", trace, "--trace-requests"), trace


def image_parts(body: dict) -> list[bytes]:
    parts = [p for m in body["messages"] if isinstance(m["content"], list) for p in m["content"]]
    return [base64.b64decode(p["image_url"]["url"].split(",", 1)[1]) for p in parts if p["type"] == "image_url"]


def test_vllm_s_vlm_command_line_runs_and_images_follow_the_flags(child_runner, sim) -> None:
    sim, trace = sim
    run = child_runner.bench("--base-url", sim.url, *VLLM_MM_COMMAND, "--save-result", timeout=180)
    assert run.returncode == 0, run.describe()
    result, records = run.result(), run.records()
    assert result["completed"] == 30 and result["failed"] == 0
    counts = [r["images"] for r in records]
    assert set(counts) <= {1, 2, 3} and len(set(counts)) > 1  # [floor(2 * 0.5), min(3, ceil(2 * 1.5))]
    assert result["total_images"] == sum(counts)
    bodies = {line["request"]["headers"]["x-request-id"]: line["request"]["body"] for line in trace_lines(trace)
              if line["request"]["body"].get("model") == VLM}
    sizes = set()
    for r in records:
        sent = image_parts(bodies[r["request_id"]])
        assert len(sent) == r["images"]
        assert r["image_bytes"] == sum(len(base64.b64encode(raw)) + len("data:image/jpeg;base64,") for raw in sent)
        sizes |= {Image.open(io.BytesIO(raw)).size for raw in sent}  # (width, height)
        # the server counted the text, then each image's Qwen2-VL tokens
        assert r["server_prompt_tokens"] > sum(image_tokens(*Image.open(io.BytesIO(raw)).size) for raw in sent)
        assert r["send_s"] is not None and r["send_s"] >= 0
    assert sizes == {(224, 224), (280, 336)}
    assert result["total_input_tokens"] > result["total_input_tokens_dataset"]  # the server's count has the images


def test_server_prompt_tokens_exceed_the_text_s_by_the_images_tokens(child_runner, sim) -> None:
    sim, _ = sim
    common = ("--base-url", sim.url, "--backend", "openai-chat", "--model", VLM, "--num-prompts", "12",
              "--random-input-len", "48", "--random-output-len", "4", "--seed", "5", "--request-rate", "50",
              "--save-result", "--no-initial-test")
    text = child_runner.bench(*common, "--dataset-name", "random", timeout=120)
    images = child_runner.bench(*common, "--dataset-name", "random-mm", "--random-mm-base-items-per-request", "2",
                                "--random-mm-bucket-config", "{(224, 224, 1): 1.0}", timeout=120)
    assert text.returncode == 0, text.describe()
    assert images.returncode == 0, images.describe()
    plain = {r["request_id"].removeprefix("random-"): r for r in text.records()}
    with_images = {r["request_id"].removeprefix("random-mm-"): r for r in images.records()}
    assert plain.keys() == with_images.keys() and len(plain) == 12
    per_image = image_tokens(224, 224)
    assert per_image == 64  # Qwen2-VL: 224 / 28 = 8 patches a side
    for i, r in with_images.items():
        assert r["prompt_len"] == plain[i]["prompt_len"]  # the same text
        assert r["server_prompt_tokens"] - plain[i]["server_prompt_tokens"] == 2 * per_image
    assert images.result()["total_input_tokens"] - text.result()["total_input_tokens"] == 12 * 2 * per_image


@pytest.mark.parametrize(("backend", "endpoint", "dataset", "requests", "sequences"), [
    ("openai-embeddings", "/v1/embeddings", ("random", "--random-batch-size", "4"), 5, 20),
    ("openai-embeddings-chat", "/v1/embeddings", ("random",), 20, 20),
    ("vllm-pooling", "/pooling", ("random", "--random-batch-size", "3"), 7, 20),
    ("vllm-rerank", "/v1/rerank", ("random-rerank", "--random-batch-size", "5"), 4, 20),
])
def test_each_pooling_backend_gives_e2e_percentiles_and_no_ttft(child_runner, sim, backend: str, endpoint: str,
                                                               dataset: tuple, requests: int, sequences: int) -> None:
    sim, _ = sim
    run = child_runner.bench("--base-url", sim.url, "--backend", backend, "--endpoint", endpoint, "--model",
                             "BAAI/bge-m3", "--dataset-name", *dataset, "--random-input-len", "64",
                             "--num-prompts", "20", "--request-rate", "40", "--metric-percentiles", "50,99",
                             "--save-result", "--save-detailed", timeout=120)
    assert run.returncode == 0, run.describe()
    result, records = run.result(), run.records()
    assert result["completed"] == requests == len(records)
    assert result["total_input_sequences"] == sequences
    assert result["input_sequence_throughput"] == pytest.approx(sequences / result["duration"])
    assert result["mean_e2el_ms"] > 0 and result["p99_e2el_ms"] >= result["p50_e2el_ms"] > 0
    assert not [k for k in result if "ttft" in k or "tpot" in k or "_itl" in k or k.startswith("itl")]
    assert "total_output_tokens" not in result and "output_throughput" not in result
    assert result["total_input_tokens"] == sum(r["server_prompt_tokens"] for r in records) > 0
    assert all(r["first_token"] is None and r["output_tokens"] == 0 for r in records)
    assert "Input throughput (inputs/s):" in run.stdout and "Mean E2EL (ms):" in run.stdout
    assert "TTFT" not in run.stdout.split("llmload extras")[0]


def test_a_custom_dataset_s_local_images_round_trip(child_runner, sim, tmp_path: Path) -> None:
    sim, trace = sim
    (tmp_path / "pics").mkdir()
    files = []
    for i, (w, h) in enumerate([(56, 28), (28, 84)]):
        path = tmp_path / "pics" / f"p{i}.png"
        Image.new("RGB", (w, h), (i * 90, 20, 200)).save(path, format="PNG")
        files.append(path)
    rows = tmp_path / "rows.jsonl"
    rows.write_text("\n".join(json.dumps(r) for r in [
        {"id": "two", "prompt": "compare these", "output_len": 4, "images": ["pics/p0.png", str(files[1])]},
        {"id": "none", "prompt": "no picture here", "output_len": 4}]))
    run = child_runner.bench("--base-url", sim.url, "--backend", "openai-chat", "--model", VLM, "--dataset-name",
                             "custom", "--dataset-path", rows, "--tokenizer", "builtin", "--num-prompts", "2",
                             "--request-rate", "20", "--save-result", "--no-initial-test", timeout=120)
    assert run.returncode == 0, run.describe()
    by_id = {r["request_id"]: r for r in run.records()}
    bodies = {line["request"]["headers"]["x-request-id"]: line["request"]["body"] for line in trace_lines(trace)}
    sent = image_parts(bodies["two"])
    assert sent == [f.read_bytes() for f in files]
    assert by_id["two"]["images"] == 2 and by_id["none"]["images"] == 0
    assert image_parts(bodies["none"]) == []


@pytest.mark.parametrize(("argv", "message"), [
    (("--dataset-name", "random-mm", "--backend", "openai-chat", "--random-mm-bucket-config", "[(224, 224, 1)]"),
     "Bucket config must parse to a dict"),
    (("--dataset-name", "random-mm", "--backend", "openai-chat", "--random-mm-bucket-config",
      "{(224, 224): 1.0}"), "Expected tuple (H, W, T)"),
    (("--dataset-name", "random-mm", "--backend", "openai-chat", "--random-mm-bucket-config",
      "{(224, 224, 1): 0.5, (256, 256, 1): 0.4}"), "add up to 0.9, not 1"),
    (("--dataset-name", "random-mm", "--backend", "openai-chat", "--random-mm-bucket-config",
      "{(720, 1280, 16): 1.0}"), "is a video"),
    (("--dataset-name", "random-mm"), "Multi-modal content (images) is not supported on backend 'vllm'"),
    (("--dataset-name", "random-mm", "--backend", "openai-embeddings"), "not supported on backend"),
    (("--backend", "openai-embeddings", "--multi-turn"), "--backend openai-embeddings has no chat dialect"),
    (("--backend", "openai-embeddings", "--dataset-name", "weka_trace", "--dataset-path", "x"),
     "--dataset-name weka_trace has no single texts"),
    (("--backend", "vllm-rerank"), "--backend vllm-rerank sends a query and documents"),
    (("--backend", "openai-embeddings", "--endpoint", "/v1/chat/completions"),
     "OpenAI Embeddings API URL must end with one of"),
    (("--dataset-name", "random", "--random-batch-size", "4"), "it needs a pooling --backend"),
])
def test_bad_multimodal_and_pooling_input_is_one_line_exit_2(child_runner, argv: tuple, message: str) -> None:
    run = child_runner.bench("--base-url", "http://127.0.0.1:9", "--tokenizer", "builtin", "--num-prompts", "4",
                             *argv, timeout=60)
    assert run.returncode == 2, run.describe()
    errors = [line for line in run.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and message in errors[0], run.stderr[-1500:]
    assert "Traceback" not in run.stderr


def test_an_unreadable_image_file_is_one_line_exit_2_before_the_first_request(child_runner, sim,
                                                                              tmp_path: Path) -> None:
    sim, trace = sim
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"prompt": "x", "images": ["gone.png"]}))
    run = child_runner.bench("--base-url", sim.url, "--backend", "openai-chat", "--model", VLM, "--tokenizer",
                             "builtin", "--dataset-name", "custom", "--dataset-path", rows, timeout=60)
    assert run.returncode == 2, run.describe()
    assert f"rows.jsonl:1: image file not found: {tmp_path / 'gone.png'}" in run.stderr
    assert "Traceback" not in run.stderr
    assert trace_lines(trace) == []  # nothing was sent


def test_the_rag_locustfile_gives_each_class_its_own_numbers(child_runner, sim, tmp_path: Path) -> None:
    sim, trace = sim
    result_path, records_path = tmp_path / "rag.json", tmp_path / "rag.records.jsonl"
    run = child_runner.locust("-f", "locustfiles/rag.py", "--headless", "--host", sim.url, "-u", "6", "-r", "6",
                              "-t", "120s", "--model", "BAAI/bge-m3", "--dataset-name", "random-rerank",
                              "--random-input-len", "64", "--random-batch-size", "4", "--random-output-len", "4",
                              "--num-prompts", "120", "--tokenizer", "builtin", "--llm-result", str(result_path),
                              "--llm-records", str(records_path), timeout=180)
    assert run.returncode == 0, run.describe()
    records = [json.loads(line) for line in records_path.read_text().splitlines() if line.strip()]
    assert len(records) == 30 and all(r["success"] for r in records), run.describe()
    backends = {r["user_class"]: r["backend"] for r in records}
    assert backends == {"Embed": "openai-embeddings", "Rerank": "vllm-rerank", "Generate": "openai-chat"}
    by_class = json.loads(result_path.read_text())["by_class"]
    for name in ("Embed", "Rerank"):
        assert by_class[name]["mean_e2el_ms"] > 0 and "mean_ttft_ms" not in by_class[name]
        assert by_class[name]["total_input_sequences"] == (5 if name == "Embed" else 4) * by_class[name]["completed"]
    assert by_class["Generate"]["mean_ttft_ms"] > 0 and by_class["Generate"]["total_output_tokens"] > 0
    assert by_class["Embed"]["goodput_slos_ms"] == {"e2el": 500.0}
    # the generation class answers from the documents: its chat request carries them before the query
    chats = [line["request"]["body"] for line in trace_lines(trace) if "messages" in line["request"]["body"]
             and "max_completion_tokens" in line["request"]["body"]]
    assert chats and all("Answer from these documents" in c["messages"][-1]["content"] for c in chats)
