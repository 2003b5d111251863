"""The records file: one row per request with its raw timestamps (JSON lines, or parquet with pyarrow). Every
way in writes it and ``llmload report`` reads it back through here."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import orjson

from llmload.client.records.record import RequestRecord
from llmload.common.errors import ConfigError


def records_path(result_path: Path, fmt: str) -> Path:
    stem = result_path.name[:-5] if result_path.name.endswith(".json") else result_path.name
    return result_path.with_name(f"{stem}.records.{'parquet' if fmt == 'parquet' else 'jsonl'}")


def write_records(path: Path, records: Sequence[RequestRecord], fmt: str = "jsonl") -> None:
    """One row per request with raw timestamps, for pandas (``pd.read_json(path, lines=True)``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "parquet":
        try:
            _write_parquet(path, records)
        except ImportError as exc:
            raise ConfigError(f"--records-format parquet needs pyarrow: pip install pyarrow ({exc})") from None
        return
    _write_lines(path, (orjson.dumps(r.to_dict()) + b"\n" for r in records))


#: records a parquet file's row group holds: a run of up to this many is one DataFrame, as before; a longer one is
#: written a row group at a time (issue 37: the records are read back from the journal, never all in memory)
PARQUET_ROWS = 1 << 16


def _write_parquet(path: Path, records: Sequence[RequestRecord]) -> None:
    """The records as parquet: one DataFrame when they fit in one row group; else two passes of row groups, the
    first finding the one schema every group fits (a column that is null in one group and numbers in another
    takes the numbers' type, as one DataFrame of every record would), the second writing them."""
    import pandas as pd

    if len(records) <= PARQUET_ROWS:
        pd.DataFrame([r.to_dict() for r in records]).to_parquet(path)
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    def tables() -> Iterable[Any]:
        for lo in range(0, len(records), PARQUET_ROWS):
            rows = [r.to_dict() for r in records[lo: lo + PARQUET_ROWS]]
            yield pa.Table.from_pandas(pd.DataFrame(rows), preserve_index=False)

    schema = pa.unify_schemas([t.schema for t in tables()], promote_options="permissive")
    with pq.ParquetWriter(path, schema) as writer:
        for table in tables():
            writer.write_table(table.select(schema.names).cast(schema))


#: bytes gathered before each write of the records file
_WRITE_BATCH = 1 << 16


def _write_lines(path: Path, lines: Iterable[bytes]) -> None:
    """Write JSON lines so that the file only ever ends after a complete line: when a write fails (disk full,
    quota), the file is cut back to the last whole record and the ``OSError`` is raised."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    complete = 0  # file offset after the last whole line written
    try:
        batch: list[bytes] = []
        size = 0
        for line in lines:
            batch.append(line)
            size += len(line)
            if size >= _WRITE_BATCH:
                complete = _write_batch(fd, batch, complete)
                batch, size = [], 0
        if batch:
            _write_batch(fd, batch, complete)
    finally:
        os.close(fd)


def _write_batch(fd: int, batch: list[bytes], offset: int) -> int:
    """Write whole lines at ``offset``; on failure, move ``offset`` past the lines that did get written."""
    data = b"".join(batch)
    done = 0
    try:
        while done < len(data):
            done += os.write(fd, data[done:])
    except OSError as exc:
        # keep the lines written in full before the failure
        whole = data.rfind(b"\n", 0, done) + 1
        try:
            os.ftruncate(fd, offset + whole)
        except OSError:
            pass
        raise exc from None
    return offset + done


#: field -> its annotation, as the records' dataclass spells it ("int | None", "list[float]", ...)
_TYPES = {name: str(f.type) for name, f in RequestRecord.__dataclass_fields__.items()}


def _plain(name: str, value: Any) -> Any:
    """One parquet cell as the record holds it: a table column of optional numbers turns None into NaN and ints
    into floats, lists come back as numpy arrays and numbers as numpy scalars."""
    kind = _TYPES.get(name, "")
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, float) and math.isnan(value) and "None" in kind:
        return None
    if kind.startswith("int") and isinstance(value, float) and value.is_integer():
        return int(value)
    if kind == "str" and value is None:
        return ""
    return value


def record_from_row(row: dict[str, Any]) -> RequestRecord:
    """A record from one row of a records table (parquet through pandas), every field back to its own type."""
    return RequestRecord.from_dict({k: _plain(k, v) for k, v in row.items()})


def read_records(path: str | Path) -> list[RequestRecord]:
    path = Path(path)
    if path.suffix == ".parquet":
        import pandas as pd

        return [record_from_row(row) for row in pd.read_parquet(path).to_dict("records")]
    with open(path, "rb") as f:
        return [RequestRecord.from_dict(orjson.loads(line)) for line in f if line.strip()]
