"""The Kubernetes manifests: the files under k8s/ are what the builders write, every manifest (kustomize overlays
and ``llmload k8s render``) validates strictly against a current Kubernetes, no pod runs as root or mounts a
secret as a file, every container asks for resources, and the commands parse as the tools they run."""

from __future__ import annotations

import argparse
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from llmload.cli import main
from llmload.commands import bench

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
#: the Kubernetes versions manifests are validated against (kubernetes-validate ships their schemas): a widely
#: deployed one and the newest the installed package knows
def kube_versions() -> list[str]:
    from kubernetes_validate.utils import latest_version

    return sorted({"1.32.0", latest_version()})


def kustomize(overlay: str) -> list[dict]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    out = subprocess.run([kubectl, "kustomize", str(K8S / "overlays" / overlay)], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def render(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict]:
    code = main(["k8s", "render", *args])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return [d for d in yaml.safe_load_all(captured.out) if d]


RENDERS = {
    "headless": ("--workers", "3", "--base-url", "http://vllm.default.svc:8000", "--model", "Qwen/Qwen3-8B",
                 "--num-prompts", "500", "--request-rate", "8", "--max-concurrency", "64"),
    "headless-tokenizer-volume": ("--workers", "2", "--base-url", "http://sglang:30000", "--model", "m",
                                  "--tokenizer-claim", "tokenizers", "--namespace", "bench", "--name", "run1"),
    "webui": ("--webui", "--workers", "2", "--base-url", "http://vllm:8000", "--model", "m", "--arrival", "open",
              "--request-rate", "5", "--num-prompts", "300"),
}


def all_manifests(capsys: pytest.CaptureFixture[str]) -> dict[str, list[dict]]:
    out = {f"kustomize-{o}": kustomize(o) for o in ("headless", "webui")}
    out.update({f"render-{k}": render(capsys, *v) for k, v in RENDERS.items()})
    return out


def test_the_k8s_directory_is_what_the_builders_write(tmp_path: Path) -> None:
    from llmload.k8s.generate import generate

    for path in generate(tmp_path):
        relative = path.relative_to(tmp_path)
        assert (K8S / relative).read_text() == path.read_text(), \
            f"k8s/{relative} is stale: python -m llmload.k8s.generate"


@pytest.mark.needs("kubectl")
def test_every_manifest_validates_strictly(capsys: pytest.CaptureFixture[str]) -> None:
    import kubernetes_validate

    for source, docs in all_manifests(capsys).items():
        assert docs, source
        for version in kube_versions():
            for doc in docs:
                kubernetes_validate.validate(doc, version, strict=True)


def pod_specs(docs: list[dict]) -> list[dict]:
    return [d["spec"]["template"]["spec"] for d in docs if d["kind"] in ("Job", "Deployment")]


@pytest.mark.needs("kubectl")
def test_no_pod_runs_as_root_or_mounts_a_secret_and_every_container_asks_for_resources(
        capsys: pytest.CaptureFixture[str]) -> None:
    for source, docs in all_manifests(capsys).items():
        specs = pod_specs(docs)
        assert specs, source
        for spec in specs:
            pod = spec["securityContext"]
            assert pod["runAsNonRoot"] is True and pod["runAsUser"] != 0, source
            assert pod["seccompProfile"]["type"] == "RuntimeDefault"
            assert not any("secret" in v for v in spec.get("volumes", [])), f"{source}: a Secret as a volume"
            for c in spec["containers"]:
                sc = c["securityContext"]
                assert sc["runAsNonRoot"] and not sc["allowPrivilegeEscalation"], source
                assert sc["readOnlyRootFilesystem"] and sc["capabilities"]["drop"] == ["ALL"], source
                assert c["resources"]["requests"]["cpu"] and c["resources"]["requests"]["memory"], source
                for env in c.get("env", []):
                    if "KEY" in env["name"] or "TOKEN" in env["name"] or "CREDENTIALS" in env["name"]:
                        assert "value" not in env and "secretKeyRef" in env["valueFrom"], (source, env["name"])
                for source_ in c.get("envFrom", []):
                    assert "secretRef" not in source_, f"{source}: a whole Secret as environment"
                assert not any("key" in a.lower() and "api" in a.lower() for a in c["args"]), source
            mounts = {m["mountPath"] for c in spec["containers"] for m in c["volumeMounts"]}
            assert "/tmp" in mounts, f"{source}: a read-only root filesystem needs a writable /tmp"


def _bench(args: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="llmload bench")
    bench.add_arguments(parser)
    return parser.parse_args(args)


def by_kind(docs: list[dict], kind: str, component: str) -> dict:
    return next(d for d in docs if d["kind"] == kind
                and d["metadata"]["labels"]["app.kubernetes.io/component"] == component)


def test_headless_jobs_form_a_master_and_its_workers(capsys: pytest.CaptureFixture[str]) -> None:
    docs = render(capsys, *RENDERS["headless"])
    master_job, worker_job = by_kind(docs, "Job", "master"), by_kind(docs, "Job", "worker")
    service = by_kind(docs, "Service", "master")
    master = master_job["spec"]["template"]["spec"]["containers"][0]
    worker = worker_job["spec"]["template"]["spec"]["containers"][0]
    m, w = _bench(master["args"][1:]), _bench(worker["args"][1:])
    assert master["command"] == ["llmload"] and master["args"][0] == "bench" and m.master and not m.worker
    assert m.num_prompts == 500 and m.request_rate == 8 and m.max_concurrency == 64
    assert m.save_result and m.result_dir == "/results"
    assert w.worker and w.master_host == service["metadata"]["name"] == master_job["metadata"]["name"]
    assert w.master_port == m.master_bind_port == service["spec"]["ports"][0]["port"]
    assert m.expect_workers == worker_job["spec"]["parallelism"] == worker_job["spec"]["completions"] == 3
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"].items() <= master_job["spec"]["template"]["metadata"]["labels"].items()
    for job in (master_job, worker_job):
        spec = job["spec"]
        assert spec["backoffLimit"] == 0 and spec["ttlSecondsAfterFinished"] > 0
        assert spec["template"]["spec"]["restartPolicy"] == "Never"
        assert spec["template"]["spec"]["terminationGracePeriodSeconds"] > m.stop_timeout
    assert worker["resources"]["limits"]["cpu"] == worker["resources"]["requests"]["cpu"] == "1"


def test_a_mounted_tokenizer_is_offline_and_read_only(capsys: pytest.CaptureFixture[str]) -> None:
    docs = render(capsys, *RENDERS["headless-tokenizer-volume"])
    options = by_kind(docs, "ConfigMap", "options")
    assert options["data"]["LLMLOAD_TOKENIZER"] == "/tokenizer"
    master = by_kind(docs, "Job", "master")["spec"]["template"]["spec"]
    env = {e["name"]: e for e in master["containers"][0]["env"]}
    assert env["HF_HUB_OFFLINE"]["value"] == "1" and "HF_TOKEN" not in env
    mount = next(m for m in master["containers"][0]["volumeMounts"] if m["mountPath"] == "/tokenizer")
    assert mount["readOnly"]
    assert any(v.get("persistentVolumeClaim", {}).get("claimName") == "tokenizers" for v in master["volumes"])
    assert all(d["metadata"]["namespace"] == "bench" and d["metadata"]["name"].startswith("run1-") for d in docs)


def test_the_web_ui_takes_its_options_as_llmload_variables(capsys: pytest.CaptureFixture[str]) -> None:
    docs = render(capsys, *RENDERS["webui"])
    data = by_kind(docs, "ConfigMap", "options")["data"]
    assert data["LLMLOAD_ARRIVAL"] == "open" and data["LLMLOAD_REQUEST_RATE"] == "5"
    assert data["LOCUST_HOST"] == "http://vllm:8000"
    ui = by_kind(docs, "Deployment", "ui")["spec"]["template"]["spec"]["containers"][0]
    workers = by_kind(docs, "Deployment", "ui-worker")
    assert ui["command"] == ["locust"] and "--master" in ui["args"] and "--web-login" in ui["args"]
    creds = next(e for e in ui["env"] if e["name"] == "LLMLOAD_WEB_CREDENTIALS")
    assert creds["valueFrom"]["secretKeyRef"]["optional"] is False, "no UI without its login"
    assert workers["spec"]["replicas"] == 2
    service = by_kind(docs, "Service", "ui")
    assert {p["port"] for p in service["spec"]["ports"]} == {8089, 5557}


def test_a_custom_locustfile_ships_in_a_config_map(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    locustfile = tmp_path / "mine.py"
    locustfile.write_text("from llmload.locust import ShareGPTUser  # noqa\n")
    docs = render(capsys, *RENDERS["webui"], "--locustfile", str(locustfile))
    shipped = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "llmload-locustfile")
    assert shipped["data"]["locustfile.py"] == locustfile.read_text()
    assert by_kind(docs, "ConfigMap", "options")["data"]["LOCUST_LOCUSTFILE"] == "/app/custom/locustfile.py"


@pytest.mark.parametrize(("args", "message"), [
    (("--processes", "2"), "set by the manifests"),
    (("--request-rate", "abc"), "expected a number"),
    (("--nonsense",), "not an llmload bench flag"),
    (("--webui", "--save-detailed"), "bench's only"),
    (("--webui", "--arrival", "sideways"), "not one of"),
    (("--name", "Bad_Name"), "--name"),
    (("--locustfile", "x.py"), "for --webui"),
])
def test_bad_render_flags_are_one_line_errors(args: tuple[str, ...], message: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["k8s", "render", "--base-url", "http://x:8000", "--model", "m", *args])
    captured = capsys.readouterr()
    assert code == 2 and message in captured.err and not captured.out
    assert len(captured.err.strip().splitlines()) == 1


def test_render_writes_a_kustomize_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(["k8s", "render", *RENDERS["headless"], "--output", str(out)]) == 0
    kustomization = yaml.safe_load((out / "kustomization.yaml").read_text())
    assert sorted(kustomization["resources"]) == sorted(p.name for p in out.glob("*.yaml")
                                                        if p.name != "kustomization.yaml")
    assert "kubectl apply -k" in capsys.readouterr().err


def test_llmloads_own_metrics_port_is_opened_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    docs = render(capsys, *RENDERS["headless"], "--prometheus-port", "9464", "--prometheus-host", "0.0.0.0")
    master = by_kind(docs, "Job", "master")["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "metrics", "containerPort": 9464} in master["ports"]
    assert _bench(master["args"][1:]).prometheus_port == 9464
