"""Logging a finished run to MLflow (llmload.exporter.mlflow_log): one run logged once to a ``file:`` store and read
back with MLflow's own client (params, metrics, tags, artifacts; no secret anywhere in the store), bad stores
and a missing MLflow as warnings, and the pure helpers (names, secrets, batches) without MLflow.

MLflow takes seconds to import, so the store is written once per module.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from llmload.exporter import mlflow_log
from llmload.exporter.mlflow_log import (
    NOT_INSTALLED,
    batches,
    log_run,
    mlflow_metrics,
    mlflow_name,
    mlflow_params,
)

API_KEY = "sk-test-0123456789abcdefSECRET"
URL_PASSWORD = "hunter2-url-pass"
HF_TOKEN = "hf_ABCDEFGHIJKLMNOPQRSTUVWXYZ"
SECRETS = (API_KEY, URL_PASSWORD, HF_TOKEN)
PARAMS: dict[str, Any] = {
    "api_key": API_KEY,
    "hf-token": HF_TOKEN,
    "header": [f"Authorization: Bearer {API_KEY}"],  # the key's value under another option
    "base_url": f"http://bench:{URL_PASSWORD}@gpu-box:8000",
    "model": "Qwen/Qwen3-8B",
    "max_tokens": 128,
    "request_rate": 2.5,
    "tokenizer": None,
    "num_prompts": 50,
}
RESULT: dict[str, Any] = {
    "backend": "openai-chat",
    "model_id": "Qwen/Qwen3-8B",
    "completed": 48,
    "request_throughput": 3.25,
    "mean_ttft_ms": 41.5,
    "p99 ttft (ms)": 90.0,
    "failed_any": True,
    "note": "a string",
    "mean_itl_ms": math.nan,
    "max_rate": math.inf,
    "by_class": {"Chat": {"completed": 30, "mean_ttft_ms": 40.0, "label": "x"}, "Batch": {"completed": 18}},
}
EXPECTED_METRICS = {
    "completed": 48.0,
    "request_throughput": 3.25,
    "mean_ttft_ms": 41.5,
    "p99 ttft _ms_": 90.0,
    "by_class.Chat.completed": 30.0,
    "by_class.Chat.mean_ttft_ms": 40.0,
    "by_class.Batch.completed": 18.0,
}


@dataclass
class Logged:
    """The store after one :func:`log_run`, what it returned, and a client to read it back."""

    store: Path
    warning: str | None
    client: Any
    env_after: str | None
    global_uri_changed: bool


@pytest.fixture(scope="module")
def logged(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One run logged to a fresh ``file:`` store (with MLflow's file-store opt-in unset, as a user has it)."""
    mlflow = pytest.importorskip("mlflow", reason="MLflow is not installed (pip install 'llmload[mlflow]')")
    from mlflow.tracking import MlflowClient

    root = tmp_path_factory.mktemp("mlflow")
    (root / "run.json").write_text('{"completed": 48}')
    (root / "summary.txt").write_text("48 requests\n")
    (root / "series").mkdir()
    (root / "series" / "server.jsonl").write_text("{}\n")
    store = root / "store"
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
        before = mlflow.get_tracking_uri()
        warning = log_run(f"file:{store}", params=PARAMS, result=RESULT, experiment="llmload-test", run_name="r1",
                          artifacts=[root / "run.json", root / "summary.txt", root / "missing.json", root / "series"])
        env_after = os.environ.get("MLFLOW_ALLOW_FILE_STORE")
        changed = mlflow.get_tracking_uri() != before
        mp.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # to read the store back
        yield Logged(store, warning, MlflowClient(tracking_uri=f"file:{store}"), env_after, changed)


def the_run(logged: Logged) -> Any:
    experiment = logged.client.get_experiment_by_name("llmload-test")
    assert experiment is not None
    runs = logged.client.search_runs([experiment.experiment_id])
    assert len(runs) == 1
    return runs[0]


def test_logs_without_warning_or_lasting_global_change(logged: Logged) -> None:
    assert logged.warning is None
    assert logged.env_after is None  # the file-store opt-in was for the call only
    assert not logged.global_uri_changed


def test_run_metrics_tags_and_status(logged: Logged) -> None:
    run = the_run(logged)
    assert run.info.run_name == "r1"
    assert run.info.status == "FINISHED"
    assert run.data.metrics == EXPECTED_METRICS  # no string, bool, NaN or inf
    assert run.data.tags["backend"] == "openai-chat"
    assert run.data.tags["model_id"] == "Qwen/Qwen3-8B"
    assert run.data.tags["llmload.version"]


def test_params_present_and_no_secret(logged: Logged) -> None:
    params = the_run(logged).data.params
    assert params == {"model": "Qwen/Qwen3-8B", "max_tokens": "128", "request_rate": "2.5", "num_prompts": "50",
                      "base_url": "http://bench:***@gpu-box:8000"}


def test_artifacts_listed(logged: Logged) -> None:
    run_id = the_run(logged).info.run_id
    listed = {f.path: f.is_dir for f in logged.client.list_artifacts(run_id)}
    assert listed == {"run.json": False, "summary.txt": False, "series": True}
    assert [f.path for f in logged.client.list_artifacts(run_id, "series")] == ["series/server.jsonl"]


def test_no_secret_anywhere_in_the_store(logged: Logged) -> None:
    files = [p for p in logged.store.rglob("*") if p.is_file()]
    assert files
    for path in files:
        data = path.read_bytes()
        for secret in SECRETS:
            assert secret.encode() not in data, f"{secret!r} in {path}"
            assert secret not in str(path)


def test_bad_stores_are_warnings(logged: Logged, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("in the way")
    for uri in (f"file:{blocker}/store", "nonsense-scheme://user:pw-in-uri-123@host/x"):
        warning = log_run(uri, params={"api_key": API_KEY}, result={"completed": 1}, artifacts=[])
        assert isinstance(warning, str) and warning.startswith("MLflow logging failed")
        assert "\n" not in warning
        assert "pw-in-uri-123" not in warning and API_KEY not in warning


def test_mlflow_missing_is_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mlflow", None)  # ``import mlflow`` now raises ImportError
    assert log_run("file:/nowhere", params={}, result={}, artifacts=[]) == NOT_INSTALLED


def test_names_made_valid() -> None:
    assert mlflow_name("p99 ttft (ms)") == "p99 ttft _ms_"
    assert mlflow_name("a/b:c") == "a_b_c"
    assert mlflow_name("..up") == "_..up"
    assert len(mlflow_name("k" * 300)) == mlflow_log.MAX_KEY


def test_params_stringified_truncated_and_secrets_dropped() -> None:
    params = dict(mlflow_params({
        "prompt": "x" * 7000, "rates": [1, 2], "extra": {"b": 1, "a": 2}, "flag": True, "skip": None,
        "API_KEY": "short", "db_password": "p", "access-token": "tok", "cluster_token_file": "/run/tok",
        "prefill_ms_per_token": 0.5, "tokenizer": "gpt2", "other": "short", "headers": {"X-Api-Key": "abc"},
        "a b": 1, "a_b": 2,
    }))
    assert len(params["prompt"]) == mlflow_log.MAX_PARAM_VALUE
    assert params["rates"] == "[1, 2]" and params["extra"] == '{"a": 2, "b": 1}' and params["flag"] == "True"
    assert params["prefill_ms_per_token"] == "0.5" and params["tokenizer"] == "gpt2"
    assert "other" not in params  # the api key's value, under another name
    assert not {"skip", "API_KEY", "db_password", "access-token", "cluster_token_file", "headers"} & set(params)
    assert params["a b"] == "1" and params["a_b"] == "2"


def test_metrics_first_name_wins_and_non_numbers_skipped() -> None:
    metrics = dict(mlflow_metrics({"a/b": 1, "a_b": 2, "big": 10**400, "n": None, "by_class": "not a mapping"}))
    assert metrics == {"a_b": 1.0}


def test_batches_fit_mlflow_limits() -> None:
    params = [(f"p{i}", "v") for i in range(250)]
    metrics = [(f"m{i}", 1.0) for i in range(2500)]
    chunks = list(batches(params, metrics))
    assert all(len(p) <= 100 and len(p) + len(m) <= 1000 for p, m in chunks)
    assert sum(len(p) for p, _ in chunks) == 250 and sum(len(m) for _, m in chunks) == 2500
    assert list(batches([], [])) == []
