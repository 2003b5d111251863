"""Energy per token and the exports end to end (docs/energy.md, docs/observability.md): ``llmload bench`` against a
simulator with two GPUs reads its DCGM page, and its energy equals the power model's integral over the run (from
the simulator's own work totals); J/token is energy over output tokens; a counter reset mid-run is handled; the
report draws the power figure; a bad telemetry URL is one warning and the run goes on; the run's metrics reach an
OTLP receiver and an MLflow ``file:`` store."""

from __future__ import annotations

import gzip
import json
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from support import http_server, llmload_command

pytestmark = pytest.mark.slow

RUN = ("--tokenizer", "builtin", "--dataset-name", "random", "--random-input-len", "96", "--random-output-len", "48",
       "--num-prompts", "60", "--request-rate", "30", "--seed", "3", "--no-initial-test", "--save-result")
GPUS = 2


def sim_stats(sim) -> dict:
    with urllib.request.urlopen(f"{sim.url}/sim/stats", timeout=10) as answer:
        return json.loads(answer.read())["gpu"]


def model_energy_j(before: dict, after: dict, seconds: float) -> float:
    """The power model's energy (all GPUs) over ``seconds`` in which the work between two stats readings was done:
    idle watts on every GPU, plus joules per prefilled token and per decode step (docs/simulator.md)."""
    work = (after["prefill_tokens"] - before["prefill_tokens"]) * after["joules_per_prefill_token"] + (
        after["decode_steps"] - before["decode_steps"]) * after["joules_per_decode_step"]
    return after["idle_watts"] * after["gpus"] * seconds + work


def test_bench_energy_is_the_power_model_s_integral(child_runner, start_sim) -> None:
    sim = start_sim("--gpus", str(GPUS))
    before = sim_stats(sim)
    run = child_runner.bench("--base-url", sim.url, *RUN, "--gpu-metrics-url", f"{sim.url}/dcgm/metrics", timeout=180)
    assert run.returncode == 0, run.describe()
    after = sim_stats(sim)
    result = run.result()
    assert f"Reading GPU telemetry from {sim.url}/dcgm/metrics" in run.stderr + run.stdout
    assert result["energy_source"] == "counter" and len(result["gpu_metrics"]["gpus"]) == GPUS
    expected = model_energy_j(before, after, result["gpu_energy_duration_s"])
    # the client's interval (scrape arrivals) and the simulator's clock differ by milliseconds: at most 0.2 s of
    # idle power on both GPUs, plus the counters' millijoule rounding
    assert result["gpu_energy_j"] == pytest.approx(expected, abs=after["idle_watts"] * GPUS * 0.2 + 1.0)
    assert result["gpu_energy_per_output_token_j"] == pytest.approx(
        result["gpu_energy_j"] / result["total_output_tokens"], rel=1e-12)
    assert result["energy_per_request_j"] == pytest.approx(result["gpu_energy_j"] / result["completed"], rel=1e-12)
    assert result["gpu_avg_power_w"] == pytest.approx(result["gpu_energy_j"] / result["gpu_energy_duration_s"])
    assert "Energy per output token (J):" in run.stdout and "Average power, all GPUs (W):" in run.stdout
    series = run.result_path().with_name(run.result_path().stem + ".gpu_metrics.jsonl")
    assert series.exists() and len(series.read_text().splitlines()) >= 2
    report = child_runner.run([*llmload_command(), "report", str(run.result_path()), "--output",
                               str(run.result_dir / "rep")], timeout=240)
    assert report.returncode == 0, report.describe()
    assert (run.result_dir / "rep" / "gpu.png").stat().st_size > 0
    assert "gpu.png" in (run.result_dir / "rep" / "report.md").read_text()


def test_a_counter_reset_mid_run_is_handled(child_runner, start_sim) -> None:
    sim = start_sim("--gpus", str(GPUS), "--gpu-energy-reset-after", "1.2")
    before = sim_stats(sim)
    run = child_runner.bench("--base-url", sim.url, *RUN, "--server-metrics-interval", "0.25", "--gpu-metrics-url",
                             f"{sim.url}/dcgm/metrics", timeout=180)
    assert run.returncode == 0, run.describe()
    after = sim_stats(sim)
    assert after["counter_start_s"] > 0  # the reset happened during the run
    result = run.result()
    expected = model_energy_j(before, after, result["gpu_energy_duration_s"])
    # a reset loses what the counter gathered between the last scrape before it and the reset: at most one
    # interval at the capped power of both GPUs; never a negative step or the whole counter counted twice
    lost_at_most = 0.25 * after["max_watts"] * GPUS
    assert expected - lost_at_most - 1.0 <= result["gpu_energy_j"] <= expected + after["idle_watts"] * GPUS * 0.2 + 1.0


def test_a_telemetry_url_that_fails_is_one_warning_and_the_run_goes_on(child_runner, start_sim) -> None:
    sim = start_sim()
    run = child_runner.bench("--base-url", sim.url, *RUN, "--gpu-metrics-url", "http://127.0.0.1:9/metrics",
                             "--gpu-metrics-url", f"{sim.url}/metrics", "--energy-gpu-ids", "0", timeout=180)
    assert run.returncode == 0, run.describe()
    said = (run.stdout + run.stderr).splitlines()
    assert len([line for line in said if "--gpu-metrics-url http://127.0.0.1:9/metrics" in line]) == 1
    assert len([line for line in said if f"--gpu-metrics-url {sim.url}/metrics" in line
                and "no DCGM power or energy series" in line]) == 1
    assert len([line for line in said if line.startswith("--energy-gpu-ids")]) == 1  # no pynvml or no GPU here
    assert "gpu_energy_j" not in run.result() and run.result()["completed"] == 60
    assert "Traceback" not in run.stderr


def test_a_malformed_gpu_id_list_exits_2(child_runner) -> None:
    run = child_runner.bench("--base-url", "http://127.0.0.1:9", "--energy-gpu-ids", "0,gpu1", timeout=60)
    assert run.returncode == 2 and "expected GPU indexes like 0,1" in run.stderr, run.describe()


class _Collector(BaseHTTPRequestHandler):
    bodies: list[bytes]

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers["Content-Length"]))
        self.bodies.append(gzip.decompress(raw) if self.headers.get("Content-Encoding") == "gzip" else raw)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[tuple[str, list[bytes]]]:
    bodies: list[bytes] = []
    with http_server(type("Handler", (_Collector,), {"bodies": bodies})) as url:
        yield url, bodies


def test_the_run_reaches_an_otlp_receiver_and_an_mlflow_store(child_runner, start_sim, collector,
                                                              tmp_path: Path) -> None:
    service = pytest.importorskip("opentelemetry.proto.collector.metrics.v1.metrics_service_pb2")
    pytest.importorskip("mlflow")
    url, bodies = collector
    sim = start_sim("--gpus", "1")
    store = tmp_path / "mlruns"
    run = child_runner.bench("--base-url", sim.url, *RUN, "--otlp-endpoint", url, "--mlflow-tracking-uri",
                             store.as_uri(), "--label", "energy-export", "--gpu-metrics-url", f"{sim.url}/dcgm/metrics",
                             timeout=300)
    assert run.returncode == 0, run.describe()
    result = run.result()
    assert bodies, run.describe()
    request = service.ExportMetricsServiceRequest()
    request.ParseFromString(bodies[0])
    metrics = {m.name: m for rm in request.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    duration = metrics["gen_ai.client.operation.duration"]
    assert sum(p.count for p in duration.histogram.data_points) == result["completed"]
    usage = metrics["gen_ai.client.token.usage"].histogram.data_points
    output = [p for p in usage if any(a.key == "gen_ai.token.type" and a.value.string_value == "output"
                                      for a in p.attributes)]
    assert sum(p.sum for p in output) == result["total_output_tokens"]
    import os

    from mlflow.tracking import MlflowClient
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=store.as_uri())
    runs = client.search_runs([client.get_experiment_by_name("llmload").experiment_id])
    assert len(runs) == 1
    logged = runs[0]
    assert logged.data.metrics["completed"] == result["completed"]
    assert logged.data.metrics["gpu_energy_j"] == pytest.approx(result["gpu_energy_j"])
    assert logged.data.params["label"] == "energy-export"
    names = {a.path for a in client.list_artifacts(logged.info.run_id)}
    assert run.result_path().name in names and "report" in names, names


def test_the_first_command_shows_energy_per_token(child_runner) -> None:
    """The README's first command (no --base-url: the built-in simulator) prints the GPU energy block."""
    run = child_runner.bench("--num-prompts", "20", "--request-rate", "20", timeout=180)
    assert run.returncode == 0, run.describe()
    block = run.stdout.split("GPU energy", 1)[1]
    per_token = float(block.split("Energy per output token (J):", 1)[1].split()[0])
    assert per_token > 0
