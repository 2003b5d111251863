"""The pieces every llmload pod shares: a non-root, read-only, capability-free container; secrets as
environment variables only; scratch and results volumes; resource requests (docs/kubernetes.md, "Security")."""

from __future__ import annotations

from typing import Any

from llmload.k8s.settings import RESULTS_DIR, RUN_AS, TMP_DIR, TOKENIZER_DIR, Settings

Manifest = dict[str, Any]

#: where Python, Hugging Face and matplotlib write, all under the /tmp emptyDir (the root filesystem is read-only)
SCRATCH_ENV = (("HOME", TMP_DIR), ("HF_HOME", f"{TMP_DIR}/hf"), ("MPLCONFIGDIR", f"{TMP_DIR}/matplotlib"),
               ("PYTHONDONTWRITEBYTECODE", "1"), ("PYTHONUNBUFFERED", "1"))


def labels(settings: Settings, component: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "llmload", "app.kubernetes.io/instance": settings.name,
            "app.kubernetes.io/component": component}


def metadata(settings: Settings, name: str, component: str) -> Manifest:
    meta: Manifest = {"name": name, "labels": labels(settings, component)}
    if settings.namespace:
        meta["namespace"] = settings.namespace
    return meta


def secret_env(name: str, secret: str, key: str, *, optional: bool = True) -> Manifest:
    """An environment variable from a Secret: the only way a secret reaches a pod (never a file, never args)."""
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key, "optional": optional}}}


def api_key_env(settings: Settings) -> Manifest:
    return secret_env("OPENAI_API_KEY", settings.named("api-key"), "key")


def cluster_token_env(settings: Settings) -> Manifest:
    """Workers prove they hold it before a bench master gives them a job (docs/distributed.md)."""
    return secret_env("LLMLOAD_CLUSTER_TOKEN", settings.named("cluster-token"), "token")


def tokenizer_env(settings: Settings) -> list[Manifest]:
    """Offline when a tokenizer is mounted; else Hugging Face downloads it, with the token from a Secret."""
    if settings.tokenizer_claim:
        return [{"name": "HF_HUB_OFFLINE", "value": "1"}]
    return [secret_env("HF_TOKEN", settings.named("hf-token"), "token")]


def scratch_env() -> list[Manifest]:
    return [{"name": name, "value": value} for name, value in SCRATCH_ENV]


def options_env_from(settings: Settings) -> list[Manifest]:
    return [{"configMapRef": {"name": settings.named("options")}}]


def container(name: str, image: str, command: list[str], args: list[str], *, env: list[Manifest],
              cpu: str, memory: str, env_from: list[Manifest] | None = None,
              mounts: list[Manifest] | None = None, ports: list[Manifest] | None = None,
              cpu_limit: bool = False) -> Manifest:
    resources: Manifest = {"requests": {"cpu": cpu, "memory": memory}, "limits": {"memory": memory}}
    if cpu_limit:
        resources["limits"]["cpu"] = cpu
    out: Manifest = {
        "name": name, "image": image, "imagePullPolicy": "IfNotPresent", "command": command, "args": args,
        "env": env,
    }
    if env_from:
        out["envFrom"] = env_from
    if ports:
        out["ports"] = ports
    out["resources"] = resources
    out["volumeMounts"] = [{"name": "tmp", "mountPath": TMP_DIR}, *(mounts or [])]
    out["securityContext"] = {
        "runAsNonRoot": True, "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    return out


def pod_spec(containers: list[Manifest], *, restart: str, grace_s: int,
             volumes: list[Manifest] | None = None) -> Manifest:
    return {
        "restartPolicy": restart,
        "terminationGracePeriodSeconds": grace_s,
        "automountServiceAccountToken": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": RUN_AS, "runAsGroup": RUN_AS, "fsGroup": RUN_AS,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": containers,
        "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "2Gi"}}, *(volumes or [])],
    }


def results_volume(settings: Settings) -> tuple[Manifest, Manifest]:
    """(mount, volume) of the results PVC."""
    return ({"name": "results", "mountPath": RESULTS_DIR},
            {"name": "results", "persistentVolumeClaim": {"claimName": settings.named("results")}})


def tokenizer_volume(settings: Settings) -> tuple[list[Manifest], list[Manifest]]:
    """(mounts, volumes) of a mounted tokenizer, read-only; empty when it is downloaded."""
    if not settings.tokenizer_claim:
        return [], []
    return ([{"name": "tokenizer", "mountPath": TOKENIZER_DIR, "readOnly": True}],
            [{"name": "tokenizer", "persistentVolumeClaim": {"claimName": settings.tokenizer_claim,
                                                             "readOnly": True}}])


def results_claim(settings: Settings) -> Manifest:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": metadata(settings, settings.named("results"), "results"),
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": settings.results_size}}}}


def options_config_map(settings: Settings, extra: dict[str, str] | None = None) -> Manifest:
    """The run's options as environment variables: the target and model (both ways in), and for the web UI the
    ``LLMLOAD_*`` variables ``locust -f`` reads."""
    data = {"LOCUST_HOST": settings.base_url, "LLMLOAD_MODEL": settings.model,
            "LLMLOAD_TOKENIZER": settings.tokenizer_arg, "LOCUST_LOCUSTFILE": settings.locustfile}
    data.update(extra or {})
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata(settings, settings.named("options"),
                                                                           "options"), "data": data}
