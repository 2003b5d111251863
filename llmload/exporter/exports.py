"""A finished run's numbers pushed where a team already looks: an OpenTelemetry collector (``--otlp-endpoint``)
and MLflow (``--mlflow-tracking-uri``), for ``llmload bench`` and ``locust -f`` alike (docs/observability.md).

Both happen after the result and records are written, and neither can fail the run: a missing package, a
collector that refuses or an unwritable store is one warning line.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from llmload.options import option_value

#: option destinations never logged as MLflow params (their values are secrets or paths to them)
_PRIVATE = ("api_key", "token", "password", "secret")


def export_run(options: Any, records: Sequence[Any], result: dict[str, Any], files: Sequence[Path | None], *,
               server_address: str, say: Callable[[str], None]) -> None:
    """Push the run to the collector and log it to MLflow, as the options ask; ``files``: what the run wrote (the
    result JSON, the records file), logged as MLflow artifacts with a report made from them."""
    endpoint = option_value(options, "otlp_endpoint")
    if endpoint:
        _push_otlp(endpoint, records, result, server_address, say)
    uri = option_value(options, "mlflow_tracking_uri")
    if uri:
        _log_mlflow(uri, options, result, [f for f in files if f is not None], say)


def _push_otlp(endpoint: str, records: Sequence[Any], result: dict[str, Any], server_address: str,
               say: Callable[[str], None]) -> None:
    try:
        from llmload.exporter.otlp import push_run_metrics
    except ImportError:
        say("warning: --otlp-endpoint: the OpenTelemetry packages are not installed (pip install 'llmload[otlp]'); "
            "the run's results are unaffected")
        return
    attributes = {"llmload.backend": str(result.get("backend") or ""), "llmload.label": str(result.get("label") or "")}
    warning = push_run_metrics(endpoint, records, server_address=server_address,
                               run_attributes={k: v for k, v in attributes.items() if v})
    say(f"warning: {warning}" if warning else f"Pushed the run's metrics to {endpoint}/v1/metrics (OTLP)")


def params_of(options: Any) -> dict[str, Any]:
    """The options as MLflow params: set values only, secrets never."""
    return {k: v for k, v in sorted(vars(options).items())
            if v is not None and not k.startswith("_") and not any(p in k.lower() for p in _PRIVATE)
            and isinstance(v, str | int | float | bool | list | tuple)}


def _log_mlflow(uri: str, options: Any, result: dict[str, Any], files: list[Path], say: Callable[[str], None]) -> None:
    from llmload.exporter.mlflow_log import log_run

    with tempfile.TemporaryDirectory(prefix="llmload-report-") as tmp:
        artifacts: list[Path | None] = list(files)
        result_file = next((f for f in files if f.suffix == ".json" and f.exists()), None)
        if result_file is not None:
            artifacts.append(_report(result_file, Path(tmp) / "report", say))
        warning = log_run(uri, params=params_of(options), result=result, artifacts=[a for a in artifacts if a],
                          run_name=result.get("label") or None)
    say(f"warning: {warning}" if warning else f"Logged the run to MLflow at {uri}")


def _report(result_file: Path, out: Path, say: Callable[[str], None]) -> Path | None:
    """The run's report (``llmload report``, in a child process: the report reads the files as any user would),
    for MLflow; a failure is one line and no report."""
    import subprocess
    import sys

    try:
        done = subprocess.run([sys.executable, "-m", "llmload.cli", "report", str(result_file), "--output", str(out)],
                              capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        say(f"warning: the report for MLflow could not be made ({exc})")
        return None
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        say(f"warning: the report for MLflow could not be made ({lines[-1] if lines else done.returncode})")
        return None
    return out
