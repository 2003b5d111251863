"""Log one finished run to an MLflow tracking store (``pip install 'llmload[mlflow]'``; docs/observability.md).

Teams that already track experiments in MLflow want a load test next to their training and serving runs: the
run's options become params, the result's numbers become metrics, the result files become artifacts. It runs
once, after the run, and is never fatal: the results on disk are what counts, so every failure (MLflow missing,
a bad URI, a store that cannot be written) comes back as one warning line instead of an exception.

MLflow is imported inside :func:`log_run` only: importing it takes seconds, and most runs never log to it. The
tracking URI goes to :class:`~mlflow.tracking.MlflowClient` directly, so MLflow's global tracking URI, active
run and experiment are left as they were.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from llmload.common.urls import MASK, redact_url, secrets_in

NOT_INSTALLED = "MLflow is not installed: pip install 'llmload[mlflow]' (the run's results are unaffected)"
#: MLflow's limits (mlflow/utils/validation.py): longer param values are cut here rather than by MLflow, which
#: warns for each; a batch takes at most 100 params and 1000 entities in all
MAX_PARAM_VALUE = 6000
MAX_TAG_VALUE = 8000
MAX_KEY = 250
PARAMS_PER_BATCH = 100
ENTITIES_PER_BATCH = 1000
#: the longest warning line handed back (MLflow's messages can quote whole payloads)
MAX_WARNING = 400
#: key words that mark an option as a secret: its value is never logged
SECRET_KEY = re.compile(r"api_?key|password|passwd|secret|authorization", re.I)
#: ``token`` as a word of the key (``hf_token``, ``cluster_token_file``, ``accessToken``) marks a secret too, unless
#: its value is a number: ``max_tokens``, ``tokenizer`` and ``prefill_ms_per_token`` are settings, not credentials
TOKEN_KEY = re.compile(r"(?:^|[_.])[a-z]*token(?:$|[_.])", re.I)
#: values that look like credentials whatever their key: auth headers, provider key formats, ``key=...`` pairs
SECRET_VALUE = re.compile(
    r"\b(?:bearer|basic)\s+\S{8,}|\bsk-[\w-]{16,}|\bhf_\w{20,}|\bgh[pousr]_\w{20,}|\bAKIA[0-9A-Z]{16}\b"
    r"|\bxox[abprs]-[\w-]{10,}|(?:api[_-]?key|token|password|passwd|secret)[\"']?\s*[=:]\s*\S", re.I)
#: a secret shorter than this is matched only as a whole value: searching for ``"1"`` would drop everything
MIN_SECRET_SEARCH = 6
#: what MLflow rejects in a param or metric name (it also takes ``/`` and, off Windows, ``:``; both are replaced
#: so that a name never reads as a path and is the same on every system)
BAD_NAME_CHARS = re.compile(r"[^\w.\- ]")
#: while logging to a ``file:`` store (MLflow 3 refuses it unless opted in) and to a server (MLflow's own retries
#: of a refused connection add up to minutes at the end of a run); an explicit setting always wins
FILE_STORE_ENV = {"MLFLOW_ALLOW_FILE_STORE": "true"}
SERVER_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}


def log_run(tracking_uri: str, *, params: Mapping[str, Any], result: Mapping[str, Any], artifacts: Sequence[Path],
            experiment: str = "llmload", run_name: str | None = None) -> str | None:
    """Log one finished run to MLflow: params (the run's options), metrics (the result's numeric top-level keys),
    artifacts (files); returns None on success, else one warning line (never raises: MLflow missing, a bad URI or
    an unwritable store is a warning)."""
    secrets = secret_values(params, tracking_uri)
    try:
        import mlflow  # noqa: F401  (slow: only when a run is logged)
        from mlflow.tracking import MlflowClient
    except ImportError:
        return NOT_INSTALLED
    try:
        with scoped_env(store_env(tracking_uri)):
            client = MlflowClient(tracking_uri=tracking_uri)
            _log(client, experiment, run_name, mlflow_params(params), result, artifacts)
    except Exception as exc:  # never fatal: any failure of MLflow's is the one warning line
        return warning_line(exc, secrets)
    return None


def _log(client: Any, experiment: str, run_name: str | None, params: list[tuple[str, str]],
         result: Mapping[str, Any], artifacts: Sequence[Path]) -> None:
    """Create the run, send its params and metrics in as few batches as MLflow allows, add the files, and mark
    it finished; a failure part-way marks it failed (so the store shows a broken run as broken) and re-raises."""
    from mlflow.entities import Metric, Param

    run = client.create_run(experiment_id(client, experiment), run_name=run_name, tags=run_tags(result))
    run_id = run.info.run_id
    try:
        now_ms = int(time.time() * 1000)
        for chunk_params, chunk_metrics in batches(params, mlflow_metrics(result)):
            client.log_batch(run_id, metrics=[Metric(k, v, now_ms, 0) for k, v in chunk_metrics],
                             params=[Param(k, v) for k, v in chunk_params], synchronous=True)
        for path in artifacts:
            if path.is_dir():
                client.log_artifacts(run_id, str(path), artifact_path=path.name)
            elif path.is_file():
                client.log_artifact(run_id, str(path))
    except BaseException:
        try:
            client.set_terminated(run_id, "FAILED")
        except Exception:  # the first failure is the one to report
            pass
        raise
    client.set_terminated(run_id, "FINISHED")


def experiment_id(client: Any, name: str) -> str:
    """The id of the experiment called ``name``, created if new (another process may create it at the same
    moment: then its id is looked up again)."""
    found = client.get_experiment_by_name(name)
    if found is not None:
        return str(found.experiment_id)
    try:
        return str(client.create_experiment(name))
    except Exception:
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        return str(found.experiment_id)


def store_env(tracking_uri: str) -> dict[str, str]:
    """The environment MLflow needs for this kind of store during the call (see :data:`FILE_STORE_ENV`)."""
    scheme = urlsplit(tracking_uri).scheme.lower()
    if scheme in ("", "file") or len(scheme) == 1:  # a plain path (``C:`` on Windows) is a file store too
        return FILE_STORE_ENV
    if scheme in ("http", "https"):
        return SERVER_ENV
    return {}


@contextmanager
def scoped_env(defaults: Mapping[str, str]) -> Iterator[None]:
    """Set each variable of ``defaults`` that is unset, for the ``with`` block only: MLflow reads these from the
    environment, and the rest of the process must not see them changed."""
    added = [k for k in defaults if k not in os.environ]
    for key in added:
        os.environ[key] = defaults[key]
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


def is_secret(key: str, value: Any) -> bool:
    """Whether option ``key`` holds a credential (``api_key``, ``--hf-token``, ``db_password``; see
    :data:`TOKEN_KEY` for why ``value`` matters)."""
    key = str(key).replace("-", "_")
    if SECRET_KEY.search(key):
        return True
    return bool(TOKEN_KEY.search(key)) and finite_number(value) is None


def secret_values(params: Mapping[str, Any], tracking_uri: str = "") -> set[str]:
    """Every credential in the options (the values of secret keys, passwords in URLs) and the tracking URI: no
    param and no warning may contain one."""
    found = {str(v) for k, v in params.items() if is_secret(k, v) and v not in (None, "")}
    for text in [tracking_uri, *(v for v in params.values() if isinstance(v, str))]:
        if "://" in text and "@" in text:
            found.update(secrets_in(text))
    return found


def leaks(text: str, secrets: set[str]) -> bool:
    """Whether ``text`` holds one of ``secrets`` or looks like a credential of its own."""
    if text in secrets or SECRET_VALUE.search(text):
        return True
    return any(s in text for s in secrets if len(s) >= MIN_SECRET_SEARCH)


def mlflow_name(key: str) -> str:
    """``key`` as a name MLflow takes for a param or metric: characters it rejects become ``_``, a name that
    would read as a relative path (``.``, ``..x``) gets a ``_`` in front, and it is cut to MLflow's length."""
    name = BAD_NAME_CHARS.sub("_", str(key)).strip() or "_"
    if name.startswith("."):
        name = "_" + name
    return name[:MAX_KEY]


def param_text(value: Any) -> str:
    """An option's value as the string MLflow stores: lists and mappings as JSON, URLs without their password,
    anything else as ``str``; cut to MLflow's limit."""
    if isinstance(value, (list, tuple, set, frozenset, Mapping)):
        items = dict(value) if isinstance(value, Mapping) else list(value)
        text = json.dumps(items, default=str, sort_keys=isinstance(value, Mapping))
    else:
        text = str(value)
    if "://" in text and "@" in text and not any(c.isspace() for c in text):
        text = redact_url(text)
    return text[:MAX_PARAM_VALUE]


def mlflow_params(params: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The run's options as MLflow params: None skipped, secret keys and values that leak a secret dropped, names
    made valid (the first of two options that map to one name wins: MLflow refuses a param logged twice)."""
    secrets = secret_values(params)
    out: dict[str, str] = {}
    for key, value in params.items():
        if value is None or is_secret(key, value):
            continue
        text = param_text(value)
        if leaks(text, secrets):
            continue
        out.setdefault(mlflow_name(key), text)
    return list(out.items())


def finite_number(value: Any) -> float | None:
    """``value`` as a metric, or None for what MLflow should not get: bools, non-numbers, NaN and infinities."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    try:
        number = float(value)
    except (OverflowError, ValueError):
        return None
    return number if math.isfinite(number) else None


def mlflow_metrics(result: Mapping[str, Any]) -> list[tuple[str, float]]:
    """The result's numbers: each top-level number under its own key, and each class's under
    ``by_class.<class>.<key>``; names made valid, the first of two that map to one name kept."""
    pairs: list[tuple[str, Any]] = list(result.items())
    by_class = result.get("by_class")
    if isinstance(by_class, Mapping):
        pairs += [(f"by_class.{cls}.{key}", value) for cls, part in by_class.items()
                  if isinstance(part, Mapping) for key, value in part.items()]
    out: dict[str, float] = {}
    for key, value in pairs:
        number = finite_number(value)
        if number is not None:
            out.setdefault(mlflow_name(key), number)
    return list(out.items())


def run_tags(result: Mapping[str, Any]) -> dict[str, str]:
    """The run's tags: llmload's version, and the backend and model the result names."""
    tags: dict[str, str] = {}
    try:
        tags["llmload.version"] = metadata.version("llmload")
    except metadata.PackageNotFoundError:
        pass
    for key in ("backend", "model_id"):
        if result.get(key) not in (None, ""):
            tags[key] = str(result[key])[:MAX_TAG_VALUE]
    return tags


def batches(params: list[tuple[str, str]], metrics: list[tuple[str, float]]
            ) -> Iterator[tuple[list[tuple[str, str]], list[tuple[str, float]]]]:
    """Params and metrics in chunks that each fit one ``log_batch`` (100 params, 1000 entities in all), params
    first: a remote store gets as few requests as MLflow allows."""
    p, m = 0, 0
    while p < len(params) or m < len(metrics):
        chunk_p = params[p:p + PARAMS_PER_BATCH]
        chunk_m = metrics[m:m + ENTITIES_PER_BATCH - len(chunk_p)]
        p, m = p + len(chunk_p), m + len(chunk_m)
        yield chunk_p, chunk_m


def warning_line(exc: BaseException, secrets: set[str]) -> str:
    """One line saying why MLflow logging failed, with every known secret masked (MLflow's messages may quote
    the tracking URI or a payload)."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, MASK)
    if len(text) > MAX_WARNING:
        text = text[:MAX_WARNING - 3] + "..."
    return f"MLflow logging failed, the run's results are unaffected: {text}"
