"""Exact percentiles of more values than a run should hold in memory: numpy's linear method, bit for bit, from
passes over the values in chunks (issue 37: the end-of-run statistics read the records journal on disk).

    exact_percentiles(chunks, ps) == np.percentile(np.concatenate(list(chunks())), ps)   # every bit

``chunks`` is called once per pass and yields float64 arrays (a journal read in slices): nothing but one chunk,
a histogram and the values of a few buckets is ever held.

How: each value's float64 bit pattern becomes an unsigned key with the same order (:func:`order_keys`). Pass 1
counts the values and a histogram of the keys' top 16 bits; the cumulative counts say in which bucket each
needed order statistic lies (the two ranks numpy interpolates between, per percentile) and its rank inside.
A bucket with more than ``max_gather`` values is split by its next 16 bits in another pass (ties share all 64
bits: a statistic found there needs no gathering). A last pass gathers the keys of each remaining bucket and
``np.partition`` picks the statistic. The interpolation is numpy's own arithmetic (rank ``(n - 1) * p / 100``,
its floor and fraction, ``b - (b - a) * (1 - t)`` from ``t >= 0.5`` on), so the result equals
``np.percentile``'s exactly. NaN anywhere gives NaN, as numpy; no values give zeros, as
:func:`~llmload.metrics.percentiles.linear_percentiles`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

#: bits of the key each histogram pass splits on (a 65,536-bucket histogram: 512 KiB)
STEP_BITS = 16
#: the most values a bucket may hold for its keys to be gathered (2 MiB of keys; more: another 16-bit pass)
MAX_GATHER = 1 << 18
_SIGN = np.uint64(1 << 63)
_KEY_BITS = 64

Chunks = Callable[[], Iterable[np.ndarray]]


def order_keys(values: np.ndarray) -> np.ndarray:
    """uint64 keys that sort as the float64 values do (negatives flipped whole, positives with the sign bit
    set); -0.0 sorts just below 0.0."""
    bits = np.ascontiguousarray(values, dtype=np.float64).view(np.uint64)
    return np.where(bits >> np.uint64(63), ~bits, bits | _SIGN)


def key_values(keys: np.ndarray) -> np.ndarray:
    """The float64 values of :func:`order_keys`' keys."""
    keys = np.asarray(keys, dtype=np.uint64)
    return np.where(keys >> np.uint64(63), keys & ~_SIGN, ~keys).view(np.float64)


@dataclass
class _Target:
    """One order statistic being narrowed down: the values whose keys start with ``prefix`` (its top ``bits``
    bits) hold it, at ``rank`` among them, and there are ``size`` of them."""

    rank: int
    prefix: int = 0
    bits: int = 0
    size: int = 0
    value: float | None = None


def exact_percentiles(chunks: Chunks, ps: Sequence[float], *, max_gather: int = MAX_GATHER) -> list[float]:
    """``np.percentile(all values, ps)`` (linear), bit for bit, from passes over ``chunks()`` (module docstring)."""
    return exact_order_statistics(chunks, ps, (), max_gather=max_gather)[0]


def exact_order_statistics(chunks: Chunks, ps: Sequence[float], ranks: Sequence[int], *,
                           max_gather: int = MAX_GATHER) -> tuple[list[float], list[float]]:
    """The percentiles ``ps`` (as :func:`exact_percentiles`) and the values of 0-based ``ranks`` in sorted order
    (a median's middle values, the maximum), found in the same passes. No values: zeros; NaN anywhere: NaN."""
    n, has_nan, counts = _first_pass(chunks)
    if n == 0 or has_nan:
        fill = float("nan") if has_nan else 0.0
        return [fill for _ in ps], [fill for _ in ranks]
    q = np.true_divide(np.asarray(ps, dtype=np.float64), 100)
    virtual = (n - 1) * q  # numpy's linear method: the virtual index, its floor and the fraction
    lower = np.floor(virtual)
    gamma = virtual - lower
    low = np.where(virtual >= n - 1, n - 1, lower).astype(np.int64)
    high = np.minimum(low + 1, n - 1)
    wanted = np.concatenate([low, high, np.clip(np.asarray(ranks, dtype=np.int64), 0, n - 1)])
    targets = {int(r): _Target(int(r), size=n) for r in np.unique(wanted)}
    _narrow(chunks, list(targets.values()), counts, max_gather)
    _gather(chunks, [t for t in targets.values() if t.value is None])
    a = np.asarray([targets[int(r)].value for r in low], dtype=np.float64)
    b = np.asarray([targets[int(r)].value for r in high], dtype=np.float64)
    stats = [float(targets[min(max(int(r), 0), n - 1)].value) for r in ranks]  # type: ignore[arg-type]
    return [float(x) for x in _lerp(a, b, gamma)], stats


def _lerp(a: np.ndarray, b: np.ndarray, t: np.ndarray) -> np.ndarray:
    """numpy's interpolation between neighbours, operation for operation (``numpy.lib`` ``_lerp``)."""
    diff = b - a
    out = np.add(a, diff * t)
    np.subtract(b, diff * (1 - t), out=out, where=t >= 0.5)
    return out


def _first_pass(chunks: Chunks) -> tuple[int, bool, np.ndarray]:
    """How many values, whether any is NaN, and the histogram of their keys' top bits."""
    n = 0
    counts = np.zeros(1 << STEP_BITS, dtype=np.int64)
    shift = np.uint64(_KEY_BITS - STEP_BITS)
    for chunk in chunks():
        values = np.asarray(chunk, dtype=np.float64).ravel()
        if not values.size:
            continue
        if np.isnan(values).any():
            return 1, True, counts
        n += values.size
        counts += np.bincount((order_keys(values) >> shift).astype(np.int64), minlength=1 << STEP_BITS)
    return n, False, counts


def _descend(target: _Target, counts: np.ndarray) -> None:
    """Move ``target`` into the bucket of ``counts`` (a histogram of its next bits) that holds its rank."""
    cum = np.cumsum(counts)
    bucket = int(np.searchsorted(cum, target.rank, side="right"))
    target.rank -= int(cum[bucket - 1]) if bucket else 0
    target.prefix = (target.prefix << STEP_BITS) | bucket
    target.bits += STEP_BITS
    target.size = int(counts[bucket])
    if target.bits == _KEY_BITS:  # every value here has this key: it is the statistic
        target.value = float(key_values(np.asarray([target.prefix], dtype=np.uint64))[0])


def _narrow(chunks: Chunks, targets: list[_Target], first: np.ndarray, max_gather: int) -> None:
    """Descend every target by the first histogram, then by one more pass per 16 bits while its bucket is too
    big to gather."""
    for t in targets:
        _descend(t, first)
    while True:
        open_ = [t for t in targets if t.value is None and t.size > max_gather]
        if not open_:
            return
        groups = {(t.prefix, t.bits) for t in open_}
        hists = {g: np.zeros(1 << STEP_BITS, dtype=np.int64) for g in groups}
        for chunk in chunks():
            keys = order_keys(np.asarray(chunk, dtype=np.float64).ravel())
            for (prefix, bits), hist in hists.items():
                mine = keys[(keys >> np.uint64(_KEY_BITS - bits)) == np.uint64(prefix)]
                if mine.size:
                    nxt = (mine >> np.uint64(_KEY_BITS - bits - STEP_BITS)) & np.uint64((1 << STEP_BITS) - 1)
                    hist += np.bincount(nxt.astype(np.int64), minlength=1 << STEP_BITS)
        for t in open_:
            _descend(t, hists[(t.prefix, t.bits)])


def _gather(chunks: Chunks, targets: list[_Target]) -> None:
    """One pass: the keys of each target's bucket, then its statistic by ``np.partition``."""
    if not targets:
        return
    groups = {(t.prefix, t.bits) for t in targets}
    found: dict[tuple[int, int], list[np.ndarray]] = {g: [] for g in groups}
    for chunk in chunks():
        keys = order_keys(np.asarray(chunk, dtype=np.float64).ravel())
        for prefix, bits in groups:
            mine = keys[(keys >> np.uint64(_KEY_BITS - bits)) == np.uint64(prefix)]
            if mine.size:
                found[(prefix, bits)].append(mine)
    for t in targets:
        keys = np.concatenate(found[(t.prefix, t.bits)])
        t.value = float(key_values(np.partition(keys, t.rank)[t.rank : t.rank + 1])[0])
