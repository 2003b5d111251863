"""The headless run: a master Job (``llmload bench --master``: the summary in its log, the result JSON and
records on the results PVC), a worker Job of N pods and a headless Service for the master's port. Every pod
ends when the test ends; nothing restarts (``backoffLimit: 0``) and finished Jobs are cleaned up after a day."""

from __future__ import annotations

from llmload.k8s.pods import (
    Manifest,
    api_key_env,
    cluster_token_env,
    container,
    metadata,
    options_env_from,
    pod_spec,
    results_volume,
    scratch_env,
    tokenizer_env,
    tokenizer_volume,
)
from llmload.k8s.settings import RESULTS_DIR, Settings


def master_args(settings: Settings) -> list[str]:
    """``llmload bench`` on the master: the target from the options ConfigMap (Kubernetes expands ``$(VAR)``),
    the run's flags, results to the PVC."""
    return ["bench", "--master", "--expect-workers", str(settings.workers),
            "--master-bind-port", str(settings.master_port),
            "--base-url", "$(LOCUST_HOST)", "--model", "$(LLMLOAD_MODEL)", "--tokenizer", "$(LLMLOAD_TOKENIZER)",
            *settings.bench_args,
            "--stop-timeout", f"{settings.stop_timeout:g}", "--save-result", "--result-dir", RESULTS_DIR,
            "--disable-tqdm"]


def _job(settings: Settings, name: str, component: str, pod: Manifest, **spec: object) -> Manifest:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata(settings, name, component),
            "spec": {**spec, "backoffLimit": 0, "ttlSecondsAfterFinished": settings.ttl_after_finished_s,
                     "template": {"metadata": {"labels": metadata(settings, name, component)["labels"]},
                                  "spec": pod}}}


def master_job(settings: Settings) -> Manifest:
    mount, volume = results_volume(settings)
    tok_mounts, tok_volumes = tokenizer_volume(settings)
    main = container("master", settings.image, ["llmload"], master_args(settings),
                     env=[api_key_env(settings), cluster_token_env(settings), *tokenizer_env(settings),
                          *scratch_env()],
                     env_from=options_env_from(settings), cpu=settings.master_cpu, memory=settings.master_memory,
                     mounts=[mount, *tok_mounts],
                     ports=_master_ports(settings))
    pod = pod_spec([main], restart="Never", grace_s=settings.grace_s, volumes=[volume, *tok_volumes])
    return _job(settings, settings.named("master"), "master", pod, completions=1, parallelism=1)


def _master_ports(settings: Settings) -> list[Manifest]:
    """The master's port, and llmload's own /metrics when the run's flags ask for it (``--prometheus-port``)."""
    ports: list[Manifest] = [{"name": "master", "containerPort": settings.master_port}]
    flags = list(settings.bench_args)
    for k, flag in enumerate(flags):
        value = flag.split("=", 1)[1] if flag.startswith("--prometheus-port=") else (
            flags[k + 1] if flag == "--prometheus-port" and k + 1 < len(flags) else None)
        if value and value.isdigit() and int(value) > 0:
            ports.append({"name": "metrics", "containerPort": int(value)})
    return ports


def worker_args(settings: Settings) -> list[str]:
    """Every run option comes from the master; a worker needs only its address."""
    return ["bench", "--worker", "--master-host", settings.named("master"),
            "--master-port", str(settings.master_port)]


def worker_job(settings: Settings) -> Manifest:
    main = container("worker", settings.image, ["llmload"], worker_args(settings),
                     env=[cluster_token_env(settings), *scratch_env()], cpu=settings.worker_cpu,
                     memory=settings.worker_memory, cpu_limit=True)
    pod = pod_spec([main], restart="Never", grace_s=settings.grace_s)
    return _job(settings, settings.named("worker"), "worker", pod, completions=settings.workers,
                parallelism=settings.workers)


def master_service(settings: Settings) -> Manifest:
    """Headless: workers resolve the master pod itself, also before it is ready (they retry until it listens)."""
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": metadata(settings, settings.named("master"), "master"),
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                     "selector": {"app.kubernetes.io/instance": settings.name,
                                  "app.kubernetes.io/component": "master"},
                     "ports": [{"name": "master", "port": settings.master_port,
                                "targetPort": settings.master_port}]}}


def headless(settings: Settings) -> list[Manifest]:
    return [master_service(settings), master_job(settings), worker_job(settings)]
