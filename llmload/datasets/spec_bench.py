"""vLLM's ``spec_bench`` dataset: SpecBench's JSONL (``question.jsonl``: ``turns``, a list of user messages,
and ``category``), one request per row from its first turn, ``--spec-bench-output-len`` tokens out (default
256), ``--spec-bench-category`` keeping one category. File order unless shuffled by seed."""

from __future__ import annotations

import random
from pathlib import Path

from llmload.common.errors import DatasetError
from llmload.datasets.base import SampleRequest, Tokenizer, jsonl_objects, read_text, token_len

DEFAULT_OUTPUT_LEN = 256


def sample_spec_bench(path: str | Path, tokenizer: Tokenizer, num_prompts: int | None, seed: int = 0, *,
                      output_len: int = DEFAULT_OUTPUT_LEN, category: str | None = None,
                      shuffle: bool = True) -> list[SampleRequest]:
    """Up to ``num_prompts`` first turns of the file's rows (of ``category`` only, when given)."""
    path = Path(path)
    rows = []
    for lineno, row in jsonl_objects(path, read_text(path).splitlines()):
        turns = row.get("turns")
        if not isinstance(turns, list) or not turns or not isinstance(turns[0], str) or not turns[0]:
            raise DatasetError(f"{path}:{lineno}: expected 'turns', a list of strings (SpecBench's format)")
        if category is None or row.get("category") == category:
            rows.append((lineno, row, turns[0]))
    if not rows:
        raise DatasetError(f"{path}: no rows" + (f" of --spec-bench-category {category!r}" if category else ""))
    if shuffle:
        random.Random(seed).shuffle(rows)
    return [SampleRequest(prompt=text, prompt_len=token_len(tokenizer, text), expected_output_len=output_len,
                          request_id=str(row.get("question_id", f"{path.name}:{lineno}")))
            for lineno, row, text in rows[:num_prompts]]
