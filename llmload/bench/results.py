"""Write a run's result JSON (vLLM's keys and file name) and its per-request records file."""

from __future__ import annotations

import json
import math
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from llmload.records.file import read_records, record_from_row, records_path, write_records

__all__ = ["default_filename", "json_safe", "read_records", "record_from_row", "records_path", "write_json",
           "write_records"]


def default_filename(label: str, request_rate: float, max_concurrency: int | None, model_id: str, when: datetime) -> str:
    """vLLM's ``{label}-{rate}qps[-concurrency{N}]-{model}-{YYYYmmdd-HHMMSS}.json``."""
    concurrency = f"-concurrency{max_concurrency}" if max_concurrency is not None else ""
    return f"{label}-{request_rate}qps{concurrency}-{model_id.split('/')[-1]}-{when.strftime('%Y%m%d-%H%M%S')}.json"


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float replaced, inside dicts, lists and tuples: ``inf`` becomes the
    string ``"inf"`` and ``-inf`` the string ``"-inf"`` (the way vLLM writes an infinite ``request_rate``),
    ``nan`` becomes ``None`` (JSON ``null``: no value)."""
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        if math.isnan(value):
            return None
        return "inf" if value > 0 else "-inf"
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` as standard JSON (RFC 8259), atomically (a temporary file, then a rename).

    JSON has no infinity or NaN: a non-finite float is written as the string ``"inf"`` / ``"-inf"`` (as vLLM's
    ``benchmark_serving.py`` writes ``"request_rate": "inf"``) or as ``null`` for NaN (see :func:`json_safe`).
    Anything else that is not JSON raises ``ValueError`` / ``TypeError`` before the file is replaced."""
    text = json.dumps(json_safe(data), indent=2, allow_nan=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # never leave a half-written file behind (disk full)
        raise
