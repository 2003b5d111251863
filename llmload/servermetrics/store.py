"""The server-metrics time series of a run, as a JSON-lines file next to its records.

One line per scrape, in scrape order::

    {"t": 1234.5, "wall": 1700000000.1, "clock": 1699998765.6, "engine": "vllm",
     "series": {"running": 12.0, "ttft_seconds_sum": 3.2, "ttft_seconds_count": 40.0, ...},
     "histograms": {"ttft_seconds": [[0.001, 0.0], ..., ["+Inf", 40.0]]},
     "raw": {"process_cpu_seconds_total": 12.5, ...}, "raw_dropped": 0}

``t`` is ``perf_counter()`` seconds on the scraping process (the clock of the run's records), ``wall`` the
Unix time and ``clock`` that process's ``wall - perf_counter`` offset (as in
:func:`llmload.core.messages.clock_offset`), so a reader on another clock can move ``t`` onto its own.
JSON has no NaN or infinity: such a value is written as the string ``"NaN"``, ``"+Inf"`` or ``"-Inf"``.

``raw`` is bounded: at most :data:`FILE_RAW_LIMIT` samples a line, first those the engine mapping did not use
(the rest are in ``series`` and ``histograms`` already), then the mapped ones; ``raw_dropped`` counts what was
left out (one vLLM engine's page fits whole; a server with per-path or per-handler series may not).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from llmload.common.errors import DatasetError
from llmload.servermetrics.engines import source_names
from llmload.servermetrics.parse import split_key
from llmload.servermetrics.snapshot import Snapshot

#: raw samples written per line
FILE_RAW_LIMIT = 256
SUFFIX = ".server_metrics.jsonl"


def series_path_for(records_path: Path, suffix: str = SUFFIX) -> Path:
    """``X.records.jsonl`` (or ``X.records.parquet``, or the result ``X.json``) -> ``X.server_metrics.jsonl``, or
    ``X`` + another ``suffix`` (the GPU telemetry's)."""
    name = records_path.name
    for ending in (".records.jsonl", ".records.parquet", ".json"):
        if name.endswith(ending):
            return records_path.with_name(name[: -len(ending)] + suffix)
    return records_path.with_name(records_path.stem + suffix)


def _number(value: float) -> float | str:
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")


def _float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"not a number: {value!r}")
    return float(value)


def _bounded_raw(snapshot: Snapshot) -> tuple[dict[str, float | str], int]:
    mapped = source_names(snapshot.engine)
    keys = [k for k in snapshot.raw if split_key(k) not in mapped]
    keys += [k for k in snapshot.raw if split_key(k) in mapped]
    kept = keys[:FILE_RAW_LIMIT]
    return {k: _number(snapshot.raw[k]) for k in kept}, snapshot.raw_dropped + len(keys) - len(kept)


def encode_line(snapshot: Snapshot, clock_offset: float) -> bytes:
    """One scrape as the file's line."""
    raw, dropped = _bounded_raw(snapshot)
    obj = {
        "t": snapshot.t,
        "wall": snapshot.wall,
        "clock": clock_offset,
        "engine": snapshot.engine,
        "series": {k: _number(v) for k, v in snapshot.series.items()},
        "histograms": {
            name: [[_number(le), _number(n)] for le, n in buckets] for name, buckets in snapshot.histograms.items()
        },
        "raw": raw,
        "raw_dropped": dropped,
    }
    return orjson.dumps(obj) + b"\n"


def write_series(path: Path, snapshots: Iterable[Snapshot], clock_offset: float) -> None:
    """Write the snapshots, one JSON line each, atomically (a temporary file, then a rename).

    ``clock_offset``: ``wall - perf_counter`` of the process that took them (``core.messages.clock_offset()``)."""
    data = b"".join(encode_line(s, clock_offset) for s in snapshots)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def decode_line(obj: Any, clock_offset: float | None) -> Snapshot:
    """One line's object as a scrape, its ``t`` moved onto ``clock_offset``'s clock when given."""
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    t = _float(obj["t"])
    if clock_offset is not None and obj.get("clock") is not None:
        t += _float(obj["clock"]) - clock_offset
    engine = obj.get("engine")
    return Snapshot(
        t=t,
        wall=_float(obj.get("wall", math.nan)),
        engine=engine if isinstance(engine, str) else None,
        series={str(k): _float(v) for k, v in (obj.get("series") or {}).items()},
        histograms={
            str(name): [(_float(le), _float(n)) for le, n in buckets]
            for name, buckets in (obj.get("histograms") or {}).items()
        },
        raw={str(k): _float(v) for k, v in (obj.get("raw") or {}).items()},
        raw_dropped=int(obj.get("raw_dropped") or 0),
    )


def read_series(path: Path, clock_offset: float | None = None, *, slim: bool = False) -> list[Snapshot]:
    """The snapshots of a file :func:`write_series` wrote. With ``clock_offset`` (the reader's
    ``wall - perf_counter``), every ``t`` is moved onto the reader's clock; without it, ``t`` is as written.
    ``slim``: without their histograms and raw samples (a report reads the series alone: a day of scrapes).

    Raises :class:`~llmload.common.errors.DatasetError` naming the line for a file that is not such a file."""
    snapshots = []
    try:
        with open(path, "rb") as f:
            for lineno, line in enumerate(f, 1):
                if line.strip():
                    snapshots.append(_read_line(line, clock_offset, slim, path, lineno))
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read the server-metrics file ({exc.strerror or exc})") from None
    return snapshots


def _read_line(line: bytes, clock_offset: float | None, slim: bool, path: Path, lineno: int) -> Snapshot:
    try:
        obj = orjson.loads(line)
        if slim and isinstance(obj, dict):
            obj.pop("histograms", None)
            obj.pop("raw", None)
        return decode_line(obj, clock_offset)
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise DatasetError(f"{path}:{lineno}: not a server-metrics line ({exc})") from None
