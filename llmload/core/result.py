"""The result JSON of a run, built and written the same way by every way in (``llmload bench --save-result``,
``locust -f --llm-result``): vLLM's keys and meanings, then llmload's own (docs/metrics.md)."""

from __future__ import annotations

import json
import math
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from llmload.metrics.streamed import StreamedList
from llmload.options import option_value
from llmload.processes.interrupts import signal_name


def result_data(*, options: Any, metrics: Any, model_id: str, tokenizer_id: str, base_url: str, num_prompts: int,
                health: dict[str, Any] | None, not_sent: int, interrupted_by: int | None = None,
                observed: Any = None, workers: list[dict[str, Any]] | None = None, lost: int = 0,
                metadata: dict[str, str] | None = None, detailed: dict[str, Any] | None = None,
                when: datetime | None = None, workload: Any = None, records: Any = None,
                extras: dict[str, Any] | None = None) -> dict[str, Any]:
    """The result JSON's content. ``options``: the run's parsed options (bench's or Locust's: the same table);
    ``base_url`` as it may be shown (credentials masked); ``workers``/``lost`` only for a distributed run;
    ``detailed``: the per-request lists (:func:`llmload.metrics.request_lists`: ``latencies`` and
    ``queue_times`` always, vLLM's ``--save-detailed`` ones when asked), else made here from ``records``;
    ``workload``: the run's :class:`~llmload.core.run.Workload` (a KV-cache trace's own reuse); ``extras``:
    today's vLLM's keys measured beside the requests (probes, ``rps_change_events``, ``spec_decode_*``)."""
    from llmload.core.ramp_events import ramp_keys
    from llmload.core.workload import schedule_spec

    rate = float(option_value(options, "request_rate"))
    data: dict[str, Any] = {
        "date": (when or datetime.now()).strftime("%Y%m%d-%H%M%S"),
        "backend": options.backend,
        "endpoint_type": options.backend,
        "label": getattr(options, "label", None),
        "model_id": model_id,
        "tokenizer_id": tokenizer_id,
        "num_prompts": num_prompts,
        "dataset_name": options.dataset_name,
        "base_url": base_url,
        **(metadata or {}),
        "request_rate": "inf" if math.isinf(rate) else rate,
        "burstiness": options.burstiness,
        "max_concurrency": getattr(options, "max_concurrency", None) or None,
        **ramp_keys(schedule_spec(options)),
        **metrics.to_result_dict(),
        "client_health": health,
        "client": {"reader": (health or {}).get("reader")},
        "not_sent": not_sent,
        "interrupted": interrupted_by is not None,
        "interrupt_signal": signal_name(interrupted_by) if interrupted_by is not None else None,
    }
    from llmload.metrics import deployment_from

    data.update(deployment_from(options).result_keys(metrics.output_throughput, metrics.total_token_throughput))
    if observed is not None:
        data.update(observed.result_keys(metrics))
    if workload is not None:
        data.update(workload.result_keys())
    if workers is not None:
        data["workers"] = workers
        data["lost_with_workers"] = lost
    if detailed is None and records is not None:
        from llmload.metrics import request_lists

        detailed = request_lists(records, metrics)
    data["rtfx"] = 0.0  # vLLM's inverse real-time factor: audio input seconds per second; no audio here
    data.update(extras or {})
    if detailed:
        data.update(detailed)
    return data


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
    if isinstance(value, StreamedList):  # made safe item by item as it is written, never held whole
        return value.mapped(json_safe)
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` as standard JSON (RFC 8259), atomically (a temporary file, then a rename).

    JSON has no infinity or NaN: a non-finite float is written as the string ``"inf"`` / ``"-inf"`` (as vLLM's
    ``benchmark_serving.py`` writes ``"request_rate": "inf"``) or as ``null`` for NaN (see :func:`json_safe`).
    Anything else that is not JSON raises ``ValueError`` / ``TypeError`` before the file is replaced. Written as
    it is encoded (the same text ``json.dumps(data, indent=2)`` makes), so per-request lists that are
    :class:`~llmload.metrics.streamed.StreamedList` are never held whole, as items or as text."""
    chunks = json.JSONEncoder(indent=2, allow_nan=False).iterencode(json_safe(data))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            for chunk in chunks:
                f.write(chunk)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # never leave a half-written file behind (disk full)
        raise


def append_json_line(path: Path, data: dict[str, Any]) -> None:
    """``--append-result``: ``data`` as one compact JSON line at the end of ``path`` (created when missing), as
    ``vllm bench serve`` appends: a newline first when the file holds something, so runs make a JSON Lines
    file. Standard JSON (:func:`json_safe`); the line is written whole with one ``write``."""
    # the Python encoder (iterencode), which iterates a StreamedList; json.dumps' C one would write it as []
    text = "".join(json.JSONEncoder(separators=(",", ":"), allow_nan=False).iterencode(json_safe(data)))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+", encoding="utf-8") as f:
        f.seek(0, os.SEEK_END)
        f.write(("\n" if f.tell() else "") + text)
