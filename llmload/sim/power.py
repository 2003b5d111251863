"""The simulated GPUs' power model behind ``/dcgm/metrics``: pure functions of the engine's work, so that every
number on the page follows from a formula a test can compute on its own (docs/simulator.md, "GPU telemetry").

**Energy.** Each GPU of an engine replica draws ``idle_watts`` all the time, plus its share (1/N: the replica is
tensor parallel over N GPUs) of the work's energy: ``joules_per_prefill_token`` per prompt token the engine
prefills (tokens the prefix cache held are not prefilled) and ``joules_per_decode_step`` per engine step in which
at least one sequence decodes. A step's work energy is booked when the step begins. So, ``T`` seconds after a
GPU's energy counter started (at the simulator's start, or at its ``--gpu-energy-reset-after``),

    E(T) [J] = idle_watts * T + (joules_per_prefill_token * P + joules_per_decode_step * D) / N

where P and D are the prefill tokens and decode steps of the replica's steps begun in those T seconds. DCGM's
counter is in millijoules: the page serves ``floor(1000 * E)``.

**Power.** While a step of ``d`` seconds runs, a GPU asks for ``idle + work / (N * d)`` watts (``work``: the
step's work energy); the gauge serves that capped at ``max_watts``, and ``idle_watts`` between steps. The cap is
on the gauge only: a capped GPU would run slower and spend the same energy, and the simulator does not slow down,
so the counter stays the formula above. The time of the steps that asked for more than ``max_watts`` is the
power violation counter (what a GPU throttled by its power limit reports).

**The rest.** Utilisation is the share of the last :data:`WINDOW_S` of wall time the engine spent in steps;
``DCGM_FI_PROF_SM_ACTIVE`` is that share times :func:`sm_active_ratio` of the latest step's batch; framebuffer
use is the weights' :data:`WEIGHTS_SHARE` of memory plus the KV cache's usage share of the rest; the temperature
is :func:`temperature_c` of the gauge's power, and its slowdown temperature the thermal violation's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from llmload.sim.config import GpuModel

#: the utilisation window: DCGM samples GPU utilisation over a period of 1/6 s to 1 s, depending on the product
WINDOW_S = 1.0
#: share of each GPU's memory the model's weights (and activations, CUDA context) take
WEIGHTS_SHARE = 0.6
#: temperature = AMBIENT_C + C_PER_WATT * power: an air-cooled H100 sits near 30 C idle and 75-80 C at 700 W
AMBIENT_C = 25.0
C_PER_WATT = 0.075
#: the temperature from which a GPU slows itself down (an H100's is near 87 C): steps above it are thermal violation
SLOWDOWN_C = 87.0
#: SM activity of a step with a batch of ``b`` tokens: SM_FLOOR + (1 - SM_FLOOR) * min(1, b / SM_FULL_TOKENS)
SM_FLOOR = 0.4
SM_FULL_TOKENS = 256


def work_joules(model: GpuModel, prefill_tokens: float, decode_steps: float) -> float:
    """The engine's work energy (all its GPUs together) for this many prefilled tokens and decode steps."""
    return model.joules_per_prefill_token * prefill_tokens + model.joules_per_decode_step * decode_steps


def energy_joules(model: GpuModel, seconds: float, prefill_tokens: float, decode_steps: float) -> float:
    """One GPU's energy over ``seconds`` in which its replica did this work: the module's formula."""
    return model.idle_watts * seconds + work_joules(model, prefill_tokens, decode_steps) / model.count


def energy_mj(model: GpuModel, seconds: float, prefill_tokens: float, decode_steps: float) -> int:
    """:func:`energy_joules` as DCGM's counter writes it: whole millijoules."""
    return math.floor(1000.0 * energy_joules(model, seconds, prefill_tokens, decode_steps))


def step_demand_watts(model: GpuModel, prefill_tokens: int, decoding: bool, duration: float) -> float:
    """What one GPU asks for while a step of ``duration`` seconds runs (uncapped)."""
    if duration <= 0.0:
        return model.idle_watts
    work = work_joules(model, prefill_tokens, 1 if decoding else 0)
    return model.idle_watts + work / (model.count * duration)


def gauge_watts(model: GpuModel, demand: float) -> float:
    """The power gauge for a demand: capped at the board's limit."""
    return min(model.max_watts, demand)


def temperature_c(watts: float) -> float:
    """The GPU temperature at a power draw (a linear model, no thermal lag)."""
    return AMBIENT_C + C_PER_WATT * watts


def sm_active_ratio(batch_tokens: int) -> float:
    """Share of SMs busy during a step of ``batch_tokens`` tokens (decoding sequences plus prefilled tokens).

    Even one sequence's decode spreads the weight matrices over most SMs (hence the floor); larger batches fill
    the rest. A step with no tokens (the engine waiting on an adapter load) keeps no SM busy.
    """
    if batch_tokens <= 0:
        return 0.0
    return SM_FLOOR + (1.0 - SM_FLOOR) * min(1.0, batch_tokens / SM_FULL_TOKENS)


def busy_share(periods: Iterable[tuple[float, float]], now: float, window: float = WINDOW_S) -> float:
    """Share of ``(now - window, now]`` covered by busy ``(start, end)`` periods (disjoint; a period still running
    at ``now`` counts up to ``now``)."""
    lo = now - window
    busy = 0.0
    for start, end in periods:
        overlap = min(end, now) - max(start, lo)
        if overlap > 0.0:
            busy += overlap
    return min(1.0, busy / window)


def fb_used_mib(model: GpuModel, kv_usage: float) -> int:
    """Framebuffer in use: the weights' share of memory plus the KV cache's usage (0..1) share of the rest."""
    weights = round(model.memory_mib * WEIGHTS_SHARE)
    return weights + round(min(1.0, max(0.0, kv_usage)) * (model.memory_mib - weights))
