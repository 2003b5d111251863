"""The live-UI deployment: ``locust -f`` as a master Deployment with the web UI (login from a Secret) behind a
Service for port-forward or an Ingress, and its workers as a Deployment ``kubectl scale`` resizes. The run's
options are the ``LLMLOAD_*`` variables of the options ConfigMap, which ``locust -f`` reads."""

from __future__ import annotations

from llmload.k8s.pods import (
    Manifest,
    api_key_env,
    container,
    metadata,
    options_env_from,
    pod_spec,
    results_volume,
    scratch_env,
    secret_env,
    tokenizer_env,
    tokenizer_volume,
)
from llmload.k8s.settings import CUSTOM_LOCUSTFILE_DIR, RESULTS_DIR, Settings


def ui_args(settings: Settings) -> list[str]:
    return ["--master", "--master-bind-port", str(settings.master_port), "--web-port", str(settings.web_port),
            "--web-login", "--llm-records", f"{RESULTS_DIR}/records.jsonl"]


def ui_worker_args(settings: Settings) -> list[str]:
    return ["--worker", "--master-host", settings.named("ui"), "--master-port", str(settings.master_port)]


def _locustfile_volume(settings: Settings) -> tuple[Manifest, Manifest]:
    """An optional ConfigMap with a custom locustfile (``llmload k8s render --locustfile``), at /app/custom."""
    return ({"name": "locustfile", "mountPath": CUSTOM_LOCUSTFILE_DIR, "readOnly": True},
            {"name": "locustfile", "configMap": {"name": settings.named("locustfile"), "optional": True}})


def _deployment(settings: Settings, name: str, component: str, replicas: int, pod: Manifest) -> Manifest:
    selector = {"app.kubernetes.io/instance": settings.name, "app.kubernetes.io/component": component}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata(settings, name, component),
            "spec": {"replicas": replicas, "selector": {"matchLabels": selector},
                     "template": {"metadata": {"labels": metadata(settings, name, component)["labels"]},
                                  "spec": pod}}}


def ui_master(settings: Settings) -> Manifest:
    mount, volume = results_volume(settings)
    file_mount, file_volume = _locustfile_volume(settings)
    tok_mounts, tok_volumes = tokenizer_volume(settings)
    env = [api_key_env(settings), *tokenizer_env(settings), *scratch_env(),
           # USER:PASSWORD for the login page and the /llm/* API; the pod does not start without it
           secret_env("LLMLOAD_WEB_CREDENTIALS", settings.named("web-credentials"), "credentials", optional=False)]
    main = container("ui", settings.image, ["locust"], ui_args(settings), env=env,
                     env_from=options_env_from(settings), cpu=settings.master_cpu, memory=settings.master_memory,
                     mounts=[mount, file_mount, *tok_mounts],
                     ports=[{"name": "web", "containerPort": settings.web_port},
                            {"name": "master", "containerPort": settings.master_port}])
    pod = pod_spec([main], restart="Always", grace_s=settings.grace_s, volumes=[volume, file_volume, *tok_volumes])
    return _deployment(settings, settings.named("ui"), "ui", 1, pod)


def ui_workers(settings: Settings) -> Manifest:
    file_mount, file_volume = _locustfile_volume(settings)
    tok_mounts, tok_volumes = tokenizer_volume(settings)
    main = container("worker", settings.image, ["locust"], ui_worker_args(settings),
                     env=[api_key_env(settings), *tokenizer_env(settings), *scratch_env()],
                     env_from=options_env_from(settings), cpu=settings.worker_cpu, memory=settings.worker_memory,
                     mounts=[file_mount, *tok_mounts], cpu_limit=True)
    pod = pod_spec([main], restart="Always", grace_s=settings.grace_s, volumes=[file_volume, *tok_volumes])
    return _deployment(settings, settings.named("ui-worker"), "ui-worker", settings.workers, pod)


def ui_service(settings: Settings) -> Manifest:
    """The web UI (8089: ``kubectl port-forward svc/llmload-ui 8089``) and the master port the workers use."""
    return {"apiVersion": "v1", "kind": "Service", "metadata": metadata(settings, settings.named("ui"), "ui"),
            "spec": {"selector": {"app.kubernetes.io/instance": settings.name, "app.kubernetes.io/component": "ui"},
                     "ports": [{"name": "web", "port": settings.web_port, "targetPort": settings.web_port},
                               {"name": "master", "port": settings.master_port,
                                "targetPort": settings.master_port}]}}


def webui(settings: Settings) -> list[Manifest]:
    return [ui_service(settings), ui_master(settings), ui_workers(settings)]
