"""llmload bench --backend openai-chat measures a real engine (transformers serve, tiny random Llama on CPU)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import pytest
from support import end_process, free_port

#: a real engine: torch (the local CPU wheel) and transformers[serving], which .ci/run installs
pytestmark = pytest.mark.needs("transformers-serve")


def require_serving() -> None:
    """Skip (saying what is missing) without torch, fastapi or uvicorn; found without importing them, so
    collecting this module stays cheap."""
    for module, why in (("torch", "pip install torch==2.13.0 (the CPU wheel)"),
                        ("fastapi", "pip install 'transformers[serving]'"), ("uvicorn", "pip install 'transformers[serving]'")):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed ({why})")

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
    require_serving()
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


@pytest.mark.slow
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



# -- multi-turn conversations (--multi-turn): each turn carries exactly the previous turns ----------------
# transformers serve keeps no request trace, so what it received is read off two things it computes from the
# prompt itself: usage.prompt_tokens (the length of the chat template over exactly the messages it got: exact,
# but blind to the order of messages) and the greedy reply (the run asks for --temperature 0; a function of the whole
# prompt token sequence, so it also sees order and content, though not every change flips a 4-token reply).

CONVERSATIONS = 2
TURNS = 3
TURN_OUT_LEN = 4
#: a greedy step whose best two logits are closer than this is not compared (float noise between two processes
#: is ~1e-7 on these logits; the gaps seen are 6e-4 and up)
NEAR_TIE = 1e-4


def _words(start: int, n: int) -> str:
    """``n`` of TEXT's words from ``start`` on (wrapping): text the trained tokenizer knows."""
    words = TEXT.split()
    return " ".join(words[(start + i) % len(words)] for i in range(n))


def write_conversations(path: Path) -> list[dict]:
    """ShareGPT entries of TURNS user turns each, every one answered; every message has its own length, so a
    missing, extra or repeated message changes the prompt's token count."""
    entries = []
    for c in range(CONVERSATIONS):
        messages = []
        for t in range(TURNS):
            messages.append({"from": "human", "value": _words(7 * c + 5 * t, 6 + 3 * t + c)})
            messages.append({"from": "gpt", "value": _words(11 * c + 3 * t + 2, 9 + 2 * t)})
        entries.append({"id": f"c{c}", "conversations": messages})
    path.write_text(json.dumps(entries))
    return entries


def expected_messages(entry: dict, turn: int, replies: list[str]) -> list[dict]:
    """Turn ``turn``'s (1-based) messages: each earlier user message followed by its reply from ``replies``,
    then this turn's user message (the entries have no system message)."""
    users = [m["value"] for m in entry["conversations"] if m["from"] == "human"]
    out: list[dict] = []
    for k in range(turn - 1):
        out += [{"role": "user", "content": users[k]}, {"role": "assistant", "content": replies[k]}]
    return [*out, {"role": "user", "content": users[turn - 1]}]


def template_ids(tokenizer, messages: list[dict], **kw):
    """The prompt transformers serve's chat handler builds: the chat template with the generation prompt,
    tokenized (its usage.prompt_tokens is this length)."""
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True,
                                         **kw)["input_ids"]


def greedy_reply(model, tokenizer, messages: list[dict]) -> tuple[str, float]:
    """The reply transformers serve streams for ``messages`` under the run's request (temperature 0: greedy; no
    EOS in this model; TURN_OUT_LEN tokens), decoded as its streamer does (tokenizers' DecodeStream, special
    tokens skipped, an unfinished UTF-8 sequence at the end never sent); and the smallest gap between the best
    and the second best logit over the steps."""
    import torch
    from tokenizers.decoders import DecodeStream

    ids = template_ids(tokenizer, messages, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=TURN_OUT_LEN,
                             do_sample=False, output_scores=True, return_dict_in_generate=True)
    stream = DecodeStream([], skip_special_tokens=True)
    text = "".join(stream.step(tokenizer._tokenizer, t) or "" for t in out.sequences[0, ids.shape[1]:].tolist())
    gap = min(float(top[0] - top[1]) for top in (torch.topk(step[0], 2).values for step in out.scores))
    return text, gap


@pytest.mark.parametrize("history", ["recorded", "live"])
@pytest.mark.slow
def test_multi_turn_history_against_transformers_serve(child_runner, engine, tmp_path, history) -> None:
    """Each turn of a replayed conversation reaches the engine carrying exactly the previous turns: the dataset's
    replies (recorded) or the engine's own earlier replies (live), checked on the engine's side."""
    from transformers import AutoTokenizer, LlamaForCausalLM

    url, model_dir = engine
    dataset = tmp_path / "conversations.json"
    entries = {e["id"]: e for e in write_conversations(dataset)}
    run = child_runner.bench(
        "--backend", "openai-chat", "--base-url", url, "--model", model_dir, "--tokenizer", model_dir,
        "--multi-turn", "--history", history, "--dataset-path", dataset, "--output-len", TURN_OUT_LEN,
        "--num-prompts", CONVERSATIONS, "--max-concurrency", "2", "--temperature", "0", "--save-result",
        "--disable-tqdm", timeout=300,
    )
    assert run.returncode == 0, run.describe()
    assert "Traceback" not in run.stderr, run.describe()
    records = run.records()
    assert len(records) == CONVERSATIONS * TURNS, run.describe()
    assert all(r["success"] for r in records), [r["error"] for r in records]
    assert all(r["output_tokens"] == TURN_OUT_LEN and r["output_tokens_source"] == "usage" for r in records), [
        (r["output_tokens"], r["output_tokens_source"]) for r in records]
    assert all(isinstance(r["server_prompt_tokens"], int) for r in records), "transformers serve sent no usage"

    by_conversation: dict[str, list[dict]] = {}
    for r in records:
        by_conversation.setdefault(r["conversation_id"], []).append(r)
    assert sorted(by_conversation) == sorted(entries)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = LlamaForCausalLM.from_pretrained(model_dir)
    compared = 0
    for cid, turns in by_conversation.items():
        entry = entries[cid]
        # sent in turn order, each turn only after the previous one's last chunk
        turns.sort(key=lambda r: r["start"])
        assert [r["turn"] for r in turns] == list(range(1, TURNS + 1)), cid
        assert [r["request_id"] for r in turns] == [f"{cid}:{k}" for k in range(1, TURNS + 1)]
        assert all(later["start"] >= earlier["chunk_times"][-1] for earlier, later in pairwise(turns)), cid
        assert [r["conversation_end"] for r in turns] == [""] * (TURNS - 1) + ["completed"], cid

        recorded = [m["value"] for m in entry["conversations"] if m["from"] == "gpt"]
        # live: the replies' text as llmload got it and sends it back byte for byte; the engine re-tokenizes that
        # text (not the ids it generated), as the same tokenizer does here, so the count stays exact
        replies = recorded if history == "recorded" else [r["generated_text"] for r in turns]
        assert all(replies), (cid, replies)
        expected = [expected_messages(entry, k, replies) for k in range(1, TURNS + 1)]
        seen = [r["server_prompt_tokens"] for r in turns]
        want = [len(template_ids(tokenizer, messages)) for messages in expected]
        assert seen == want, (cid, history, seen, want)
        # the count tells: the last user message alone, or the other kind of history, counts differently
        alone = [len(template_ids(tokenizer, messages[-1:])) for messages in expected]
        assert all(a < w for a, w in zip(alone[1:], want[1:], strict=True)), (alone, want)
        if history == "live":
            other = [len(template_ids(tokenizer, expected_messages(entry, k, recorded))) for k in range(2, TURNS + 1)]
            assert other != want[1:], "the live replies count as the recorded ones: the check cannot tell them apart"

        for messages, r in zip(expected, turns, strict=True):
            text, gap = greedy_reply(model, tokenizer, messages)
            if gap >= NEAR_TIE:
                compared += 1
                assert r["generated_text"] == text, (r["request_id"], history, r["generated_text"], text)
    assert compared >= len(records) // 2, f"only {compared} replies clear of near ties: the reply check is idle"
