"""The end of an ``llmload bench`` run: metrics from the records, the summary, the result JSON and records, and
the exit code (docs/reliability.md)."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from llmload.bench.console import log
from llmload.bench.plan import RunPlan
from llmload.core.observe import save_series
from llmload.core.run import Outcome, Run

#: exit code of a run that completed but missed --fail-on-error-rate or --fail-on-slo
THRESHOLD_MISSED = 3


@dataclass(frozen=True)
class Finished:
    """Everything a finished run hands to its outputs."""

    plan: RunPlan
    run: Run
    outcome: Outcome
    health: dict[str, Any]


@dataclass(frozen=True)
class Concluded:
    """A finished run's numbers and where they went: what a sweep reads back of each point."""

    exit_code: int
    metrics: Any
    #: the result JSON's content (also when nothing was saved)
    result: dict[str, Any]
    result_path: Path | None
    records_path: Path | None


def report(done: Finished) -> int:
    """Print the summary, write the result JSON and records, and choose the exit code (docs/reliability.md)."""
    return conclude(done).exit_code


def conclude(done: Finished) -> Concluded:
    """:func:`report`, returning the metrics, the result and the files written with the exit code."""
    from llmload.core.health import advise_processes, judge

    plan, outcome, args = done.plan, done.outcome, done.plan.args
    measured = done.run.finish(outcome)
    records, metrics = measured.records, measured.metrics
    health_report = advise_processes(judge(done.health, metrics.itl.median_ms, records), metrics.output_throughput,
                                     getattr(args, "processes", 0) or len(outcome.workers or ()) or 1)
    _print_summary(done, metrics, records, health_report)
    data = result_data(done, metrics, records, health_report)
    paths: tuple[Path | None, Path | None] = (None, None)
    wrote = True
    if plan.save:
        wrote, paths = _save(done, data, records)
    from llmload.exporter.exports import export_run

    export_run(args, records, data, paths, server_address=done.run.target.base_url, say=log)
    return Concluded(_exit_code(args, metrics, outcome, wrote), metrics, data, *paths)


def _exit_code(args: argparse.Namespace, metrics: Any, outcome: Outcome, wrote: bool) -> int:
    from llmload.processes.interrupts import exit_code, signal_name

    if outcome.interrupted_by is not None:
        log(f"Interrupted by {signal_name(outcome.interrupted_by)}: the result above is partial")
        return exit_code(outcome.interrupted_by)
    if not metrics.completed:
        log("error: no request completed")
        return 1
    if not wrote:
        return 1
    return _threshold_exit(args, metrics)


def _print_summary(done: Finished, metrics: Any, records: list, health_report: dict[str, Any]) -> None:
    """vLLM's capped list of failed requests, the summary blocks, the accounting and the server's block."""
    from llmload.processes.interrupts import signal_name
    from llmload.summary import format_accounting, format_failed_requests, format_summary

    args, outcome = done.plan.args, done.outcome
    from llmload.metrics import deployment_from

    failed = format_failed_requests([r.error or r.failure_kind for r in records
                                     if not (r.success or r.cut_off or getattr(r, "cancelled", False))])
    if failed:
        print(failed)
    print(format_summary(metrics, backend_label=args.backend, request_rate=args.request_rate,
                         burstiness=args.burstiness, max_concurrency=args.max_concurrency,
                         client_health=health_report, deployment=deployment_from(args), extras=outcome.extras),
          flush=True)
    interrupted = signal_name(outcome.interrupted_by) if outcome.interrupted_by is not None else None
    print(format_accounting(not_sent=outcome.unsent, planned=done.run.planned, interrupted_by=interrupted,
                            workers=outcome.workers, lost=outcome.lost))
    _print_observed(outcome.observed, metrics)
    sys.stdout.flush()


def _print_observed(observed: Any, metrics: Any) -> None:
    """The GPU energy block, the server's metrics block and the saturation verdict (docs/observability.md,
    docs/energy.md)."""
    text = observed.summary_text(metrics) if observed is not None else ""
    if text:
        print(text)


def result_data(done: Finished, metrics: Any, records: list, health_report: dict[str, Any]) -> dict[str, Any]:
    """The result JSON's content (:func:`llmload.core.result.result_data`, as ``locust -f --llm-result``)."""
    from llmload.core.result import result_data as build
    from llmload.metrics import request_lists

    plan, outcome, args = done.plan, done.outcome, done.plan.args
    target = done.run.target
    assert done.run.schedule is not None
    return build(options=args, metrics=metrics, model_id=target.model, tokenizer_id=target.tokenizer_id,
                 base_url=target.shown, num_prompts=len(done.run.schedule), health=health_report,
                 not_sent=outcome.unsent, interrupted_by=outcome.interrupted_by, observed=outcome.observed,
                 workers=outcome.workers, lost=outcome.lost, metadata=plan.metadata,
                 detailed=request_lists(records, metrics, detailed=bool(args.save_detailed), streamed=True),
                 workload=done.run.workload, extras=outcome.extras)


def journal_path(args: argparse.Namespace) -> Path:
    """Where a saved run's records journal goes: beside the result, named after it when its name is known."""
    name = args.result_filename or ""
    stem = name[:-5] if name.endswith(".json") else name
    return Path(args.result_dir) / f"{stem or f'llmload-{os.getpid()}'}.journal.jsonl"


def open_journal(plan: RunPlan) -> Any:
    """The run's :class:`~llmload.client.records.journal.RecordJournal`: beside the result when the run is saved
    (a run that dies leaves its records there), else an unnamed temporary file that only holds the texts."""
    from llmload.client.records.journal import RecordJournal

    path = journal_path(plan.args) if plan.save else None
    try:
        journal = RecordJournal(path, log)
    except OSError as exc:
        log(f"warning: cannot open the records journal {path or ''}: {exc.strerror or exc}; the records stay in "
            "memory")
        return None
    if path is not None:
        log(f"Records are written to {path} as they arrive (removed once the records file is written)")
    return journal


def _save(done: Finished, data: dict[str, Any], records: list) -> tuple[bool, tuple[Path | None, Path | None]]:
    """Write the result JSON, then the records; a failure of one is one line on stderr and never stops the
    other. Returns whether both were written, and the paths that were."""
    from llmload.bench.results import default_filename, records_path, write_json, write_records

    args = done.plan.args
    label = args.label or args.backend
    filename = args.result_filename or default_filename(label, args.request_rate, args.max_concurrency,
                                                        done.run.target.model,
                                                        datetime.strptime(data["date"], "%Y%m%d-%H%M%S"))
    path = Path(args.result_dir) / filename
    rec_path = records_path(path, args.records_format)
    ok = True
    try:
        if args.append_result:
            from llmload.core.result import append_json_line

            append_json_line(path, data)
        else:
            write_json(path, data)
    except OSError as exc:
        log(f"error: cannot write the result JSON {path}: {exc.strerror or exc}")
        ok = False
    journal = done.outcome.journal
    try:
        write_records(rec_path, records, args.records_format)
    except OSError as exc:
        kept = (f"; every record is in {journal.path}" if journal is not None and journal.path is not None
                and journal.complete else "")
        log(f"error: cannot write every record to {rec_path}: {exc.strerror or exc} (the lines written are "
             f"complete records{kept})")
        return False, (path if ok else None, None)
    if journal is not None:
        journal.remove()
    save_series(done.outcome.observed, rec_path, log)
    if ok:
        log(f"Saved result to {path} and {len(records)} request records to {rec_path}")
    return ok, (path if ok else None, rec_path)


def _threshold_exit(args: argparse.Namespace, metrics: Any) -> int:
    """``--fail-on-error-rate`` / ``--fail-on-slo``: exit 3 when the run completed but missed the bar."""
    sent = max(1, metrics.sent)
    if args.fail_on_error_rate is not None:
        failed = metrics.failed + metrics.cut_off
        if failed / sent > args.fail_on_error_rate:
            log(f"error: {failed} of {metrics.sent} requests failed ({failed / sent:.1%}), above "
                 f"--fail-on-error-rate {args.fail_on_error_rate:g}")
            return THRESHOLD_MISSED
    if args.fail_on_slo is not None and metrics.good_requests is not None:
        good = metrics.good_requests
        if good / sent < args.fail_on_slo:
            log(f"error: {good} of {metrics.sent} requests met every --goodput SLO ({good / sent:.1%}), below "
                 f"--fail-on-slo {args.fail_on_slo:g}")
            return THRESHOLD_MISSED
    return 0
