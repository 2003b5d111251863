"""The rendered Kubernetes manifests run: each container's command, arguments and environment (resolved as the
kubelet does: ConfigMaps, Secrets, ``$(VAR)``) started as local processes on loopback against ``llmload sim``.

What is remapped, and only that: the pods' paths (/results, /tmp, /app/locustfiles) to temporary directories and
the checkout; Service names to 127.0.0.1; the pods' own listening address ('*', all interfaces) to 127.0.0.1.
"""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path

import httpx
import pytest
import yaml

from llmload.cli import main
from tests.support import ChildProcesses, free_port, llmload_command, locust_command, offline_env

REPO = Path(__file__).resolve().parents[2]
SECRETS = {"llmload-api-key": {"key": "sk-local-test"}, "llmload-cluster-token": {"token": "t0ken-local"},
           "llmload-web-credentials": {"credentials": "tester:s3cret"}}


def rendered(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict]:
    assert main(["k8s", "render", *args]) == 0
    return [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]


class Cluster:
    """Resolves a pod's container into (argv, env) for a local process."""

    def __init__(self, docs: list[dict], tmp: Path) -> None:
        self.docs = docs
        self.config = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "ConfigMap"}
        self.services = {d["metadata"]["name"] for d in docs if d["kind"] == "Service"}
        self.paths = {"/results": tmp / "results", "/tmp": tmp / "scratch", "/app/locustfiles": REPO / "locustfiles",
                      "/app/custom": tmp / "custom"}
        for local in self.paths.values():
            local.mkdir(parents=True, exist_ok=True)
        for name, data in self.config.items():
            if name.endswith("-locustfile"):
                for file, text in data.items():
                    (tmp / "custom" / file).write_text(text)

    def pod(self, kind: str, component: str) -> dict:
        return next(d for d in self.docs if d["kind"] == kind
                    and d["metadata"]["labels"]["app.kubernetes.io/component"] == component)

    def env_of(self, c: dict) -> dict[str, str]:
        env: dict[str, str] = {}
        for source in c.get("envFrom", []):
            env.update(self.config[source["configMapRef"]["name"]])
        for e in c.get("env", []):
            if "value" in e:
                env[e["name"]] = e["value"]
                continue
            ref = e["valueFrom"]["secretKeyRef"]
            value = SECRETS.get(ref["name"], {}).get(ref["key"])
            if value is None:
                assert ref.get("optional"), f"a required Secret {ref['name']} the test does not provide"
                continue
            env[e["name"]] = value
        return {k: self.local(v) for k, v in env.items()}

    def local(self, value: str) -> str:
        for pod_path, local in self.paths.items():
            if value == pod_path or value.startswith(pod_path + "/"):
                return str(local) + value[len(pod_path):]
        return "127.0.0.1" if value in self.services else value

    def command(self, doc: dict) -> tuple[list[str], dict[str, str]]:
        c = doc["spec"]["template"]["spec"]["containers"][0]
        env = self.env_of(c)

        def expand(arg: str) -> str:  # the kubelet's $(VAR) expansion
            return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), arg)

        argv = [self.local(expand(a)) for a in [*c["command"], *c["args"]]]
        tool = {"llmload": llmload_command(), "locust": locust_command()}[argv[0]]
        return [*tool, *argv[1:]], env


@pytest.mark.slow
def test_rendered_headless_jobs_run_a_master_and_workers(start_sim, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    sim = start_sim("--ttft-ms", "20", "--itl-ms", "5")
    docs = rendered(capsys, "--workers", "2", "--base-url", sim.url, "--model", "llmload-sim", "--tokenizer",
                    "builtin", "--master-port", str(free_port()), "--num-prompts", "20", "--request-rate", "20",
                    "--output-len", "16")
    cluster = Cluster(docs, tmp_path)
    master_argv, master_env = cluster.command(cluster.pod("Job", "master"))
    worker_argv, worker_env = cluster.command(cluster.pod("Job", "worker"))
    master_argv += ["--master-bind-host", "127.0.0.1"]  # the pod's own address
    workers = cluster.pod("Job", "worker")["spec"]["parallelism"]
    with ChildProcesses(tmp_path) as children:
        master, out, err = children.start("master", master_argv, offline_env(master_env))
        started = [children.start(f"worker{k}", worker_argv, offline_env(worker_env))[0] for k in range(workers)]
        code = master.wait(timeout=180)
        assert code == 0, f"{out.read_text()[-3000:]}\n{err.read_text()[-3000:]}"
        for worker in started:  # a Job's pods end when the test ends
            assert worker.wait(timeout=60) == 0
    assert "Serving Benchmark Result" in out.read_text()
    [result] = list((tmp_path / "results").glob("*.json"))
    data = json.loads(result.read_text())
    assert data["completed"] == 20 and len(data["workers"]) == 2
    records = result.with_name(result.name[: -len(".json")] + ".records.jsonl").read_text().splitlines()
    assert len(records) == 20
    assert "sk-local-test" not in result.read_text() + out.read_text() + err.read_text()


@pytest.mark.slow
def test_rendered_web_ui_serves_and_runs_a_swarm_on_its_workers(start_sim, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    sim = start_sim("--ttft-ms", "20", "--itl-ms", "5")
    web_port = free_port()
    docs = rendered(capsys, "--webui", "--workers", "2", "--base-url", sim.url, "--model", "llmload-sim",
                    "--tokenizer", "builtin", "--master-port", str(free_port()), "--web-port", str(web_port),
                    "--num-prompts", "40", "--max-tokens", "16")
    cluster = Cluster(docs, tmp_path)
    ui_argv, ui_env = cluster.command(cluster.pod("Deployment", "ui"))
    worker_argv, worker_env = cluster.command(cluster.pod("Deployment", "ui-worker"))
    ui_env.update(LOCUST_WEB_HOST="127.0.0.1", LOCUST_MASTER_BIND_HOST="127.0.0.1")  # the pod's own address
    replicas = cluster.pod("Deployment", "ui-worker")["spec"]["replicas"]
    auth = ("tester", "s3cret")
    with ChildProcesses(tmp_path) as children:
        ui, out, _err = children.start("ui", ui_argv, offline_env(ui_env))
        for k in range(replicas):
            children.start(f"worker{k}", worker_argv, offline_env(worker_env))
        http = httpx.Client(base_url=f"http://127.0.0.1:{web_port}", timeout=10, auth=auth)
        stats = wait(lambda: _stats(http, ui), lambda d: d["workers"] == replicas, "both workers", ui, out)
        assert httpx.get(f"http://127.0.0.1:{web_port}/llm/stats", timeout=10).status_code == 401
        resp = http.post("/swarm", data={"user_count": "4", "spawn_rate": "4", "host": sim.url})
        assert resp.json()["success"], resp.text
        stats = wait(lambda: _stats(http, ui), lambda d: d["run"]["completed"] >= 10, "requests", ui, out)
        assert stats["distributed"]
        http.post("/stop")
        done = wait(lambda: _stats(http, ui), lambda d: d["state"] == "stopped", "the stop", ui, out)
        # a pod's end (SIGTERM): the summary in its log, the test's records on the results PVC
        ui.send_signal(signal.SIGTERM)
        assert ui.wait(timeout=60) == 0, out.read_text()[-3000:]
    records = (tmp_path / "results" / "records.jsonl").read_text().splitlines()
    assert len(records) == done["run"]["requests"] >= 10
    assert {json.loads(line)["worker"] for line in records} == {"worker0", "worker1"}


def _stats(http: httpx.Client, proc) -> dict | None:
    try:
        resp = http.get("/llm/stats")
    except httpx.TransportError:
        return None
    return resp.json() if resp.status_code == 200 else None


def wait(fetch, check, what: str, proc, log: Path, timeout: float = 90.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the UI exited ({proc.returncode}) waiting for {what}\n{log.read_text()[-3000:]}")
        data = fetch()
        if data is not None and check(data):
            return data
        time.sleep(0.3)
    pytest.fail(f"no {what} within {timeout} s\n{log.read_text()[-3000:]}")
