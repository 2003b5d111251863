"""vLLM's ``hf`` dataset, from local files only: this project reaches no model or dataset hub, so
``--dataset-path`` is a data file (``.parquet``, ``.jsonl``, ``.json``, ``.csv``), a directory of them, or a
dataset id already in the local Hugging Face cache (``huggingface_hub``'s ``local_files_only``). In a directory
``--hf-subset`` picks a sub-directory and ``--hf-split`` the files whose name holds it (default: ``train``, else
every file).

The prompt of a row follows vLLM's dataset classes for the ids they know (``--hf-name`` names the id when the
path is a local copy), else the first column of :data:`PROMPT_COLUMNS` the rows have; a ShareGPT-style
``conversations`` column gives its first human turn. ``--hf-output-len`` (or ``--output-len``) fixes the output
length, else the known dataset's own, else 256."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llmload.common.errors import DatasetError
from llmload.datasets.base import SampleRequest, Tokenizer, token_len

DEFAULT_OUTPUT_LEN = 256
#: columns a prompt is taken from when the dataset is not one vLLM knows, in this order
PROMPT_COLUMNS = ("prompt", "question", "instruction", "problem", "text", "input")
_SUFFIXES = (".parquet", ".jsonl", ".json", ".csv")


def _instruct_coder(row: dict[str, Any]) -> str:
    return f"{row['input']}\n\n{row['instruction']} Just output the code, do not include any explanation."


#: vLLM's datasets by id: (prompt of a row, default output length)
KNOWN: dict[str, tuple[Callable[[dict[str, Any]], str], int]] = {
    "likaixin/InstructCoder": (_instruct_coder, 200),
    "philschmid/mt-bench": (lambda row: row["turns"][0], 256),
    "AI-MO/aimo-validation-aime": (lambda row: row["problem"], 256),
    "AI-MO/NuminaMath-1.5": (lambda row: row["problem"], 256),
    "openai/gsm8k": (lambda row: row["question"], 256),
    "openai/openai_humaneval": (lambda row: row["prompt"], 256),
}


def _resolve(path: str, subset: str | None) -> Path:
    """The local directory or file behind ``--dataset-path``."""
    local = Path(path)
    if not local.exists():
        if path.count("/") != 1:
            raise DatasetError(f"dataset file not found: {path}")
        try:
            from huggingface_hub import snapshot_download

            local = Path(snapshot_download(path, repo_type="dataset", local_files_only=True))
        except Exception:
            raise DatasetError(f"--dataset-path {path}: not a local file or directory, and not in the local "
                               "Hugging Face cache (llmload reads datasets from local files, never from the hub: "
                               "download it elsewhere and give its directory)") from None
    if subset and local.is_dir():
        if not (local / subset).is_dir():
            raise DatasetError(f"{local}: no --hf-subset directory {subset!r}")
        local = local / subset
    return local


def _files(local: Path, split: str | None) -> list[Path]:
    if local.is_file():
        return [local]
    files = sorted(p for p in local.rglob("*") if p.suffix in _SUFFIXES and p.is_file())
    if not files:
        raise DatasetError(f"{local}: no .parquet, .jsonl, .json or .csv file")
    chosen = [p for p in files if (split or "train") in p.name]
    if split and not chosen:
        raise DatasetError(f"{local}: no file of --hf-split {split!r} (files: {', '.join(p.name for p in files)})")
    return chosen or files


def _rows(path: Path) -> list[dict[str, Any]]:
    import pandas as pd

    try:
        if path.suffix == ".parquet":
            frame = pd.read_parquet(path)
        elif path.suffix == ".csv":
            frame = pd.read_csv(path)
        else:
            frame = pd.read_json(path, lines=path.suffix == ".jsonl")
    except (OSError, ValueError, ImportError) as exc:
        raise DatasetError(f"{path}: cannot read it as {path.suffix[1:]} ({str(exc).splitlines()[0]})") from None
    return frame.to_dict("records")


def _prompt_of(rows: list[dict[str, Any]], name: str | None, where: Path) -> tuple[Callable[[dict], str], int]:
    if name in KNOWN:
        return KNOWN[name]
    columns = set(rows[0]) if rows else set()
    if "conversations" in columns:
        return (lambda row: next(t["value"] for t in row["conversations"] if t.get("from") in ("human", "user"))), \
            DEFAULT_OUTPUT_LEN
    for column in PROMPT_COLUMNS:
        if column in columns:
            return (lambda row, c=column: str(row[c])), DEFAULT_OUTPUT_LEN
    raise DatasetError(f"{where}: no prompt column (looked for conversations, {', '.join(PROMPT_COLUMNS)}; "
                       f"it has {', '.join(sorted(map(str, columns)))})")


def sample_hf(path: str | Path, tokenizer: Tokenizer, num_prompts: int | None, seed: int = 0, *,
              subset: str | None = None, split: str | None = None, name: str | None = None,
              output_len: int | None = None, shuffle: bool = True) -> list[SampleRequest]:
    """Up to ``num_prompts`` prompts of the dataset's rows (module docstring), shuffled by seed unless not."""
    local = _resolve(str(path), subset)
    rows = [row for f in _files(local, split) for row in _rows(f)]
    if not rows:
        raise DatasetError(f"{local}: no rows")
    prompt_of, default_len = _prompt_of(rows, name or str(path), local)
    if shuffle:
        random.Random(seed).shuffle(rows)
    out = []
    for i, row in enumerate(rows):
        if num_prompts is not None and len(out) >= num_prompts:
            break
        try:
            prompt = prompt_of(row)
        except (KeyError, IndexError, TypeError, StopIteration):
            raise DatasetError(f"{local}: row {i} has no prompt where the dataset keeps it") from None
        if prompt:
            out.append(SampleRequest(prompt=prompt, prompt_len=token_len(tokenizer, prompt),
                                     expected_output_len=output_len or default_len, request_id=f"hf-{i}"))
    return out
