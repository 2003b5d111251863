"""What a rendered deployment is made of: the names, the image, the target, the run's flags, the sizes."""

from __future__ import annotations

from dataclasses import dataclass

#: the image's non-root user and group (k8s/Dockerfile creates them)
RUN_AS = 10001
#: where the pods write results (a PVC), scratch (an emptyDir) and read a mounted tokenizer
RESULTS_DIR = "/results"
TMP_DIR = "/tmp"
TOKENIZER_DIR = "/tokenizer"
#: the locustfiles inside the image; a custom one is mounted from a ConfigMap here
LOCUSTFILES_DIR = "/app/locustfiles"
CUSTOM_LOCUSTFILE_DIR = "/app/custom"
#: seconds a pod gets after SIGTERM beyond the run's --stop-timeout: time to write every result
GRACE_MARGIN_S = 30


@dataclass(frozen=True)
class Settings:
    """One deployment of llmload (defaults: what the kustomize base under ``k8s/`` holds)."""

    workers: int = 4
    base_url: str = "http://vllm.default.svc:8000"
    model: str = "Qwen/Qwen3-8B"
    #: --tokenizer (default: the model's id; with ``tokenizer_claim``: the mounted directory)
    tokenizer: str | None = None
    #: a PVC holding a tokenizer directory, mounted read-only at /tokenizer (then nothing is downloaded)
    tokenizer_claim: str | None = None
    image: str = "llmload:latest"
    name: str = "llmload"
    namespace: str | None = None
    #: bench flags for the run (the master Job's args, or the web UI's LLMLOAD_* variables)
    bench_args: tuple[str, ...] = ("--num-prompts", "1000", "--request-rate", "10", "--seed", "0")
    master_port: int = 5557
    web_port: int = 8089
    stop_timeout: float = 10.0
    results_size: str = "1Gi"
    #: seconds a finished Job (and its pods' logs) stays before Kubernetes deletes it
    ttl_after_finished_s: int = 86400
    worker_cpu: str = "1"
    worker_memory: str = "1Gi"
    master_cpu: str = "1"
    master_memory: str = "2Gi"
    locustfile: str = f"{LOCUSTFILES_DIR}/sharegpt.py"

    def named(self, part: str) -> str:
        return f"{self.name}-{part}"

    @property
    def grace_s(self) -> int:
        return int(self.stop_timeout) + GRACE_MARGIN_S

    @property
    def tokenizer_arg(self) -> str:
        if self.tokenizer:
            return self.tokenizer
        return TOKENIZER_DIR if self.tokenizer_claim else self.model
