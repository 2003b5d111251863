"""llmload bench --backend openai-chat measures a real engine (transformers serve, tiny random Llama on CPU)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import end_process, free_port

pytest.importorskip("torch")
pytest.importorskip("fastapi")  # transformers[serving]
pytest.importorskip("uvicorn")

PROMPTS = 8
OUT_LEN = 16
TEXT = (
    "the quick brown fox jumps over the lazy dog while a server streams tokens to many clients and every "
    "client measures the time to the first token and the gap between later tokens"
)


def build_model(path: Path) -> None:
    """A byte-level BPE tokenizer trained here, with a chat template, and a tiny random Llama that never
    stops early (no EOS token anywhere)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    words = TEXT.split()
    lines = [" ".join(words[i % len(words):] + words[: i % len(words)]) for i in range(300)]
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=["<s>", "</s>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(lines, trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    tokenizer.chat_template = (
        "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant:{% endif %}"
    )
    tokenizer.save_pretrained(path)

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
        intermediate_size=128, max_position_embeddings=4096, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=None, pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(bos_token_id=tokenizer.bos_token_id, eos_token_id=None,
                                               pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(path)
    # a random model hits EOS early unless eos_token_id is null in both files (docs/design.md "Wire dialects")
    for name in ("config.json", "generation_config.json"):
        data = json.loads((path / name).read_text())
        data["eos_token_id"] = None
        (path / name).write_text(json.dumps(data, indent=2))




def transformers_cli() -> list[str]:
    script = Path(sys.executable).with_name("transformers")
    if script.exists():
        return [str(script)]
    found = shutil.which("transformers")
    if found is None:
        pytest.skip("the transformers CLI is not installed")
    return [found]


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> Iterator[tuple[str, Path]]:
    """``transformers serve DIR --host 127.0.0.1 --port P --device cpu``; stopped by PID at teardown."""
    tmp = tmp_path_factory.mktemp("engine")
    model_dir = tmp / "tiny-llama"
    build_model(model_dir)
    port = free_port()
    log_path = tmp / "serve.log"
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", NO_PROXY="127.0.0.1", no_proxy="127.0.0.1")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [*transformers_cli(), "serve", str(model_dir), "--host", "127.0.0.1", "--port", str(port),
             "--device", "cpu"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                pytest.fail(f"transformers serve exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{url}/v1/models", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"transformers serve did not answer within 180 s:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.5)
        yield url, model_dir
    finally:
        end_process(proc, grace=15.0)


def test_bench_against_transformers_serve(child_runner, engine) -> None:
    url, model_dir = engine
    run = child_runner.bench(
        "--backend", "openai-chat", "--base-url", url, "--model", model_dir, "--tokenizer", model_dir,
        "--num-prompts", PROMPTS, "--sharegpt-output-len", OUT_LEN, "--max-concurrency", "2", "--save-result",
        "--disable-tqdm", timeout=300,
    )
    assert run.returncode == 0, run.describe()
    assert "Traceback" not in run.stderr, run.describe()
    data = run.result()
    records = run.records()
    assert data["failed"] == 0 and data["completed"] == PROMPTS, run.describe()
    assert len(records) == PROMPTS and all(r["success"] for r in records), [r["error"] for r in records]
    # usage rides on transformers serve's finish chunk (no usage-only chunk, no [DONE]): it must be read
    assert all(r["output_tokens"] == OUT_LEN and r["output_tokens_source"] == "usage" for r in records), [
        (r["output_tokens"], r["output_tokens_source"]) for r in records]
    assert data["total_output_tokens"] == PROMPTS * OUT_LEN
    for r in records:
        ttft = r["first_token"] - r["start"]
        e2el = r["chunk_times"][-1] - r["start"]
        assert 0.0005 < ttft <= e2el < 120, (ttft, e2el)
        # the role chunk sent before generation is not a token: every counted chunk carried text
        assert r["generated_text"] and 1 <= len(r["chunk_times"]) <= OUT_LEN
    assert 0.5 < data["mean_ttft_ms"] < 60_000
    assert 0.01 < data["mean_tpot_ms"] < 5_000
    assert data["mean_itl_ms"] > 0
    assert data["ttft_rule"] == "content"
