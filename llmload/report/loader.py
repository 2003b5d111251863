"""Load a RUN for ``llmload report`` / ``llmload compare`` into one common :class:`Run`.

A RUN is a result JSON in one of two shapes:

    llmload     our result JSON (``ttft_rule``, ``client_health``...) with ``<name>.records.jsonl`` (or
                ``.parquet``) beside it: raw perf_counter timestamps of every chunk of every request
    vllm        vLLM ``benchmark_serving.py --save-detailed`` output: ``ttfts``, ``itls``, ``input_lens``,
                ``output_lens``, ``errors`` per request, but no send or arrival times; each request is rebuilt
                as a record that starts at 0 (first token at TTFT, then one chunk per ITL), so TTFT, TPOT,
                TPOT excl. 1st ITL, ITL and E2EL are exact, while the figures over time are skipped

Our JSON without a records file but with the ``--save-detailed`` lists is read like vLLM's. The server's
metrics scraped during an llmload run (``<name>.server_metrics.jsonl`` beside the records) come along in
:attr:`Run.server`, on the records' clock.

Standard JSON only has finite numbers: an infinite rate is the string ``"inf"`` (vLLM's ``request_rate`` and
ours), kept as written. Files holding Python's non-JSON ``Infinity`` / ``NaN`` (older llmload versions) are
still read, those values becoming ``"inf"`` / ``"-inf"`` / ``None`` like our writer's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmload.client.records import RequestRecord
from llmload.common.choices import RECORDS_FORMATS
from llmload.common.errors import DatasetError
from llmload.report.records import RecordsFile, records_span

if TYPE_CHECKING:
    from llmload.servermetrics.snapshot import Snapshot

#: keys only our result JSON has
_OUR_KEYS = ("ttft_rule", "client_health", "total_requests", "mean_tpot_steady_ms")
#: per-request lists a vLLM ``--save-detailed`` result must carry
_DETAILED_REQUIRED = ("ttfts", "itls", "output_lens")


@dataclass(slots=True)
class Run:
    """One benchmark run, whatever wrote it."""

    label: str
    path: Path
    #: "llmload" (records with timestamps) or "vllm" (per-request lists, no timestamps)
    source: str
    #: the result JSON as read (summary keys and metadata)
    summary: dict[str, Any]
    duration: float
    #: one per request in the order written, read from the records file as they are asked for (an llmload run:
    #: :class:`~llmload.report.records.RecordsFile`); for vLLM runs ``start`` is 0 and times are relative
    records: Sequence[RequestRecord]
    #: send / chunk arrival timestamps exist (timelines, throughput over time, errors over time)
    has_timestamps: bool
    notes: list[str] = field(default_factory=list)
    #: the server's metrics scraped during the run (``X.server_metrics.jsonl``), ``t`` on the records' clock;
    #: empty when there is no such file
    server: list[Snapshot] = field(default_factory=list)
    #: the GPU telemetry scraped during the run (``X.gpu_metrics.jsonl``,
    #: :class:`~llmload.energy.summary.GpuScrape`), ``t`` on the records' clock; empty when there is none
    gpu: list[Any] = field(default_factory=list)

    @property
    def simulated(self) -> bool:
        return self.summary.get("base_url") == "llmload-sim"

    @property
    def client_health(self) -> dict[str, Any] | None:
        health = self.summary.get("client_health")
        return health if isinstance(health, dict) else None

    @property
    def goodput_slos(self) -> dict[str, float] | None:
        slos = self.summary.get("goodput_slos_ms")
        return dict(slos) if isinstance(slos, dict) and slos else None

    @property
    def percentiles(self) -> tuple[float, ...]:
        """The percentiles the run reported (from its ``p*_ttft_ms`` keys); at least 99."""
        found = set()
        for key in self.summary:
            if key.startswith("p") and key.endswith("_ttft_ms"):
                try:
                    found.add(float(key[1:-8]))
                except ValueError:
                    pass
        return tuple(sorted(found | {99.0}))


def _read_json(path: Path) -> dict[str, Any]:
    import orjson

    if not path.exists():
        raise DatasetError(f"{path}: no such file")
    if path.is_dir():
        raise DatasetError(f"{path}: is a directory, expected a result JSON")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        data = _read_lenient(raw)
        if data is None:
            raise DatasetError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise DatasetError(f"{path}: expected a JSON object (a result JSON), found a {type(data).__name__}")
    return data


def _read_lenient(raw: bytes) -> Any:
    """Python's ``Infinity`` / ``-Infinity`` / ``NaN`` (not JSON, but what ``json.dump`` writes by default and
    what older llmload versions wrote) read as the standard forms our writer uses now: ``"inf"``, ``"-inf"``
    and ``None``. ``None`` if the bytes are not that either."""
    import json

    constants = {"Infinity": "inf", "-Infinity": "-inf", "NaN": None}
    try:
        return json.loads(raw, parse_constant=lambda name: constants[name])
    except (ValueError, UnicodeDecodeError):
        return None


def records_file_for(path: Path) -> Path | None:
    """``X.records.jsonl`` (or ``.parquet``) next to ``X.json``, if it exists."""
    stem = path.name[:-5] if path.name.endswith(".json") else path.stem
    for ext in RECORDS_FORMATS:
        candidate = path.with_name(f"{stem}.records.{ext}")
        if candidate.exists():
            return candidate
    return None


def _duration(data: dict[str, Any], path: Path) -> float:
    value = data.get("duration")
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
        raise DatasetError(f"{path}: 'duration' is missing or not a positive number of seconds")
    return float(value)


def _label(data: dict[str, Any], path: Path) -> str:
    label = data.get("label")
    if isinstance(label, str) and label:
        return label
    stem = path.name[:-5] if path.name.endswith(".json") else path.stem
    return stem


def _read_records(records_path: Path, last_wins: bool = False) -> RecordsFile:
    """The file's records, read as they are asked for (:class:`RecordsFile`; its scan checks every line)."""
    records = RecordsFile(records_path, last_wins=last_wins)
    if not len(records):
        raise DatasetError(f"{records_path}: holds no request records")
    return records


def _from_records(data: dict[str, Any], path: Path, records_path: Path) -> Run:
    run = Run(label=_label(data, path), path=path, source="llmload", summary=data,
              duration=_duration(data, path), records=_read_records(records_path), has_timestamps=True)
    _attach_server(run, records_path)
    _attach_gpu(run, records_path)
    return run


def _from_records_alone(path: Path) -> Run:
    """A records file or records journal without its result JSON (a run that died: docs/reliability.md,
    "Records journal"): the duration is the records' span, from the first start to the last chunk."""
    if not path.exists():
        raise DatasetError(f"{path}: no such file")
    label = path.name.split(".")[0] or path.name
    # a journal holds a record a frozen worker sent twice twice: the last one counts, as in the records file
    records = _read_records(path, last_wins=True)
    start, end = records_span(records) or (0.0, 0.0)
    run = Run(label=label, path=path, source="llmload", summary={"label": label}, duration=max(end - start, 1e-9),
              records=records, has_timestamps=True)
    _attach_server(run, path)
    _attach_gpu(run, path)
    run.notes.append(f"{path.name} is read without a result JSON: the duration is the records' span "
                     f"({run.duration:.1f} s), and what only the result says (settings, server, health) is not "
                     "shown.")
    return run


#: a series with no scrape within this many seconds of the records' span is on another clock
_CLOCK_SLACK_S = 60.0


def _attach_gpu(run: Run, records_path: Path) -> None:
    """Load ``X.gpu_metrics.jsonl`` next to the records (written by the process that wrote them: the same clock).
    An unreadable file is a note."""
    from llmload.energy.report import gpu_series_path, read_gpu_series

    try:
        run.gpu = read_gpu_series(gpu_series_path(records_path))
    except (OSError, ValueError, KeyError) as exc:
        run.notes.append(f"GPU telemetry not shown: {type(exc).__name__}: {exc}")


def _attach_server(run: Run, records_path: Path) -> None:
    """Load ``X.server_metrics.jsonl`` next to the records, onto the records' clock.

    Records and series are both ``perf_counter`` seconds of the process that wrote them; ``llmload bench``
    writes both from one process, so ``t`` is taken as written, like the records' times. A result JSON that
    carries its records' ``clock`` (``wall - perf_counter``) moves the series by the difference to the file's
    own ``clock``. An unreadable file or a series on another clock is a note, never an error: the client's
    report stands without it."""
    from llmload.servermetrics.store import read_series, series_path_for

    series_path = series_path_for(records_path)
    if not series_path.exists():
        return
    clock = run.summary.get("clock")
    offset = float(clock) if isinstance(clock, int | float) and not isinstance(clock, bool) else None
    try:
        snapshots = read_series(series_path, offset, slim=True)
    except DatasetError as exc:
        run.notes.append(f"server metrics not shown: {exc}")
        return
    span = records_span(run.records) or (0.0, 0.0)
    lo, hi = span[0] - _CLOCK_SLACK_S, span[1] + _CLOCK_SLACK_S
    if snapshots and not any(lo <= s.t <= hi for s in snapshots):
        run.notes.append(f"server metrics not shown: {series_path.name} has no scrape during the records' "
                         "time span (written on another clock?)")
        return
    run.server = sorted(snapshots, key=lambda s: s.t)


def _list(data: dict[str, Any], key: str, n: int, path: Path, default: Any) -> list:
    value = data.get(key)
    if value is None:
        return [default] * n
    if not isinstance(value, list) or len(value) != n:
        raise DatasetError(f"{path}: '{key}' must be a list with one entry per request ({n})")
    return value


def _from_detailed(data: dict[str, Any], path: Path) -> Run:
    """Rebuild records from vLLM's per-request lists: first token at TTFT, one chunk per ITL; from start 0, or,
    in today's ``vllm bench serve`` files, from ``start_times`` (its send times; ``queue_times`` the wait before),
    which puts the runs' figures over time back in."""
    ttfts = data["ttfts"]
    if not isinstance(ttfts, list):
        raise DatasetError(f"{path}: 'ttfts' must be a list")
    n = len(ttfts)
    itls = _list(data, "itls", n, path, [])
    output_lens = _list(data, "output_lens", n, path, 0)
    input_lens = _list(data, "input_lens", n, path, 0)
    errors = _list(data, "errors", n, path, "")
    texts = _list(data, "generated_texts", n, path, "")
    timed = isinstance(data.get("start_times"), list) and len(data["start_times"]) == n
    starts = _list(data, "start_times", n, path, 0.0) if timed else [0.0] * n
    queues = _list(data, "queue_times", n, path, 0.0) if timed else [None] * n
    records = []
    try:
        for i in range(n):
            error = str(errors[i] or "")
            ttft = float(ttfts[i] or 0.0)
            out = int(output_lens[i] or 0)
            success = not error and (ttft > 0 or out > 0)
            chunk_times: list[float] = []
            start = float(starts[i] or 0.0)
            if success and ttft > 0:
                t = start + ttft
                chunk_times.append(t)
                for gap in itls[i] or []:
                    t += float(gap)
                    chunk_times.append(t)
            records.append(RequestRecord(
                request_id=str(i), prompt_len=int(input_lens[i] or 0), start=start,
                intended_send=None if queues[i] is None else start - float(queues[i] or 0.0),
                first_token=chunk_times[0] if chunk_times else None, chunk_times=chunk_times,
                chunk_tokens=[1] * len(chunk_times), output_tokens=out if success else 0,
                output_tokens_source="usage", generated_text=str(texts[i] or ""),
                success=success and bool(chunk_times), error=error,
            ))
    except (TypeError, ValueError) as exc:
        raise DatasetError(f"{path}: per-request lists hold a value that is not a number ({exc})") from None
    run = Run(label=_label(data, path), path=path, source="vllm", summary=data, duration=_duration(data, path),
              records=records, has_timestamps=timed)
    if not timed:
        run.notes.append(
            "vLLM-format result (per-request TTFT and ITLs, no send or arrival times): the request timeline, "
            "tokens/s and in-flight requests over time and errors over time are skipped.")
    return run


def load_run(path: str | Path, label: str | None = None) -> Run:
    """Read one RUN (see the module docstring); raise :class:`DatasetError` with one line if unusable."""
    path = Path(path)
    run = _from_records_alone(path) if path.suffix in (".jsonl", ".parquet") else _from_result(path)
    if label:
        run.label = label
    if not any(r.success and not r.cut_off for r in run.records):
        raise DatasetError(f"{path}: no successful requests in this run; nothing to report")
    return run


def _from_result(path: Path) -> Run:
    """A result JSON: llmload's (with its records file or ``--save-detailed`` lists) or vLLM's."""
    data = _read_json(path)
    ours = any(k in data for k in _OUR_KEYS)
    records_path = records_file_for(path) if ours else None
    has_detailed = all(isinstance(data.get(k), list) for k in _DETAILED_REQUIRED)
    if records_path is not None:
        run = _from_records(data, path, records_path)
    elif has_detailed:
        run = _from_detailed(data, path)
        if ours:
            run.source = "llmload"
            run.notes[-1] = (f"no records file next to {path.name}: read the --save-detailed lists, "
                             "so the figures over time are skipped.")
    elif ours:
        raise DatasetError(
            f"{path}: an llmload result without its records file ({path.name[:-5]}.records.jsonl) or "
            "--save-detailed lists; keep the records file next to the JSON"
        )
    elif "duration" in data and ("completed" in data or "mean_ttft_ms" in data):
        raise DatasetError(
            f"{path}: a vLLM result without per-request data; re-run benchmark_serving.py with --save-detailed"
        )
    else:
        raise DatasetError(
            f"{path}: neither an llmload result JSON nor a vLLM benchmark_serving result "
            "(expected keys such as 'duration', 'ttfts', 'itls')"
        )
    return run


def load_runs(paths: list[str], labels: list[str] | None = None) -> list[Run]:
    """Load several RUNs; labels default to each run's own and are made unique (``name``, ``name#2``)."""
    runs = [load_run(p, labels[i] if labels and i < len(labels) else None) for i, p in enumerate(paths)]
    seen: dict[str, int] = {}
    for run in runs:
        n = seen.get(run.label, 0) + 1
        seen[run.label] = n
        if n > 1:
            run.label = f"{run.label}#{n}"
    return runs
