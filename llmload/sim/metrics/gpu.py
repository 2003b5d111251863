"""The engine's work for ``/dcgm/metrics``, in memory every worker process shares (as :mod:`.shared` does for
``/metrics``): each worker writes its replica's block once per engine step, and whichever worker answers a scrape
reads every block, so each replica's energy is on the page exactly once.

A block holds the replica's running totals since the simulator started (prefill tokens, decode steps, busy and
violation seconds), the step now running, the totals at the counter reset (``--gpu-energy-reset-after``), and a
ring of the latest busy periods (runs of back-to-back steps) for the utilisation window. One writer per block
needs no lock: a scrape that reads a block a step apart from another is what a scrape of a live exporter sees.
"""

from __future__ import annotations

import mmap
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType

from llmload.sim import power
from llmload.sim.config import GpuModel

FIELDS = ("prefill_tokens", "decode_steps", "steps", "busy_s", "power_violation_s", "thermal_violation_s",
          "stepping", "step_demand_w", "step_sm", "reset_taken", "reset_prefill_tokens", "reset_decode_steps",
          "reset_power_violation_s", "reset_thermal_violation_s", "periods")
SLOT = MappingProxyType({name: i for i, name in enumerate(FIELDS)})
#: busy periods kept per worker: a period lasts one step (1 ms or more) at least, so 1024 cover the window
RING = 1024
_PREFILL, _DECODE, _STEPS, _BUSY = SLOT["prefill_tokens"], SLOT["decode_steps"], SLOT["steps"], SLOT["busy_s"]
_PVIOL, _TVIOL, _STEPPING = SLOT["power_violation_s"], SLOT["thermal_violation_s"], SLOT["stepping"]
_DEMAND, _SM, _TAKEN, _PERIODS = SLOT["step_demand_w"], SLOT["step_sm"], SLOT["reset_taken"], SLOT["periods"]
_RESET = SLOT["reset_prefill_tokens"]  # then the other three reset_* fields, in FIELDS' order


@dataclass(frozen=True, slots=True)
class GpuState:
    """What each GPU of one replica shows at one moment (all N of its GPUs show the same)."""

    energy_mj: int
    power_w: float
    util: float
    sm_active: float
    power_violation_us: int
    thermal_violation_us: int
    #: the replica's running totals since the simulator started (the counters' base is at their start)
    prefill_tokens: int
    decode_steps: int
    steps: int
    busy_s: float
    #: the counters' work base: totals at the reset (0 before it)
    base_prefill_tokens: int
    base_decode_steps: int


class GpuBoard:
    """Every worker's block, in an anonymous shared mmap made before the workers fork; ``boot`` is the energy
    counters' start (``time.monotonic()``), the same in every worker."""

    def __init__(self, workers: int = 1, boot: float | None = None) -> None:
        self.workers = max(1, workers)
        self.boot = time.monotonic() if boot is None else boot
        self.block = len(FIELDS) + 2 * RING
        self._mem = mmap.mmap(-1, 8 * self.block * self.workers)
        self.view = memoryview(self._mem).cast("d")

    def close(self) -> None:
        self.view.release()
        self._mem.close()

    def scalar(self, index: int, name: str) -> float:
        return self.view[index * self.block + SLOT[name]]

    def counter_start(self, model: GpuModel, now: float) -> float:
        """When the counters in force at ``now`` started: the simulator's start, or the reset once it is past."""
        after = model.energy_reset_after_s
        if after is not None and now >= self.boot + after:
            return self.boot + after
        return self.boot

    def periods(self, index: int, since: float) -> list[tuple[float, float]]:
        """Worker ``index``'s busy periods that end after ``since``, newest first."""
        v, b = self.view, index * self.block
        count = int(v[b + _PERIODS])
        out: list[tuple[float, float]] = []
        for k in range(count - 1, max(-1, count - 1 - RING), -1):
            at = b + len(FIELDS) + 2 * (k % RING)
            start, end = v[at], v[at + 1]
            if end <= since:
                break
            out.append((start, end))
        return out

    def read(self, index: int, model: GpuModel, now: float) -> GpuState:
        """Worker ``index``'s GPUs at ``now`` (same clock as ``boot``): the power model of :mod:`llmload.sim.power`."""
        v, b = self.view, index * self.block
        totals = [v[b + i] for i in range(len(FIELDS))]
        start = self.counter_start(model, now)
        base = [0.0, 0.0, 0.0, 0.0]
        if start > self.boot:  # past the reset: the totals then (taken at the first step after it; none yet: now's)
            base = (totals[_RESET : _RESET + 4] if totals[_TAKEN]
                    else [totals[_PREFILL], totals[_DECODE], totals[_PVIOL], totals[_TVIOL]])
        util = power.busy_share(self.periods(index, now - power.WINDOW_S), now)
        watts = power.gauge_watts(model, totals[_DEMAND]) if totals[_STEPPING] else model.idle_watts
        return GpuState(
            energy_mj=power.energy_mj(model, now - start, totals[_PREFILL] - base[0], totals[_DECODE] - base[1]),
            power_w=watts, util=util, sm_active=util * totals[_SM],
            power_violation_us=int((totals[_PVIOL] - base[2]) * 1e6),
            thermal_violation_us=int((totals[_TVIOL] - base[3]) * 1e6),
            prefill_tokens=int(totals[_PREFILL]), decode_steps=int(totals[_DECODE]), steps=int(totals[_STEPS]),
            busy_s=totals[_BUSY], base_prefill_tokens=int(base[0]), base_decode_steps=int(base[1]),
        )


class GpuWriter:
    """One worker's writes into its block: a step begins, the engine goes idle."""

    __slots__ = ("_base", "_clock", "_model", "_reset_at", "_ring", "_view")

    def __init__(self, board: GpuBoard, index: int, model: GpuModel,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``clock`` tells when the reset is past (the wall clock, not the engine's model clock, which may lag
        it: a step that began before a scrape saw the reset must not land before the reset)."""
        self._view = board.view
        self._base = index * board.block
        self._ring = self._base + len(FIELDS)
        self._model = model
        self._clock = clock
        after = model.energy_reset_after_s
        self._reset_at = None if after is None else board.boot + after

    def step(self, start: float, duration: float, prefill_tokens: int, decode_seqs: int) -> None:
        """A step of ``duration`` seconds begins at ``start``, prefilling and decoding this much."""
        v, b, model = self._view, self._base, self._model
        if self._reset_at is not None and self._clock() >= self._reset_at:
            for i, total in enumerate((v[b + _PREFILL], v[b + _DECODE], v[b + _PVIOL], v[b + _TVIOL])):
                v[b + _RESET + i] = total
            v[b + _TAKEN] = 1.0
            self._reset_at = None
        demand = power.step_demand_watts(model, prefill_tokens, decode_seqs > 0, duration)
        v[b + _DEMAND] = demand
        v[b + _SM] = power.sm_active_ratio(decode_seqs + prefill_tokens)
        v[b + _PREFILL] += prefill_tokens
        v[b + _DECODE] += 1.0 if decode_seqs else 0.0
        v[b + _STEPS] += 1.0
        v[b + _BUSY] += duration
        if demand > model.max_watts:
            v[b + _PVIOL] += duration
        if power.temperature_c(power.gauge_watts(model, demand)) >= power.SLOWDOWN_C:
            v[b + _TVIOL] += duration
        self._extend_period(start, start + duration)
        v[b + _STEPPING] = 1.0

    def idle(self) -> None:
        """The engine has nothing to do: the GPUs draw idle power until the next step."""
        self._view[self._base + _STEPPING] = 0.0

    def _extend_period(self, start: float, end: float) -> None:
        """A step that begins where the previous one ended extends its busy period; any other starts a new one."""
        v, b = self._view, self._base
        count = int(v[b + _PERIODS])
        if count and v[b + _STEPPING]:
            at = self._ring + 2 * ((count - 1) % RING)
            if start <= v[at + 1]:
                v[at + 1] = end
                return
        at = self._ring + 2 * (count % RING)
        v[at] = start
        v[at + 1] = end
        v[b + _PERIODS] = count + 1  # after the period itself: a reader never sees an unwritten one

