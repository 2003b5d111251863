"""Trace files: detect the format, read every row, validate it, order the rows by time.

Formats and their columns are described in :mod:`llmload.datasets.traces`. Every problem is one
:class:`~llmload.common.errors.DatasetError` naming the file, line and column.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from llmload.common.choices import TRACE_FORMATS
from llmload.common.errors import ConfigError, DatasetError
from llmload.datasets.base import jsonl_objects, reading

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")
"""The BurstGPT columns we read; ``Model``, ``Total tokens`` and ``Log Type`` may be present too."""


@dataclass
class TraceRow:
    """One request of a trace, before prompts are built."""

    t: float
    """Seconds on the trace's own clock (any origin)."""
    input_tokens: int
    """Prompt tokens; ignored when ``prompt`` is set."""
    output_tokens: int
    """Output tokens the trace recorded."""
    line: int
    """1-based line in the file, for ids and messages."""
    prompt: str | None = None
    """Prompt text given by the trace (JSONL only)."""
    hash_ids: tuple[int, ...] | None = None
    """Mooncake: the ids of the prompt's prefix blocks, in order; equal ids are the same block of tokens."""


@dataclass(frozen=True)
class MooncakeKeys:
    """How a Mooncake-style JSONL trace names its fields, and the unit of its timestamps (vLLM's
    ``--timed-trace-label-*`` and ``--timed-trace-sec-multiplier``)."""

    timestamp: str = "timestamp"
    input_length: str = "input_length"
    output_length: str = "output_length"
    hash_ids: str = "hash_ids"
    #: seconds per timestamp unit (Mooncake's are milliseconds)
    seconds_per_unit: float = 0.001


def detect_format(path: str | Path) -> str:
    """``azure``, ``burstgpt`` or ``jsonl`` from the file's first non-blank line."""
    path = Path(path)
    first = _first_line(path)
    if first.lstrip().startswith("{"):
        return "mooncake" if '"hash_ids"' in first or '"input_length"' in first else "jsonl"
    header = [c.strip().lstrip("\ufeff") for c in next(csv.reader([first]))]
    if all(c in header for c in AZURE_COLUMNS):
        return "azure"
    if all(c in header for c in BURSTGPT_COLUMNS):
        return "burstgpt"
    raise DatasetError(
        f"{path}:1: unknown trace format (header {first.strip()[:80]!r}); expected Azure "
        f"({','.join(AZURE_COLUMNS)}), BurstGPT ({','.join(BURSTGPT_COLUMNS)}) or JSONL with 't': "
        "pass --trace-format"
    )


def read_trace(path: str | Path, trace_format: str | None = None,
               mooncake: MooncakeKeys | None = None) -> list[TraceRow]:
    """All rows of a trace file, ordered by time (stable), validated."""
    path = Path(path)
    if trace_format is None:
        trace_format = detect_format(path)
    if trace_format not in TRACE_FORMATS:
        raise ConfigError(f"--trace-format must be one of {', '.join(TRACE_FORMATS)}, got {trace_format!r}")
    if trace_format == "mooncake":
        rows = _read_mooncake(path, mooncake or MooncakeKeys())
    elif trace_format == "jsonl":
        rows = _read_jsonl(path)
    else:
        rows = _read_csv(path, trace_format)
    if not rows:
        raise DatasetError(f"{path}: the trace has no requests")
    rows.sort(key=lambda r: r.t)
    return rows


def _reading(path: Path) -> Any:
    """One line for each way reading a trace file fails."""
    return reading(path, "trace")


def _first_line(path: Path) -> str:
    with _reading(path), path.open(encoding="utf-8-sig") as f:
        for line in f:
            if line.strip():
                return line
    raise DatasetError(f"{path}: the trace file is empty")


def _read_text_lines(path: Path) -> list[str]:
    with _reading(path):
        return path.read_text(encoding="utf-8-sig").splitlines()


def _read_csv(path: Path, trace_format: str) -> list[TraceRow]:
    wanted = AZURE_COLUMNS if trace_format == "azure" else BURSTGPT_COLUMNS
    lines = _read_text_lines(path)
    reader = csv.reader(lines)
    header: list[str] | None = None
    columns: list[list[str]] = [[], [], []]
    linenos: list[int] = []
    for fields in reader:
        lineno = reader.line_num
        if not fields or all(not f.strip() for f in fields):
            continue
        if header is None:
            header = [f.strip() for f in fields]
            missing = [c for c in wanted if c not in header]
            if missing:
                raise DatasetError(
                    f"{path}:{lineno}: the {trace_format} trace header lacks column(s) "
                    f"{', '.join(missing)} (header: {','.join(header)[:80]})"
                )
            index = [header.index(c) for c in wanted]
            continue
        if len(fields) != len(header):
            raise DatasetError(f"{path}:{lineno}: expected {len(header)} fields, got {len(fields)}")
        for col, i in zip(columns, index, strict=True):
            col.append(fields[i].strip())
        linenos.append(lineno)
    if header is None:
        raise DatasetError(f"{path}: the trace file is empty")
    line_arr = np.asarray(linenos, dtype=np.int64)
    if trace_format == "azure":
        times = _parse_datetimes(path, columns[0], line_arr, wanted[0])
    else:
        times = _parse_numbers(path, columns[0], line_arr, wanted[0], integer=False)
    inputs = _parse_numbers(path, columns[1], line_arr, wanted[1], integer=True)
    outputs = _parse_numbers(path, columns[2], line_arr, wanted[2], integer=True)
    return [
        TraceRow(t=float(t), input_tokens=int(i), output_tokens=int(o), line=int(n))
        for t, i, o, n in zip(times, inputs, outputs, line_arr, strict=True)
    ]


def _parse_datetimes(path: Path, values: list[str], lines: np.ndarray, column: str) -> np.ndarray:
    """ISO-8601 date-times to float seconds since the epoch (ns precision kept until the subtraction)."""
    import pandas as pd

    if not values:
        return np.zeros(0)
    try:
        stamps = pd.to_datetime(pd.Series(values), format="ISO8601", utc=True)
    except (ValueError, TypeError, OverflowError):
        for value, line in zip(values, lines, strict=True):
            try:
                pd.to_datetime(value, format="ISO8601", utc=True)
            except (ValueError, TypeError, OverflowError):
                raise DatasetError(
                    f"{path}:{line}: column {column}: {value!r} is not a date-time like 2023-11-16 18:15:46.6805900"
                ) from None
        raise DatasetError(f"{path}: column {column}: mixed date-time formats") from None
    if stamps.isna().any():
        bad = int(np.flatnonzero(stamps.isna().to_numpy())[0])
        raise DatasetError(f"{path}:{lines[bad]}: column {column}: empty date-time")
    ns = stamps.astype("int64").to_numpy()
    # seconds relative to the first row keep full precision in float64; the origin is irrelevant
    return (ns - ns[0]) / 1e9


def _parse_numbers(
    path: Path, values: list[str], lines: np.ndarray, column: str, *, integer: bool
) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=np.float64)
    except ValueError:
        for value, line in zip(values, lines, strict=True):
            try:
                float(value)
            except ValueError:
                raise DatasetError(f"{path}:{line}: column {column!r}: {value!r} is not a number") from None
        raise DatasetError(f"{path}: column {column!r}: cannot read the numbers") from None
    bad = ~np.isfinite(arr) | (arr < 0)
    if integer:
        bad |= arr != np.floor(arr)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        what = "a non-negative integer" if integer else "a non-negative finite number"
        raise DatasetError(f"{path}:{lines[i]}: column {column!r}: {values[i]!r} is not {what}")
    return arr.astype(np.int64) if integer else arr


def _read_jsonl(path: Path) -> list[TraceRow]:
    rows: list[TraceRow] = []
    for lineno, obj in jsonl_objects(path, _read_text_lines(path)):
        t = obj.get("t")
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
            raise DatasetError(
                f"{path}:{lineno}: key 't' must be a non-negative number of seconds, got {t!r}"
            )
        output = _json_count(path, lineno, obj, "output_tokens")
        prompt = obj.get("prompt")
        if prompt is not None:
            if not isinstance(prompt, str) or not prompt:
                raise DatasetError(f"{path}:{lineno}: key 'prompt' must be a non-empty string")
            rows.append(TraceRow(float(t), 0, output, lineno, prompt))
        else:
            if "input_tokens" not in obj:
                raise DatasetError(f"{path}:{lineno}: needs 'input_tokens' or 'prompt'")
            rows.append(TraceRow(float(t), _json_count(path, lineno, obj, "input_tokens"), output, lineno))
    return rows


def _json_count(path: Path, lineno: int, obj: dict[str, Any], key: str) -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise DatasetError(f"{path}:{lineno}: key {key!r} must be a non-negative integer, got {value!r}")
    return value


def _read_mooncake(path: Path, keys: MooncakeKeys) -> list[TraceRow]:
    """Mooncake's JSONL (``{"timestamp": ms, "input_length": n, "output_length": m, "hash_ids": [...]}``)."""
    rows: list[TraceRow] = []
    for lineno, obj in jsonl_objects(path, _read_text_lines(path)):
        t = obj.get(keys.timestamp)
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
            raise DatasetError(f"{path}:{lineno}: key {keys.timestamp!r} must be a non-negative number, got {t!r}")
        ids = obj.get(keys.hash_ids, [])
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise DatasetError(f"{path}:{lineno}: key {keys.hash_ids!r} must be a list of integers, got "
                               f"{str(ids)[:60]!r}")
        rows.append(TraceRow(float(t) * keys.seconds_per_unit, _json_count(path, lineno, obj, keys.input_length),
                             _json_count(path, lineno, obj, keys.output_length), lineno, hash_ids=tuple(ids)))
    return rows
