"""ShareGPT conversations sampled exactly like vLLM's ``benchmark_serving.py``.

The rules (vLLM ``sample_sharegpt_requests`` / ``ShareGPTDataset``):

1. keep conversations with at least 2 turns and make (turn 0, turn 1) pairs, in file order;
2. shuffle the pairs with ``random.seed(seed); random.shuffle(pairs)`` *before* filtering
   (a private ``random.Random(seed)`` gives the same permutation without touching global state);
3. walk the shuffled pairs: prompt = turn 0, completion = turn 1, lengths are
   ``len(tokenizer(text).input_ids)``; output length = completion length, or ``fixed_output_len``;
4. skip prompt < 4 tokens, output < 4 tokens (only without ``fixed_output_len``),
   prompt > 1024 tokens, prompt + output > 2048 tokens;
5. stop once ``num_prompts`` are kept. Fewer may come back; the caller warns.

Steps 1-4 are :func:`select_sharegpt`, which multi-turn sampling (:mod:`llmload.datasets.conversations`)
shares, so one seed picks the same conversations for both.

The file may be plain JSON or gzip-compressed (``.gz``).
"""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.resources import files
from itertools import islice
from pathlib import Path
from typing import Any

from llmload.common.errors import DatasetError
from llmload.datasets.base import SampleRequest, Tokenizer, token_len

MIN_LEN = 4
MAX_PROMPT_LEN = 1024
MAX_TOTAL_LEN = 2048
SAMPLE_NAMES = ("sharegpt_sample.json", "sharegpt_sample.json.gz")
"""The shipped synthetic sample, looked up in this order in the package's ``llmload/data/``."""


def default_sharegpt_path() -> Path:
    """The synthetic ShareGPT sample shipped inside the package (``llmload/data/``).

    Found through ``importlib.resources``, so a wheel install (``pip install .``) has it as well as a
    source checkout; ``datasets/make_sharegpt_sample.py`` writes it there.
    """
    folder = Path(str(files("llmload").joinpath("data")))
    for name in SAMPLE_NAMES:
        if (folder / name).is_file():
            return folder / name
    raise DatasetError(
        f"the bundled ShareGPT sample is not in {folder}: reinstall llmload or pass --dataset-path "
        "(e.g. ShareGPT_V3_unfiltered_cleaned_split.json)"
    )


def read_json_file(path: Path) -> Any:
    """Parse a JSON file, gunzipping ``*.gz``; every failure is a DatasetError naming the file."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise DatasetError(f"dataset file not found: {path}") from None
    except OSError as exc:
        raise DatasetError(f"cannot read dataset file {path}: {exc.strerror or exc}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise DatasetError(f"{path}: corrupt gzip data ({exc})") from None
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise DatasetError(
            f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except UnicodeDecodeError:
        raise DatasetError(f"{path}: not UTF-8 text") from None


def load_conversations(path: str | Path) -> list[dict[str, Any]]:
    """The file's conversations, each checked for the ShareGPT shape."""
    path = Path(path)
    data = read_json_file(path)
    if not isinstance(data, list):
        raise DatasetError(
            f"{path}: expected a JSON list of ShareGPT conversations, got {type(data).__name__}"
        )
    for i, entry in enumerate(data):
        if not isinstance(entry, dict) or not isinstance(entry.get("conversations"), list):
            raise DatasetError(f"{path}: entry {i} has no 'conversations' list")
    return data


def _turn_text(path: Path, index: int, entry: dict[str, Any], turn: int) -> str:
    try:
        value = entry["conversations"][turn]["value"]
    except (KeyError, TypeError):
        raise DatasetError(f"{path}: entry {index} turn {turn} has no 'value'") from None
    if not isinstance(value, str):
        raise DatasetError(f"{path}: entry {index} turn {turn} 'value' is not a string")
    return value


@dataclass(frozen=True)
class Selected:
    """One conversation that passed vLLM's first-turn rules, with the lengths those rules measured."""

    index: int
    """Position of the entry in the file."""
    entry: dict[str, Any]
    """The raw ShareGPT entry (``{"id", "conversations"}``)."""
    prompt: str
    """Turn 0's text."""
    prompt_len: int
    """``token_len`` of turn 0."""
    output_len: int
    """``token_len`` of turn 1, or ``fixed_output_len``."""


def check_fixed_output_len(fixed_output_len: int | None) -> None:
    """vLLM refuses a fixed output length under 4 tokens."""
    if fixed_output_len is not None and fixed_output_len < MIN_LEN:
        raise DatasetError(f"--sharegpt-output-len must be at least {MIN_LEN}, got {fixed_output_len}")


def select_sharegpt(
    path: str | Path, tokenizer: Tokenizer, seed: int = 0, *, fixed_output_len: int | None = None,
    shuffle: bool = True,
) -> Iterator[Selected]:
    """The conversations vLLM's rules keep (steps 1-4 of the module docstring), in shuffled order.

    The file is read and shuffled now (its errors surface at the call); the length filters run lazily,
    so a caller tokenizes only as many as it takes. First-turn and multi-turn sampling share this one
    selection, which is what makes a seed pick the same conversations in both.
    """
    path = Path(path)
    data = load_conversations(path)
    pairs = [
        (_turn_text(path, i, e, 0), _turn_text(path, i, e, 1), i)
        for i, e in enumerate(data)
        if len(e["conversations"]) >= 2
    ]
    if not pairs:
        raise DatasetError(f"{path}: no conversation has two turns")
    if shuffle:  # --disable-shuffle: the file's order, as vLLM
        random.Random(seed).shuffle(pairs)
    return _passing(data, pairs, tokenizer, fixed_output_len)


def _passing(
    data: list[dict[str, Any]],
    pairs: list[tuple[str, str, int]],
    tokenizer: Tokenizer,
    fixed_output_len: int | None,
) -> Iterator[Selected]:
    """The shuffled pairs that pass the length filters (steps 3-4), tokenized one at a time."""
    for prompt, completion, index in pairs:
        prompt_len = token_len(tokenizer, prompt)
        output_len = token_len(tokenizer, completion) if fixed_output_len is None else fixed_output_len
        if prompt_len < MIN_LEN or (fixed_output_len is None and output_len < MIN_LEN):
            continue
        if prompt_len > MAX_PROMPT_LEN or prompt_len + output_len > MAX_TOTAL_LEN:
            continue
        yield Selected(index, data[index], prompt, prompt_len, output_len)


def sample_sharegpt(
    path: str | Path,
    tokenizer: Tokenizer,
    num_prompts: int,
    seed: int = 0,
    *,
    fixed_output_len: int | None = None,
    shuffle: bool = True,
) -> list[SampleRequest]:
    """Up to ``num_prompts`` requests chosen by vLLM's ShareGPT rules (see the module docstring); ``shuffle``
    off (``--disable-shuffle``) keeps the file's order."""
    check_fixed_output_len(fixed_output_len)
    selected = select_sharegpt(path, tokenizer, seed, fixed_output_len=fixed_output_len, shuffle=shuffle)
    out = [
        SampleRequest(
            prompt=chosen.prompt,
            prompt_len=chosen.prompt_len,
            expected_output_len=chosen.output_len,
            conversation=chosen.entry["conversations"],
            request_id=request_id(chosen),
            images=entry_images(chosen.entry, Path(path).parent),
        )
        for chosen in islice(selected, num_prompts)
    ]
    if not out and num_prompts > 0:
        raise DatasetError(f"{path}: no conversation passes the ShareGPT length filters")
    return out


def entry_images(entry: dict[str, Any], base: Path) -> list[str] | None:
    """A ShareGPT-4V entry's ``image`` (one path or URL, or a list), as request URLs (local files relative to the
    dataset's folder, :func:`~llmload.datasets.images.image_url`); None for an entry without one."""
    given = entry.get("image")
    if given is None:
        return None
    from llmload.datasets.images import image_url

    sources = given if isinstance(given, list) else [given]
    if not all(isinstance(s, str) and s for s in sources):
        raise DatasetError(f"entry {entry.get('id', '?')}: 'image' must be a path or URL (or a list of them)")
    return [image_url(s, base) for s in sources]


def request_id(chosen: Selected) -> str:
    """The entry's ``id``, else its position in the file."""
    return str(chosen.entry.get("id", chosen.index))
