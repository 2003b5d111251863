"""Seeded fault selection: each request gets at most one fault, with the configured probabilities."""

from __future__ import annotations

import random
from dataclasses import dataclass

from llmload.sim.config import Faults

#: in draw order (a new kind goes last, so a seed keeps faulting the same requests with the older kinds)
FAULT_KINDS = ("error", "disconnect", "stall", "malformed", "slow_headers", "not_streamed")


@dataclass(slots=True)
class Fault:
    kind: str
    #: HTTP status for ``error``
    status: int = 0


class FaultPicker:
    """One uniform draw per request split into disjoint ranges, so each fault occurs at exactly its rate."""

    def __init__(self, faults: Faults, seed: int) -> None:
        self.faults = faults
        self.rng = random.Random(seed)
        if sum(faults.rates) > 1.0 + 1e-9:
            raise ValueError("fault rates add up to more than 1")

    def pick(self) -> Fault | None:
        f = self.faults
        if not f.any:
            return None
        u = self.rng.random()
        for kind, rate in zip(FAULT_KINDS, f.rates, strict=True):
            if u < rate:
                status = self.rng.choice(f.error_codes) if kind == "error" else 0
                return Fault(kind, status)
            u -= rate
        return None
