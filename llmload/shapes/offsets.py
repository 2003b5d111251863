"""Open loop: send offsets whose instantaneous rate follows a shape, by time rescaling.

The method is described in :mod:`llmload.shapes`.
"""

from __future__ import annotations

import math

import numpy as np

from llmload.common.errors import ConfigError
from llmload.shapes.kinds import Shape

_BISECT_STEPS = 64


def invert_cumulative(shape: Shape, u: np.ndarray) -> np.ndarray:
    """Times ``t`` in [0, duration] with ``cumulative(t) = u`` (vectorized bisection, ~1e-19 relative)."""
    u = np.asarray(u, dtype=np.float64)
    lo = np.zeros_like(u)
    hi = np.full_like(u, shape.duration)
    for _ in range(_BISECT_STEPS):
        mid = 0.5 * (lo + hi)
        below = shape.cumulative(mid) < u
        lo = np.where(below, mid, lo)
        hi = np.where(below, hi, mid)
    return hi


def rate_offsets(
    shape: Shape, rng: np.random.RandomState | np.random.Generator, burstiness: float = 1.0
) -> np.ndarray:
    """Open-loop send offsets (seconds, increasing, within the duration) whose rate follows ``shape``.

    Time rescaling (module docstring): unit-mean gaps Gamma(b, 1/b) in ``Λ``-time, mapped back through
    ``Λ⁻¹``. The count is random, with mean ``cumulative(duration)``. Deterministic for a seeded ``rng``.
    """
    if math.isnan(burstiness) or burstiness <= 0:
        raise ConfigError(f"--burstiness must be > 0, got {burstiness}")
    total = float(shape.cumulative(shape.duration))
    if total <= 0:
        return np.zeros(0)
    chunk = max(64, int(total + 6 * math.sqrt(total / min(burstiness, 1.0)) + 16))
    marks: list[np.ndarray] = []
    last = 0.0
    while True:
        gaps = rng.gamma(shape=burstiness, scale=1.0 / burstiness, size=chunk)
        u = last + np.cumsum(gaps)
        marks.append(u[u < total])
        if u[-1] >= total:
            break
        last = float(u[-1])
    u = np.concatenate(marks)
    return invert_cumulative(shape, u)
