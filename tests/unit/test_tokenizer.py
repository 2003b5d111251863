"""The builtin tokenizer loads offline and fast; bad --tokenizer values fail fast with one line.

"Fast" is checked by what makes it fast (a ready tokenizer.json, no slow-to-fast conversion, no network) and
by wall-clock bounds far above a busy machine's noise that a retry loop or a conversion would still exceed."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llmload.common.errors import TokenizerError
from llmload.tokenizer import builtin_tokenizer_dir, load_tokenizer

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("builtin")


def test_builtin_dir_ships_transformers_files():
    d = builtin_tokenizer_dir()
    assert d == REPO / "llmload" / "data" / "tokenizer"
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        assert (d / name).is_file(), name
    config = json.loads((d / "tokenizer_config.json").read_text())
    assert "chat_template" in config
    assert config["bos_token"] == "<s>"


def test_builtin_loads_offline_and_fast(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import transformers  # noqa: F401  (a one-time import cost shared by every tokenizer)

    start = time.perf_counter()
    tok = load_tokenizer("builtin")
    elapsed = time.perf_counter() - start
    # a Rust tokenizer read straight from tokenizer.json (~0.1 s): no conversion from a slow tokenizer
    assert tok.is_fast and tok.vocab_size == 8000
    assert elapsed < 10.0, f"loading the builtin tokenizer took {elapsed:.1f} s"


def test_module_import_is_cheap_and_cold_load_works_offline():
    code = (
        "import sys, time; t = time.perf_counter(); import llmload.tokenizer as m; "
        "assert 'transformers' not in sys.modules; tok = m.load_tokenizer('builtin'); "
        "print(round(time.perf_counter() - t, 2), tok('hello world').input_ids[0])"
    )
    env = {"HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, timeout=60
    )
    assert out.returncode == 0, out.stderr
    seconds, first_id = out.stdout.split()
    assert float(seconds) < 15 and int(first_id) == 0  # <s> is id 0


def test_bos_added_like_llama(tok):
    with_bos = tok("hello world").input_ids
    without = tok("hello world", add_special_tokens=False).input_ids
    assert with_bos[0] == tok.bos_token_id == tok.convert_tokens_to_ids("<s>")
    assert with_bos[1:] == without
    assert tok.decode(without) == "hello world"
    assert {tok.eos_token, tok.unk_token, tok.pad_token} == {"</s>", "<unk>", "<pad>"}


def test_chat_template(tok):
    text = tok.apply_chat_template(
        [{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True
    )
    assert text == "<s><|user|>\nHi</s>\n<|assistant|>\n"


def test_byte_level_handles_any_text(tok):
    text = "naïve café 東京 🙂 x=1;"
    assert tok.decode(tok(text, add_special_tokens=False).input_ids) == text


def test_local_directory_loads(tmp_path):
    copy = tmp_path / "my-tok"
    shutil.copytree(builtin_tokenizer_dir(), copy)
    tok = load_tokenizer(str(copy))
    assert tok("hello").input_ids == load_tokenizer("builtin")("hello").input_ids


def test_unknown_hub_name_fails_fast_when_offline(monkeypatch, tok):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer  # noqa: F401  (imported already by what the lookup uses: only it is timed)

    start = time.perf_counter()
    with pytest.raises(TokenizerError) as err:
        load_tokenizer("no-such-org/no-such-model-4242")
    assert time.perf_counter() - start < 10.0  # no retries with back-off (those take tens of seconds)
    msg = str(err.value)
    assert "no-such-org/no-such-model-4242" in msg and "--tokenizer builtin" in msg and "\n" not in msg


def test_unknown_hub_name_fails_fast_when_hub_unreachable(monkeypatch, tok):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: connection refused
    start = time.perf_counter()
    with pytest.raises(TokenizerError, match="no-such-model-4242") as err:
        load_tokenizer("no-such-model-4242")
    assert time.perf_counter() - start < 10.0  # refused at once: no retries with back-off
    assert "unreachable" in str(err.value)


def test_missing_directory_and_file_paths(tmp_path):
    with pytest.raises(TokenizerError, match="does not exist"):
        load_tokenizer(str(tmp_path / "nope"))
    f = tmp_path / "tokenizer.json"
    f.write_text("{}")
    with pytest.raises(TokenizerError, match="is a file"):
        load_tokenizer(str(f))


def test_directory_without_tokenizer_files(tmp_path):
    with pytest.raises(TokenizerError) as err:
        load_tokenizer(str(tmp_path))
    assert str(tmp_path) in str(err.value) and "\n" not in str(err.value)


# -- the builtin tokenizer without transformers (what bench and the simulator count with) --------------------

def _sample_texts() -> list[str]:
    import gzip

    data = json.loads(gzip.decompress((REPO / "llmload" / "data" / "sharegpt_sample.json.gz").read_bytes()))
    texts = [turn["value"] for conv in data for turn in conv["conversations"]]
    return [*texts, "", " ", "x", "<s>hello</s> <unk>", "naïve café ☕ 東京\n\n\ttabs  ", "\ufffd\x00"]


@pytest.mark.slow
def test_counting_tokenizer_is_the_transformers_one_without_transformers(tok) -> None:
    """Texts across the shipped sample: the same ids (with and without BOS), offsets, decoded text and special
    ids as transformers' PreTrainedTokenizerFast reading the same files."""
    from llmload.tokenizer import load_counting_tokenizer
    from llmload.tokenizer.builtin import BuiltinTokenizer

    light = load_counting_tokenizer("builtin")
    assert isinstance(light, BuiltinTokenizer)
    assert light.vocab_size == tok.vocab_size and len(light) == len(tok)
    assert light.all_special_ids == sorted(tok.all_special_ids)
    assert light.num_special_tokens_to_add() == tok.num_special_tokens_to_add() == 1
    texts = _sample_texts()[::-7]  # the odd ones at the end first
    assert len(texts) > 200
    assert light(texts).input_ids == tok(texts).input_ids
    assert light(texts, add_special_tokens=False).input_ids == tok(texts, add_special_tokens=False).input_ids
    for text in texts[:: max(1, len(texts) // 100)]:
        ids = tok.encode(text, add_special_tokens=False)
        assert light.encode(text, add_special_tokens=False) == ids
        assert light.encode(text) == tok.encode(text)
        assert light.decode(ids) == tok.decode(ids)
        assert light(text).input_ids == tok(text).input_ids
        ours = light(text, add_special_tokens=False, return_offsets_mapping=True)
        theirs = tok(text, add_special_tokens=False, return_offsets_mapping=True)
        assert [list(o) for o in ours.offset_mapping] == [list(o) for o in theirs["offset_mapping"]]
    random_ids = list(range(0, light.vocab_size, 7))
    assert light.decode(random_ids) == tok.decode(random_ids)


def test_counting_tokenizer_does_not_import_transformers() -> None:
    code = ("import sys; from llmload.tokenizer import load_counting_tokenizer; "
            "t = load_counting_tokenizer('builtin'); print(len(t('hello world').input_ids), "
            "'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60,
                         env={"HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["5", "False"]


def test_counting_tokenizer_of_another_name_is_load_tokenizer() -> None:
    from llmload.tokenizer import load_counting_tokenizer

    with pytest.raises(TokenizerError, match="does not exist"):
        load_counting_tokenizer("/nonexistent/tokenizer")
