"""The Kubernetes manifests start a valid master/worker benchmark: their args parse as llmload bench flags."""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from llmload.commands import bench

K8S = Path(__file__).resolve().parents[2] / "k8s"


def _docs(name: str) -> dict:
    return yaml.safe_load((K8S / "base" / name).read_text())


def _parse(args: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="llmload bench")
    bench.add_arguments(parser)
    return parser.parse_args(args)


def test_master_and_worker_args_are_valid_bench_flags():
    master = _docs("master-job.yaml")["spec"]["template"]["spec"]["containers"][0]
    worker_job = _docs("worker-job.yaml")
    worker = worker_job["spec"]["template"]["spec"]["containers"][0]
    assert master["args"][0] == "bench" and worker["args"][0] == "bench"
    m = _parse(master["args"][1:])
    w = _parse(worker["args"][1:])
    assert m.master and not m.worker
    assert w.worker and w.master_host == _docs("service.yaml")["metadata"]["name"]
    assert w.master_port == m.master_bind_port == _docs("service.yaml")["spec"]["ports"][0]["port"]
    # the master waits for exactly the workers the Job starts
    assert m.expect_workers == worker_job["spec"]["parallelism"] == worker_job["spec"]["completions"]


def test_service_selects_the_master_pod_and_kustomization_lists_every_file():
    service = _docs("service.yaml")
    master = _docs("master-job.yaml")
    labels = master["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    kustomization = _docs("kustomization.yaml")
    for resource in kustomization["resources"]:
        assert (K8S / "base" / resource).is_file()
    overlay = yaml.safe_load((K8S / "overlays" / "headless" / "kustomization.yaml").read_text())
    assert (K8S / "overlays" / "headless" / overlay["resources"][0]).resolve() == (K8S / "base").resolve()


def test_api_key_comes_from_a_secret_not_the_manifest():
    master = _docs("master-job.yaml")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in master.get("env", [])}
    assert "value" not in env["OPENAI_API_KEY"] and "secretKeyRef" in env["OPENAI_API_KEY"]["valueFrom"]


def test_master_and_workers_share_the_cluster_token_from_a_secret():
    """With an API key the master refuses to start without a cluster token: both sides must read the same one."""
    master = _docs("master-job.yaml")["spec"]["template"]["spec"]["containers"][0]
    worker = _docs("worker-job.yaml")["spec"]["template"]["spec"]["containers"][0]
    refs = []
    for container in (master, worker):
        env = {e["name"]: e for e in container.get("env", [])}
        token = env["LLMLOAD_CLUSTER_TOKEN"]
        assert "value" not in token, "the token must come from a Secret, not the manifest"
        refs.append(token["valueFrom"]["secretKeyRef"])
        assert not any("token" in a.lower() for a in container["args"]), "never on a command line (ps)"
    assert refs[0]["name"] == refs[1]["name"] and refs[0]["key"] == refs[1]["key"]
