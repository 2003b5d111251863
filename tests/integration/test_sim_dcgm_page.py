"""`llmload sim` serves NVIDIA dcgm-exporter's page for its simulated GPUs at `/dcgm/metrics` (docs/simulator.md,
"GPU telemetry"): every field for every GPU with dcgm-exporter's labels, and an energy counter whose increase over
a run is the documented formula over the work totals `/sim/stats` exposes, the idle term timed by the test's own
clock; one worker's page covers every worker's GPUs; `--gpu-energy-reset-after` makes the counter drop.
"""

from __future__ import annotations

import time
from itertools import pairwise

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

MODEL = "dcgm-model"
FIELDS = ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
          "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_POWER_VIOLATION",
          "DCGM_FI_DEV_THERMAL_VIOLATION", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_PROF_SM_ACTIVE")
LABELS = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"}
ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
IDLE_W = 70.0
#: the idle term is timed by the test's clock around two scrapes: allow half a second of it (noise is ~ms)
IDLE_BOUND_MJ = IDLE_W * 0.5 * 1000
#: a big decode-step energy, so the work's share of the counter dwarfs the bound
JD = 40.0
JP = 0.05


class Page:
    """One ``/dcgm/metrics`` answer, parsed, timed by the test's clock (the middle of the request)."""

    def __init__(self, raw_http, sim) -> None:
        r = raw_http.get(sim.port, "/dcgm/metrics")
        assert r.status == 200 and r.complete, r.body[:500]
        assert r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
        self.t = (r.t_send + r.t_end) / 2
        self.families = {f.name: f for f in text_string_to_metric_families(r.body.decode())}

    def by_gpu(self, name: str) -> dict[str, float]:
        return {s.labels["gpu"]: s.value for s in self.families[name].samples}


def sim_stats(raw_http, sim) -> dict:
    r = raw_http.get(sim.port, "/sim/stats")
    assert r.status == 200, r.body
    return orjson.loads(r.body)


def generation_load(raw_http, sim, count: int = 12, max_tokens: int = 24) -> int:
    """Streamed completions, 4 at a time; returns the prompt tokens the engine saw (``/metrics``)."""
    before = prompt_tokens(raw_http, sim)
    reqs = [raw_http.build("POST", "/v1/completions", {
        "model": MODEL, "prompt": f"request {i} " * (5 + 3 * i), "max_tokens": max_tokens, "stream": True,
        "ignore_eos": True}) for i in range(count)]
    out = raw_http.many(sim.port, reqs, concurrency=4)
    assert all(r.status == 200 and r.complete for r in out)
    return prompt_tokens(raw_http, sim) - before


def prompt_tokens(raw_http, sim) -> float:
    r = raw_http.get(sim.port, "/metrics")
    families = {f.name: f for f in text_string_to_metric_families(r.body.decode())}
    return sum(s.value for s in families["vllm:prompt_tokens"].samples if s.name == "vllm:prompt_tokens_total")


def wait_idle(raw_http, sim) -> dict:
    """``/sim/stats`` once every replica's engine is idle (the last step of a finished stream has ended)."""
    deadline = time.monotonic() + 10
    while True:
        stats = sim_stats(raw_http, sim)
        if all(w["power_w"] == IDLE_W for w in stats["gpu"]["workers"]) or time.monotonic() > deadline:
            return stats
        time.sleep(0.02)


def check_exact(stats: dict) -> None:
    """The counters ``/sim/stats`` answered equal the formula over its own totals at its own moment."""
    g = stats["gpu"]
    n = g["gpus_per_worker"]
    for w, worker in enumerate(g["workers"]):
        seconds = g["elapsed_s"] - g["counter_start_s"]
        work = (g["joules_per_prefill_token"] * (worker["prefill_tokens"] - worker["base_prefill_tokens"])
                + g["joules_per_decode_step"] * (worker["decode_steps"] - worker["base_decode_steps"]))
        expected = 1000 * (g["idle_watts"] * seconds + work / n)
        assert abs(worker["energy_mj"] - expected) <= 1, (w, worker, expected)
        assert g["energy_mj"][w * n : (w + 1) * n] == [worker["energy_mj"]] * n


def test_two_gpus_every_field_and_label_and_the_energy_is_the_formula(start_sim, raw_http):
    sim = start_sim("--profile", "tiny", "--model", MODEL, "--gpus", "2", "--gpu-hostname", "node-7",
                    "--gpu-joules-per-decode-step", str(JD), "--gpu-joules-per-prefill-token", str(JP))
    first = Page(raw_http, sim)
    assert set(first.families) == set(FIELDS)
    for name in FIELDS:
        family = first.families[name]
        assert family.type == ("counter" if name in (ENERGY, "DCGM_FI_DEV_POWER_VIOLATION",
                                                     "DCGM_FI_DEV_THERMAL_VIOLATION") else "gauge"), name
        assert family.documentation, name
        assert sorted(s.labels["gpu"] for s in family.samples) == ["0", "1"], name
        for s in family.samples:
            assert set(s.labels) == LABELS, s
            assert s.labels["device"] == f"nvidia{s.labels['gpu']}" and s.labels["UUID"].startswith("GPU-")
            assert s.labels["Hostname"] == "node-7" and s.labels["modelName"] == "NVIDIA H100 80GB HBM3"
    assert first.by_gpu("DCGM_FI_DEV_POWER_USAGE") == {"0": IDLE_W, "1": IDLE_W}
    stats_a = sim_stats(raw_http, sim)["gpu"]

    prefilled = generation_load(raw_http, sim)
    stats_b = wait_idle(raw_http, sim)
    last = Page(raw_http, sim)
    d_prefill = stats_b["gpu"]["prefill_tokens"] - stats_a["prefill_tokens"]
    d_decode = stats_b["gpu"]["decode_steps"] - stats_a["decode_steps"]
    assert d_prefill == prefilled > 0  # no prefix cache: every prompt token is prefilled
    assert d_decode >= 23  # one step per token after the first, at least (4 requests share a step)
    work_mj = 1000 * (JP * d_prefill + JD * d_decode) / 2
    assert work_mj > 10 * IDLE_BOUND_MJ
    for gpu in ("0", "1"):
        increase = last.by_gpu(ENERGY)[gpu] - first.by_gpu(ENERGY)[gpu]
        expected = IDLE_W * 1000 * (last.t - first.t) + work_mj
        assert abs(increase - expected) < IDLE_BOUND_MJ, (gpu, increase, expected)
    check_exact(stats_b)
    stats_c = sim_stats(raw_http, sim)
    check_exact(stats_c)
    assert stats_b["gpu"]["energy_mj"][0] <= last.by_gpu(ENERGY)["0"] <= stats_c["gpu"]["energy_mj"][0]


def test_one_workers_page_covers_every_workers_gpus_once(start_sim, raw_http):
    sim = start_sim("--profile", "tiny", "--model", MODEL, "--workers", "2", "--gpus", "2",
                    "--gpu-joules-per-decode-step", str(JD), "--gpu-joules-per-prefill-token", str(JP))
    first = Page(raw_http, sim)
    stats_a = sim_stats(raw_http, sim)["gpu"]
    assert stats_a["gpus"] == 4
    generation_load(raw_http, sim, count=16)
    stats_b = wait_idle(raw_http, sim)
    pages = [Page(raw_http, sim) for _ in range(6)]  # SO_REUSEPORT spreads the scrapes over the workers
    for page in pages:
        assert all(sorted(page.by_gpu(name)) == ["0", "1", "2", "3"] for name in FIELDS)
    for earlier, later in pairwise(pages):
        assert all(later.by_gpu(ENERGY)[g] >= earlier.by_gpu(ENERGY)[g] for g in "0123")
    last = pages[-1]
    total = sum(last.by_gpu(ENERGY).values()) - sum(first.by_gpu(ENERGY).values())
    d_work = (JP * (stats_b["gpu"]["prefill_tokens"] - stats_a["prefill_tokens"])
              + JD * (stats_b["gpu"]["decode_steps"] - stats_a["decode_steps"]))
    expected = 4 * IDLE_W * 1000 * (last.t - first.t) + 1000 * d_work  # each replica's work once, over its GPUs
    assert abs(total - expected) < 4 * IDLE_BOUND_MJ, (total, expected)
    check_exact(stats_b)


@pytest.mark.slow
def test_the_reset_flag_makes_the_counter_drop(start_sim, raw_http):
    reset_after = 2.0
    sim = start_sim("--profile", "tiny", "--model", MODEL, "--gpus", "2", "--gpu-joules-per-decode-step", str(JD),
                    "--gpu-energy-reset-after", str(reset_after))
    generation_load(raw_http, sim, count=4)
    before = Page(raw_http, sim)
    stats = sim_stats(raw_http, sim)["gpu"]
    assert stats["counter_start_s"] == 0.0 and stats["elapsed_s"] < reset_after, "the load ran past the reset"
    check_exact({"gpu": stats})
    while sim_stats(raw_http, sim)["gpu"]["elapsed_s"] < reset_after + 0.2:
        time.sleep(0.05)
    after = Page(raw_http, sim)
    stats = sim_stats(raw_http, sim)["gpu"]
    assert stats["counter_start_s"] == reset_after
    for gpu in ("0", "1"):
        assert after.by_gpu(ENERGY)[gpu] < before.by_gpu(ENERGY)[gpu], gpu
        # no work since the reset: idle power since then, well under what the run had counted
        assert after.by_gpu(ENERGY)[gpu] <= IDLE_W * 1000 * (stats["elapsed_s"] - reset_after) + 1
    check_exact({"gpu": stats})
    generation_load(raw_http, sim, count=2)  # work after the reset counts from the new base
    stats = wait_idle(raw_http, sim)
    check_exact(stats)
    worker = stats["gpu"]["workers"][0]
    assert worker["base_decode_steps"] > 0 and worker["decode_steps"] > worker["base_decode_steps"]
