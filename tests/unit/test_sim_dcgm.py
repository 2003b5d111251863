"""The simulator's GPU power model and its DCGM page on their own (docs/simulator.md, "GPU telemetry"): the
energy counter is exactly idle × time + the work's joules over the GPUs, the power gauge is capped and the time
above the cap is power violation, utilisation is the busy share of the last second, the counter reset, and the
page in dcgm-exporter's names, types and labels. Virtual time throughout: the board's clock is the test's."""

from __future__ import annotations

import argparse
import math
import re

import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmload.commands import sim as sim_command
from llmload.common.errors import ConfigError
from llmload.sim import power
from llmload.sim.config import PROFILES, GpuModel
from llmload.sim.engine import BatchEngine, Seq
from llmload.sim.metrics import DcgmPage, GpuBoard, GpuWriter, SharedStats, dialect_metrics
from llmload.sim.metrics.dcgm import FAMILIES, gpu_uuid

MODEL = GpuModel(count=2, idle_watts=70.0, max_watts=700.0, joules_per_prefill_token=0.02,
                 joules_per_decode_step=1.5)
LABELS = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"]


class Clock:
    """The wall clock the writer checks the reset against, set by the test."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def board_and_writer(model: GpuModel = MODEL, workers: int = 1) -> tuple[GpuBoard, GpuWriter, Clock]:
    board = GpuBoard(workers, boot=0.0)
    clock = Clock()
    return board, GpuWriter(board, 0, model, clock), clock


def expected_mj(model: GpuModel, seconds: float, prefill: int, decode: int) -> float:
    """The documented formula, written out again here (not power.energy_mj)."""
    return 1000.0 * (model.idle_watts * seconds + (model.joules_per_prefill_token * prefill
                                                   + model.joules_per_decode_step * decode) / model.count)


# -- the energy integral -------------------------------------------------------------------------------------


def test_energy_is_idle_time_plus_the_works_joules_split_over_the_gpus():
    board, writer, _ = board_and_writer()
    assert board.read(0, MODEL, 10.0).energy_mj == 700_000  # idle only: 70 W for 10 s
    writer.step(10.0, 0.05, 1000, 0)  # a prefill-only step: 20 J, no decode step
    writer.step(10.05, 0.01, 0, 8)  # decode: 1.5 J
    writer.step(10.06, 0.01, 24, 8)  # both: 0.48 + 1.5 J
    writer.idle()
    state = board.read(0, MODEL, 12.5)
    assert (state.prefill_tokens, state.decode_steps, state.steps) == (1024, 2, 3)
    assert state.busy_s == pytest.approx(0.07)
    assert state.energy_mj == math.floor(expected_mj(MODEL, 12.5, 1024, 2))
    assert state.energy_mj == math.floor(1000 * (70 * 12.5 + (20 + 1.5 + 0.48 + 1.5) / 2))
    board.close()


def test_a_virtual_time_engine_run_books_every_prefilled_token_and_decode_step():
    """The engine's own run, its steps fed to the writer: the counter equals the formula over its totals, and the
    totals are the prompts' tokens and (at least) one decode step per later token of the longest request."""
    board, writer, _ = board_and_writer()
    engine = BatchEngine(PROFILES["tiny"])
    requests = [(0.01 * i, 100 + 37 * i, 20 + i) for i in range(12)]
    pending = sorted(requests)
    now, decode_steps, i = 0.0, 0, 0
    while i < len(pending) or not engine.idle:
        while i < len(pending) and pending[i][0] <= now:
            engine.add(Seq(i, pending[i][1], pending[i][2]))
            i += 1
        if engine.idle:
            writer.idle()
            now = pending[i][0]
            continue
        duration = engine.plan_step(now) or 1e-3
        writer.step(now, duration, engine.step_prefill_tokens, engine.step_decode_seqs)
        decode_steps += engine.step_decode_seqs > 0
        now += duration
        engine.complete_step(now)
    writer.idle()
    state = board.read(0, MODEL, now + 3.0)
    assert state.prefill_tokens == sum(p for _, p, _ in requests)
    assert state.decode_steps == decode_steps >= max(o for _, _, o in requests) - 1
    assert state.energy_mj == math.floor(expected_mj(MODEL, now + 3.0, state.prefill_tokens, decode_steps))
    assert abs(power.energy_mj(MODEL, now + 3.0, state.prefill_tokens, decode_steps) - state.energy_mj) <= 1
    board.close()


def test_the_counter_only_grows_while_the_engine_steps_and_idles():
    board, writer, _ = board_and_writer()
    last, t = -1, 0.0
    for k in range(200):
        if k % 7 == 3:
            writer.idle()
            t += 0.013
        else:
            writer.step(t, 0.004, 50 * (k % 3), k % 5)
            t += 0.004
        value = board.read(0, MODEL, t).energy_mj
        assert value >= last
        last = value
    board.close()


# -- power, cap, violation, utilisation --------------------------------------------------------------------------


def test_the_gauge_is_the_running_steps_demand_capped_and_capped_time_is_power_violation():
    board, writer, _ = board_and_writer()
    writer.step(0.0, 0.01, 0, 4)  # 1.5 J / 2 GPUs over 10 ms: 75 W above idle
    assert board.read(0, MODEL, 0.005).power_w == pytest.approx(145.0)
    assert board.read(0, MODEL, 0.005).power_violation_us == 0
    writer.step(0.01, 0.02, 4096, 0)  # 81.92 J / 2 over 20 ms: 2048 W asked for
    state = board.read(0, MODEL, 0.02)
    assert state.power_w == 700.0 and state.power_violation_us == 20_000
    assert power.step_demand_watts(MODEL, 4096, False, 0.02) == pytest.approx(70 + 81.92 / 2 / 0.02)
    assert state.thermal_violation_us == 0  # 700 W is 77.5 C, below the slowdown temperature
    writer.idle()
    assert board.read(0, MODEL, 0.05).power_w == 70.0
    hot = GpuModel(max_watts=1000.0)
    assert power.temperature_c(1000.0) >= power.SLOWDOWN_C
    hot_board, hot_writer, _ = board_and_writer(hot)
    hot_writer.step(0.0, 0.01, 10_000, 1)
    assert hot_board.read(0, hot, 0.01).thermal_violation_us == 10_000
    board.close()
    hot_board.close()


def test_utilisation_is_the_busy_share_of_the_last_second():
    board, writer, _ = board_and_writer()
    t = 5.0
    for _ in range(30):  # 0.3 s of back-to-back 10 ms steps: one busy period
        writer.step(t, 0.01, 0, 64)
        t += 0.01
    writer.idle()
    assert board.periods(0, 0.0) == [(5.0, pytest.approx(5.3))]
    assert board.read(0, MODEL, 5.3).util == pytest.approx(0.3)
    assert board.read(0, MODEL, 6.0).util == pytest.approx(0.3)
    assert board.read(0, MODEL, 6.1).util == pytest.approx(0.2)
    assert board.read(0, MODEL, 7.0).util == 0.0
    assert board.read(0, MODEL, 5.2).util == pytest.approx(0.2)  # a period still running counts up to now
    writer.step(7.5, 0.01, 0, 64)  # after an idle gap: a new period
    assert len(board.periods(0, 0.0)) == 2
    assert board.read(0, MODEL, 7.6).util == pytest.approx(0.01)
    board.close()


def test_busy_share_sm_activity_temperature_and_framebuffer():
    assert power.busy_share([(0.0, 0.25), (0.5, 0.75)], now=1.0) == pytest.approx(0.5)
    assert power.busy_share([(0.0, 3.0)], now=2.0) == 1.0
    assert power.sm_active_ratio(0) == 0.0
    assert power.sm_active_ratio(1) == pytest.approx(0.4 + 0.6 / 256)
    assert power.sm_active_ratio(10_000) == 1.0
    assert power.temperature_c(70.0) == pytest.approx(30.25)
    assert power.temperature_c(700.0) == pytest.approx(77.5)
    model = GpuModel(memory_mib=1000)
    assert power.fb_used_mib(model, 0.0) == 600 and power.fb_used_mib(model, 0.5) == 800
    assert power.fb_used_mib(model, 1.0) == 1000 and power.fb_used_mib(model, 2.0) == 1000


def test_sm_active_is_the_busy_share_times_the_latest_steps_ratio():
    board, writer, _ = board_and_writer()
    for k in range(50):
        writer.step(k * 0.01, 0.01, 0, 128)
    state = board.read(0, MODEL, 0.5)
    assert state.sm_active == pytest.approx(0.5 * power.sm_active_ratio(128))
    board.close()


# -- the reset -------------------------------------------------------------------------------------------


def test_the_counters_restart_from_zero_after_the_reset():
    model = GpuModel(count=2, energy_reset_after_s=5.0)
    board, writer, clock = board_and_writer(model)
    clock.now = 1.0
    writer.step(1.0, 0.1, 40_000, 3)  # 800 J asked for in 100 ms: capped, so power violation too
    writer.idle()
    before = board.read(0, model, 4.9)
    assert before.energy_mj == math.floor(expected_mj(model, 4.9, 40_000, 1))
    assert before.power_violation_us == 100_000
    after = board.read(0, model, 5.0)  # the reset, and no step since: nothing counted yet
    assert after.energy_mj == 0 and after.power_violation_us == 0 and after.energy_mj < before.energy_mj
    assert (after.base_prefill_tokens, after.base_decode_steps) == (40_000, 1)
    clock.now = 6.0
    writer.step(6.0, 0.01, 100, 1)  # the first step after it takes the base
    writer.idle()
    state = board.read(0, model, 8.0)
    assert state.energy_mj == math.floor(expected_mj(model, 3.0, 100, 1))
    assert (state.prefill_tokens, state.base_prefill_tokens) == (40_100, 40_000)
    assert board.counter_start(model, 8.0) == 5.0 and board.counter_start(model, 4.0) == 0.0
    board.close()


# -- the page -------------------------------------------------------------------------------------------------


def page_families(page: DcgmPage, now: float) -> dict:
    return {f.name: f for f in text_string_to_metric_families(page.render(now).decode())}


def test_the_page_has_every_field_for_every_gpu_with_dcgm_exporters_labels():
    shared = SharedStats(dialect_metrics("vllm"), workers=2)
    model = GpuModel(count=2, hostname="node-a", memory_mib=81559)
    page = DcgmPage(shared, model, seed=7)
    text = page.render(shared.gpu.boot + 1.0).decode()
    families = page_families(page, shared.gpu.boot + 1.0)
    assert [(f.name, f.type, f.documentation) for f in families.values()] == [
        (name, kind, help_text) for name, kind, help_text in FAMILIES]
    for family in families.values():
        assert [s.labels["gpu"] for s in family.samples] == ["0", "1", "2", "3"]
        for s in family.samples:
            assert list(s.labels) == LABELS
            g = int(s.labels["gpu"])
            assert s.labels["UUID"] == gpu_uuid(7, g) and s.labels["device"] == f"nvidia{g}"
            assert s.labels["modelName"] == "NVIDIA H100 80GB HBM3" and s.labels["Hostname"] == "node-a"
    used = {s.labels["gpu"]: s.value for s in families["DCGM_FI_DEV_FB_USED"].samples}
    free = {s.labels["gpu"]: s.value for s in families["DCGM_FI_DEV_FB_FREE"].samples}
    assert all(used[g] + free[g] == 81559 for g in used)
    energy = families["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].samples
    assert [s.value for s in energy] == [70_000] * 4  # 1 s idle
    assert re.search(r"^DCGM_FI_DEV_POWER_USAGE\{.*\} 70\.000000$", text, re.M)
    assert re.search(r"^DCGM_FI_DEV_GPU_TEMP\{.*\} 30$", text, re.M)
    shared.close()


def test_each_workers_replica_has_its_own_gpus_on_every_workers_page():
    shared = SharedStats(dialect_metrics("vllm"), workers=2)
    boot = shared.gpu.boot
    GpuWriter(shared.gpu, 1, MODEL).step(boot, 0.01, 500, 2)  # worker 1's replica: GPUs 2 and 3
    pages = [DcgmPage(shared, MODEL, seed=0) for _ in range(2)]  # each worker renders its own page object
    for page in pages:
        energy = page_families(page, boot + 2.0)["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].samples
        idle = 140_000
        work = math.floor(expected_mj(MODEL, 2.0, 500, 1))
        assert [s.value for s in energy] == [idle, idle, work, work]
    totals = pages[0].totals(boot + 2.0)
    assert totals["gpus"] == 4 and totals["prefill_tokens"] == 500 and totals["decode_steps"] == 1
    assert totals["energy_mj"] == [idle, idle, work, work]
    shared.close()


def test_uuids_are_deterministic_per_seed_and_index():
    assert gpu_uuid(0, 0) == gpu_uuid(0, 0)
    assert len({gpu_uuid(s, g) for s in range(3) for g in range(8)}) == 24
    assert re.fullmatch(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", gpu_uuid(1, 2))


# -- the flags -------------------------------------------------------------------------------------------------


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    sim_command.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_the_flags_make_the_gpu_model_with_documented_defaults():
    assert sim_command.config_from_args(parse()).gpu == GpuModel()
    assert GpuModel() == GpuModel(count=1, idle_watts=70.0, max_watts=700.0, joules_per_prefill_token=0.02,
                                  joules_per_decode_step=1.5, name="NVIDIA H100 80GB HBM3", memory_mib=81559,
                                  hostname="llmload-sim", driver_version="550.54.15", energy_reset_after_s=None)
    gpu = sim_command.config_from_args(parse(
        "--gpus", "4", "--gpu-idle-watts", "50", "--gpu-max-watts", "400", "--gpu-joules-per-prefill-token", "0.1",
        "--gpu-joules-per-decode-step", "3", "--gpu-name", "NVIDIA L40S", "--gpu-memory-mib", "46068",
        "--gpu-hostname", "h1", "--gpu-driver-version", "560.1", "--gpu-energy-reset-after", "30")).gpu
    assert gpu == GpuModel(4, 50.0, 400.0, 0.1, 3.0, "NVIDIA L40S", 46068, "h1", "560.1", 30.0)
    with pytest.raises(ConfigError, match="--gpu-max-watts"):
        sim_command.config_from_args(parse("--gpu-idle-watts", "500", "--gpu-max-watts", "400"))
