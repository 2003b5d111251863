"""The end of a ``locust -f`` run: the summary ``llmload bench`` prints, with the run's accounting, and the
records file (``--llm-records``) and its journal."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from llmload.plugin.console import tell


def run_accounting(run: Any) -> dict[str, int]:
    """Requests planned, released and not sent over every load process of the run."""
    if run.role == "master" and run.cluster:
        # the master kept every worker's share (headless open loop): the same identity as llmload bench's
        from llmload.core.conversation import request_count

        planned = request_count(run.schedule)
        lost = sum(s.in_flight for s in run.cluster.values() if s.lost)
        records = len(run.records)
        return {"planned": planned, "dispatched": records + lost, "not_sent": max(0, planned - records - lost),
                "lost": lost}
    if run.role == "master":
        reports = list(run.reports.values())
        planned = sum(r.planned for r in reports)
        dispatched = sum(r.dispatched for r in reports)
    else:
        acc = run.accounting()
        planned, dispatched = acc["planned"], acc["dispatched"]
    records = len(run.records)
    return {"planned": planned, "dispatched": dispatched, "not_sent": max(0, planned - dispatched),
            "lost": max(0, dispatched - records)}


def client_health(run: Any, lags: Sequence[float], median_itl_ms: float | None,
                  records: Iterable[Any] | None = None) -> dict[str, Any] | None:
    """The run's client health, judged as bench judges it (core/health): a local runner's own report; on a
    master the busiest worker's CPU, loop and read lags (their ``llm_done``) with the schedule lag of the records
    that arrived (re-assigned requests left out). None when no process watched it (a web UI test's workers
    that never reported)."""
    from llmload.core.health import judge, merge_health, schedule_health

    if run.role != "master":
        report = run.health_report
    else:
        workers = {run.worker_name(cid): done.health for cid, done in run.reports.items()}
        counts = run.core.config.spec.open_loop_lag_counts and run.open_loop
        report = merge_health(workers, schedule_health(lags if counts else [])) if any(workers.values()) else None
    return judge(dict(report), median_itl_ms, records) if report else None


def _class_slos(run: Any) -> dict[str, dict[str, float]] | None:
    """SLOs a locustfile set on its user classes (``goodput = {"ttft": 500}``): they replace ``--goodput`` for
    that class's requests."""
    from llmload.plugin.setup import user_classes

    slos = {cls.__name__: dict(goodput) for cls in user_classes(run.environment) if (goodput := cls.goodput)}
    return slos or None


def open_journal(opts: Any) -> Any:
    """``--llm-records``' journal (:class:`~llmload.client.records.journal.RecordJournal`): each record written
    beside the records file as it arrives, so a run that dies leaves them there; without it, an unnamed
    temporary file that only holds the texts. None (records in memory) when it cannot be opened."""
    from llmload.client.records.journal import RecordJournal

    records = getattr(opts, "llm_records", "")
    path = Path(records).with_suffix(".journal.jsonl") if records else None
    try:
        return RecordJournal(path, tell)
    except OSError as exc:
        tell(f"warning: cannot open the records journal {path or ''}: {exc.strerror or exc}; the records stay in "
             "memory")
        return None


def print_summary(run: Any) -> None:
    """The summary ``llmload bench`` prints, from the run core's metrics (:meth:`llmload.core.run.Run.finish`),
    with this run's accounting; then ``--llm-result`` and ``--llm-records``."""
    from llmload.core.run import Outcome
    from llmload.summary import format_accounting, format_summary

    if not len(run.records) or run.core is None:
        return
    opts = run.options
    kept = run.records.kept
    # requests re-assigned from a lost worker are sent late on purpose: not the client's schedule lag (their
    # lags were left out as they arrived: ClusterRole.on_records)
    lags = kept.lags()
    acc = run_accounting(run)
    measured = run.core.finish(Outcome(kept.in_send_order(), kept.span(),
                                       lags if len(lags) else None, acc["not_sent"], lost=acc["lost"]),
                               class_slos=_class_slos(run))
    records, metrics = measured.records, measured.metrics
    health = client_health(run, lags, metrics.itl.median_ms, records)
    lines = [format_summary(metrics, backend_label=opts.backend, client_health=health,
                            deployment=run.core.config.deployment),
             format_accounting(not_sent=acc["not_sent"], planned=acc["planned"],
                               workers=_workers(run) if run.role == "master" else None, lost=acc["lost"])]
    observed = getattr(run, "observed", None)
    if observed is not None and (text := observed.summary_text(metrics)):
        lines.append(text)
    print("\n".join(lines), file=sys.stderr, flush=True)
    exports = getattr(opts, "otlp_endpoint", None) or getattr(opts, "mlflow_tracking_uri", None)
    data = _result(run, metrics, acc, observed, health, records) if opts.llm_result or exports else {}
    if getattr(opts, "llm_result", ""):
        _write_result(run, data, Path(opts.llm_result))
    _write_records(run, records, observed)
    if exports:
        from llmload.exporter.exports import export_run

        files = [Path(p) if p else None for p in (getattr(opts, "llm_result", ""), getattr(opts, "llm_records", ""))]
        export_run(opts, records, data, files, server_address=(run.environment.host or "").rstrip("/"), say=tell)


def _write_records(run: Any, records: list, observed: Any) -> None:
    """``--llm-records``: the records file (and the scraped series beside it)."""
    path = getattr(run.options, "llm_records", "")
    if path:
        from llmload.client.records.file import write_records
        from llmload.core.observe import save_series

        journal = run.records.journal
        try:
            write_records(Path(path), records)
        except OSError as exc:
            kept = (f"; every record is in {journal.path}" if journal is not None and journal.path is not None
                    and journal.complete else "")
            tell(f"error: cannot write every record to {path}: {exc.strerror or exc} (the lines written are "
                 f"complete records{kept})")
            return
        if journal is not None:
            journal.remove()
        tell(f"wrote {len(records)} request records to {path}")
        save_series(observed, Path(path), tell)


def _result(run: Any, metrics: Any, acc: dict[str, int], observed: Any, health: dict[str, Any] | None,
            records: list) -> dict[str, Any]:
    """The result JSON llmload bench writes for the same run (:mod:`llmload.core.result`)."""
    from llmload.common.urls import redact_url
    from llmload.core.result import result_data

    workers = _workers(run) if run.role == "master" else None
    workload = run.workload
    return result_data(options=run.options, metrics=metrics, model_id=workload.model if workload else "",
                       tokenizer_id=workload.tokenizer_id if workload else "",
                       base_url=redact_url(run.environment.host or ""), num_prompts=_prompts(run, acc), health=health,
                       not_sent=acc["not_sent"], observed=observed, workers=workers, lost=acc["lost"],
                       workload=workload, records=records)


def _write_result(run: Any, data: dict[str, Any], path: Path) -> None:
    """``--llm-result``: the result JSON."""
    from llmload.core.result import write_json

    try:
        write_json(path, data)
    except OSError as exc:
        tell(f"error: cannot write {path}: {exc.strerror or exc}")
        run.environment.process_exit_code = 1
        return
    tell(f"wrote the result to {path}")


def _prompts(run: Any, acc: dict[str, int]) -> int:
    """``num_prompts`` as bench counts it: the schedule's entries (a conversation is one)."""
    from llmload.core.schedule import Schedule

    return len(run.schedule) if isinstance(run.schedule, Schedule) else acc["planned"]


def _workers(run: Any) -> list[dict[str, Any]]:
    """Each worker's part, as bench's result lists it: from the shares the master kept (headless open loop), else
    from the workers' own accounting (``llm_done``) and the records that arrived."""
    if run.cluster:
        return [{"worker": s.name, "assigned": len(s.assigned), "dispatched": len(s.dispatched),
                 "records": s.records, "lost": s.lost} for s in run.cluster.values()]
    by_worker = run.records.by_worker
    out = []
    for cid, report in run.reports.items():
        name = run.worker_name(cid)
        out.append({"worker": name, "assigned": report.planned, "dispatched": report.dispatched,
                    "records": by_worker.get(name, 0), "lost": False})
    return sorted(out, key=lambda w: w["worker"])
