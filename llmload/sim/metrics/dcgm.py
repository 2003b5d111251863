"""``GET /dcgm/metrics``: NVIDIA dcgm-exporter's page for the simulated GPUs, from the power model
(:mod:`llmload.sim.power`) over every worker's work (:mod:`llmload.sim.metrics.gpu`).

The page is what dcgm-exporter writes: the Prometheus text format, each field one family with ``# HELP`` (the help
texts of its default counters file) and ``# TYPE``, one sample per GPU, labelled ``gpu``, ``UUID``,
``pci_bus_id``, ``device``, ``modelName``, ``Hostname`` and ``DCGM_FI_DRIVER_VERSION`` in that order; integer
fields as integers, the others with six decimals. GPU ``w * N + j`` is GPU ``j`` of worker ``w``'s replica.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from typing import Any

from llmload.sim import power
from llmload.sim.config import GpuModel
from llmload.sim.metrics.gpu import GpuState
from llmload.sim.metrics.shared import SharedStats
from llmload.sim.metrics.spec import escape_label

#: (field, type, help) in dcgm-exporter's order; the help texts are its default counters file's
FAMILIES = (
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ)."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_POWER_VIOLATION", "counter", "Throttling duration due to power constraints (in us)."),
    ("DCGM_FI_DEV_THERMAL_VIOLATION", "counter", "Throttling duration due to thermal constraints (in us)."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_PROF_SM_ACTIVE", "gauge", "The ratio of cycles an SM has at least 1 warp assigned."),
)


def gpu_uuid(seed: int, index: int) -> str:
    """GPU ``index``'s UUID as NVIDIA writes it (``GPU-`` and a UUID), the same for the same ``--seed``."""
    digest = hashlib.sha256(f"llmload-sim-gpu:{seed}:{index}".encode()).digest()
    return f"GPU-{uuid.UUID(bytes=digest[:16])}"


def gpu_labels(model: GpuModel, seed: int, index: int) -> str:
    """GPU ``index``'s label set (without braces), as dcgm-exporter writes it."""
    return (f'gpu="{index}",UUID="{gpu_uuid(seed, index)}",pci_bus_id="00000000:{(0x18 + index) % 256:02X}:00.0",'
            f'device="nvidia{index}",modelName="{escape_label(model.name)}",'
            f'Hostname="{escape_label(model.hostname)}",DCGM_FI_DRIVER_VERSION="{escape_label(model.driver_version)}"')


def _fields(model: GpuModel, state: GpuState, kv_usage: float) -> tuple[str, ...]:
    """One GPU's values in :data:`FAMILIES`' order, formatted."""
    used = power.fb_used_mib(model, kv_usage)
    return (
        str(round(power.temperature_c(state.power_w))), f"{state.power_w:.6f}", str(state.energy_mj),
        str(round(100.0 * state.util)), "0", str(state.power_violation_us), str(state.thermal_violation_us),
        str(model.memory_mib - used), str(used), f"{state.sm_active:.6f}",
    )


class DcgmPage:
    """Renders ``/dcgm/metrics`` (and the ``gpu`` block of ``/sim/stats``) from the workers' shared blocks."""

    def __init__(self, shared: SharedStats, model: GpuModel, seed: int) -> None:
        self.shared = shared
        self.board = shared.gpu
        self.model = model
        self.gpus = self.board.workers * model.count
        self._labels = [gpu_labels(model, seed, g) for g in range(self.gpus)]

    def states(self, now: float) -> list[GpuState]:
        """Each worker's replica at ``now`` (``time.monotonic()``)."""
        return [self.board.read(w, self.model, now) for w in range(self.board.workers)]

    def render(self, now: float | None = None) -> bytes:
        now = time.monotonic() if now is None else now
        n = self.model.count
        rows = [_fields(self.model, state, self.shared.scalar(w, "kv_usage"))
                for w, state in enumerate(self.states(now))]
        out: list[str] = []
        for k, (name, kind, help_text) in enumerate(FAMILIES):
            out.append(f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n")
            out += [f"{name}{{{labels}}} {rows[g // n][k]}\n" for g, labels in enumerate(self._labels)]
        return "".join(out).encode()

    def totals(self, now: float | None = None) -> dict[str, Any]:
        """The model's inputs at ``now``: enough to recompute every GPU's energy counter (docs/simulator.md)."""
        now = time.monotonic() if now is None else now
        model, board = self.model, self.board
        states = self.states(now)
        workers = [{"prefill_tokens": s.prefill_tokens, "decode_steps": s.decode_steps, "steps": s.steps,
                    "busy_s": s.busy_s, "base_prefill_tokens": s.base_prefill_tokens,
                    "base_decode_steps": s.base_decode_steps, "energy_mj": s.energy_mj, "power_w": s.power_w,
                    "util_pct": round(100.0 * s.util)} for s in states]
        return {
            "gpus": self.gpus, "gpus_per_worker": model.count, "elapsed_s": now - board.boot,
            "counter_start_s": board.counter_start(model, now) - board.boot,
            "idle_watts": model.idle_watts, "max_watts": model.max_watts,
            "joules_per_prefill_token": model.joules_per_prefill_token,
            "joules_per_decode_step": model.joules_per_decode_step,
            "prefill_tokens": sum(s.prefill_tokens for s in states),
            "decode_steps": sum(s.decode_steps for s in states), "busy_s": sum(s.busy_s for s in states),
            "energy_mj": [states[g // model.count].energy_mj for g in range(self.gpus)], "workers": workers,
        }
