"""random-mm, random-rerank, embeddings batches and images in user datasets (docs/multimodal.md): vLLM's meanings,
the same images from the same seed, and one DatasetError line for each bad input."""

from __future__ import annotations

import base64
import hashlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from llmload.common.errors import DatasetError
from llmload.datasets import load_samples
from llmload.datasets import random_mm as rmm
from llmload.datasets.pooling import batched, sample_random_rerank
from llmload.datasets.random_mm import MultiModalSpec, parse_bucket_config, parse_limits, sample_random_mm
from llmload.tokenizer import load_counting_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return load_counting_tokenizer("builtin")


def decoded(url: str) -> bytes:
    head, _, data = url.partition(",")
    assert head == "data:image/jpeg;base64"
    return base64.b64decode(data)


def test_image_counts_follow_base_and_ratio(tokenizer) -> None:
    spec = MultiModalSpec(base_items=2, items_range_ratio=0.5, limits={"image": 3},
                          buckets={(32, 48, 1): 1.0})
    samples = sample_random_mm(tokenizer, 300, 7, mm=spec, input_len=16, output_len=4)
    counts = [len(s.images or []) for s in samples]
    # vLLM: uniform over [floor(2 * 0.5), min(3, ceil(2 * 1.5))] = [1, 3]
    assert set(counts) == {1, 2, 3}
    assert abs(np.mean(counts) - 2.0) < 0.25


def test_limit_caps_the_count_and_zero_items_is_allowed(tokenizer) -> None:
    # base 4, ratio 0.5: [2, min(2, 6)]: the limit caps the top of the range
    capped = sample_random_mm(tokenizer, 50, 1, mm=MultiModalSpec(base_items=4, items_range_ratio=0.5,
                                                                   limits={"image": 2},
                                                                   buckets={(28, 28, 1): 1.0}),
                              input_len=8, output_len=2)
    assert {len(s.images or []) for s in capped} == {2}
    none = sample_random_mm(tokenizer, 5, 1, mm=MultiModalSpec(base_items=0, buckets={(28, 28, 1): 1.0}),
                            input_len=8, output_len=2)
    assert all(not s.images for s in none)


def test_sizes_come_from_the_buckets_in_their_proportions(tokenizer) -> None:
    spec = MultiModalSpec(base_items=1, buckets={(20, 30, 1): 0.25, (40, 24, 1): 0.75, (720, 1280, 16): 0.0})
    samples = sample_random_mm(tokenizer, 400, 3, mm=spec, input_len=8, output_len=2)
    sizes = [Image.open(io.BytesIO(decoded(s.images[0]))).size for s in samples]  # (width, height)
    assert set(sizes) == {(30, 20), (24, 40)}
    share = sizes.count((30, 20)) / len(sizes)
    assert 0.15 < share < 0.35


def test_same_seed_same_image_bytes_made_ahead_or_on_read(tokenizer, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = MultiModalSpec(base_items=2, buckets={(64, 64, 1): 0.5, (32, 96, 1): 0.5})

    def digest(samples) -> list[str]:
        return [hashlib.sha256(b"".join(decoded(u) for u in s.images)).hexdigest() for s in samples]

    ahead = sample_random_mm(tokenizer, 20, 11, mm=spec, input_len=8, output_len=2)
    again = sample_random_mm(tokenizer, 20, 11, mm=spec, input_len=8, output_len=2)
    monkeypatch.setattr(rmm, "MADE_AHEAD_BYTES", 0)
    on_read = sample_random_mm(tokenizer, 20, 11, mm=spec, input_len=8, output_len=2)
    assert on_read._whole is None and ahead._whole is not None
    assert digest(ahead) == digest(again) == digest(on_read)
    assert digest([on_read[5]]) == digest([on_read[5]])  # read twice: the same bytes
    other = sample_random_mm(tokenizer, 20, 12, mm=spec, input_len=8, output_len=2)
    assert digest(other) != digest(ahead)
    assert len(set(digest(ahead))) == 20  # every request's images differ (no server-side cache hits by accident)


def test_text_is_the_random_dataset_s(tokenizer) -> None:
    mm = sample_random_mm(tokenizer, 10, 5, mm=MultiModalSpec(buckets={(28, 28, 1): 1.0}), input_len=32,
                          output_len=4)
    text = load_samples("random", None, tokenizer, 10, 5, input_len=32, output_len=4)
    assert [(s.prompt, s.prompt_len, s.expected_output_len) for s in mm] == [
        (s.prompt, s.prompt_len, s.expected_output_len) for s in text]


@pytest.mark.parametrize(("text", "expected"), [
    ("{(224, 224, 1): 1.0}", {(224, 224, 1): 1.0}),
    ('{"(256, 256, 1)": 0.5, "(720, 1280, 1)": 0.5}', {(256, 256, 1): 0.5, (720, 1280, 1): 0.5}),
])
def test_bucket_config_reads_python_and_json_keys(text: str, expected: dict) -> None:
    assert parse_bucket_config(text) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("[(224, 224, 1)]", "Bucket config must parse to a dict"),
    ("{(224, 224): 1.0}", "Invalid bucket key (224, 224)"),
    ("{'a': 1.0}", "Invalid bucket key 'a'"),
    ("{(224, 224, 1): 'x'}", "must be a number"),
    ("{(224, 224, 1): ", "not a Python literal"),
])
def test_bad_bucket_config_is_one_line(text: str, message: str) -> None:
    with pytest.raises(DatasetError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_bucket_config(text)


@pytest.mark.parametrize(("spec", "message"), [
    (MultiModalSpec(buckets={(224, 224, 1): 0.6, (256, 256, 1): 0.6}), "add up to 1.2, not 1"),
    (MultiModalSpec(buckets={(224, 224, 1): 0.5, (720, 1280, 8): 0.5}), "is a video"),
    (MultiModalSpec(limits={"image": 3}), "Modality video is not in limit_mm_per_prompt"),
    (MultiModalSpec(limits={"image": 0}, buckets={(28, 28, 1): 1.0}), "Min num mm items is greater than max"),
    (MultiModalSpec(items_range_ratio=1.5), "must be in \\[0, 1\\]"),
])
def test_bad_multimodal_flags_are_one_line(tokenizer, spec: MultiModalSpec, message: str) -> None:
    with pytest.raises(DatasetError, match=message):
        sample_random_mm(tokenizer, 2, 0, mm=spec, input_len=8, output_len=2)


def test_limits_are_json() -> None:
    assert parse_limits('{"image": 2, "video": 0}') == {"image": 2, "video": 0}
    for bad in ("{image: 2}", '{"image": -1}', "[1]"):
        with pytest.raises(DatasetError):
            parse_limits(bad)


def test_rerank_shares_one_query_and_counts_vllm_s_way(tokenizer) -> None:
    samples = sample_random_rerank(tokenizer, 10, 0, input_len=64, batch_size=4)
    assert [len(s.inputs) - 1 for s in samples] == [4, 4, 2]  # 10 documents, 4 a request
    query = samples[0].inputs[0]
    assert all(s.inputs[0] == query for s in samples)
    q = tokenizer.encode(query, add_special_tokens=False)
    for s in samples:
        docs = [len(tokenizer.encode(d, add_special_tokens=False)) for d in s.inputs[1:]]
        assert s.prompt_len == (len(q) + 1) * len(docs) + sum(docs)  # query and separator once a document
        assert all(len(q) + 1 + d <= 64 for d in docs)


def test_no_reranker_puts_the_query_in_a_slot(tokenizer) -> None:
    samples = sample_random_rerank(tokenizer, 9, 0, input_len=32, batch_size=3, reranker=False)
    assert [len(s.inputs) - 1 for s in samples] == [2, 2, 2, 2]  # 8 documents, 2 a request
    q = len(tokenizer.encode(samples[0].inputs[0], add_special_tokens=False))
    for s in samples:
        docs = [len(tokenizer.encode(d, add_special_tokens=False)) for d in s.inputs[1:]]
        assert s.prompt_len == q + sum(docs)
    with pytest.raises(DatasetError, match="--no-reranker"):
        sample_random_rerank(tokenizer, 9, 0, input_len=32, batch_size=1, reranker=False)


def test_random_batches_group_prompts_in_order(tokenizer) -> None:
    singles = load_samples("random", None, tokenizer, 10, 3, input_len=16, output_len=4)
    batches = load_samples("random", None, tokenizer, 10, 3, input_len=16, output_len=4, batch_size=4)
    assert [len(b.inputs) for b in batches] == [4, 4, 2]
    assert [p for b in batches for p in b.inputs] == [s.prompt for s in singles]
    assert [b.prompt_len for b in batches] == [sum(s.prompt_len for s in singles[i:i + 4]) for i in (0, 4, 8)]
    assert batched(singles, 10)[0].inputs == [s.prompt for s in singles]


def png(path: Path, width: int, height: int) -> bytes:
    Image.new("RGB", (width, height), (10, 200, 30)).save(path, format="PNG")
    return path.read_bytes()


def test_custom_rows_carry_local_files_and_urls(tokenizer, tmp_path: Path) -> None:
    (tmp_path / "img").mkdir()
    raw = png(tmp_path / "img" / "a.png", 56, 28)
    absolute = tmp_path / "b.png"
    raw_b = png(absolute, 28, 28)
    rows = [{"prompt": "describe", "images": ["img/a.png", str(absolute)]},
            {"prompt": "and this", "images": ["https://example.invalid/c.jpg"]},
            {"prompt": "no image"}]
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    samples = load_samples("custom", path, tokenizer, None)
    first = samples[0].images
    assert [u.split(",")[0] for u in first] == ["data:image/png;base64"] * 2
    assert [base64.b64decode(u.split(",")[1]) for u in first] == [raw, raw_b]
    assert samples[1].images == ["https://example.invalid/c.jpg"]
    assert samples[2].images is None


@pytest.mark.parametrize(("images", "message"), [
    (["missing.png"], "rows.jsonl:1: image file not found"),
    (["notes.txt"], "rows.jsonl:1: .*notes.txt: not an image file"),
    ("one.png", "rows.jsonl:1: 'images' must be a list"),
])
def test_bad_images_in_a_custom_row_are_one_line(tokenizer, tmp_path: Path, images: object, message: str) -> None:
    (tmp_path / "notes.txt").write_text("not an image")
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"prompt": "x", "images": images}))
    with pytest.raises(DatasetError, match=message):
        load_samples("custom", path, tokenizer, None)


def test_sharegpt_4v_image_field(tokenizer, tmp_path: Path) -> None:
    raw = png(tmp_path / "cat.png", 28, 56)
    text = "a photo of a cat sitting on a mat in the sun " * 3
    rows = [{"id": "v1", "image": "cat.png", "conversations": [{"from": "human", "value": text},
                                                                 {"from": "gpt", "value": text}]}]
    path = tmp_path / "sharegpt4v.json"
    path.write_text(json.dumps(rows))
    samples = load_samples("sharegpt", path, tokenizer, 1)
    assert len(samples) == 1
    assert base64.b64decode(samples[0].images[0].split(",")[1]) == raw
