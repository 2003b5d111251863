"""Write a run's result JSON (vLLM's keys and file name) and its per-request records file."""

from __future__ import annotations

from datetime import datetime

from llmload.client.records.file import read_records, record_from_row, records_path, write_records
from llmload.core.result import json_safe, write_json

__all__ = ["default_filename", "json_safe", "read_records", "record_from_row", "records_path", "write_json",
           "write_records"]


def default_filename(label: str, request_rate: float, max_concurrency: int | None, model_id: str, when: datetime) -> str:
    """vLLM's ``{label}-{rate}qps[-concurrency{N}]-{model}-{YYYYmmdd-HHMMSS}.json``."""
    concurrency = f"-concurrency{max_concurrency}" if max_concurrency is not None else ""
    return f"{label}-{request_rate}qps{concurrency}-{model_id.split('/')[-1]}-{when.strftime('%Y%m%d-%H%M%S')}.json"


