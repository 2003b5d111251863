"""Exact percentiles from passes over chunks (``llmload.metrics.exact``): equal to ``np.percentile`` over all the
values, bit for bit, for a million ITL-like values with ties, when buckets must be split again, for all-equal
values, negatives, tiny inputs and NaN, while holding far less than the values."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from llmload.metrics.exact import exact_percentiles, key_values, order_keys

PS = [0.0, 0.1, 1.0, 10.0, 25.0, 33.333, 50.0, 66.7, 75.0, 90.0, 95.0, 99.0, 99.9, 99.99, 100.0]


def bits(values) -> list[int]:
    return np.asarray(values, dtype=np.float64).view(np.uint64).tolist()


def chunked(values: np.ndarray, size: int):
    return lambda: (values[i : i + size] for i in range(0, len(values), size))


def itls(n: int, seed: int) -> np.ndarray:
    """ITL-like seconds with many ties: a 10 ms mode, a slow tail, rounded to 10 microseconds."""
    rng = np.random.default_rng(seed)
    values = np.where(rng.random(n) < 0.97, rng.normal(0.010, 0.0008, n), rng.lognormal(-3.0, 1.0, n))
    return np.round(np.abs(values), 5)


def test_a_million_itls_with_ties_equal_numpy_bit_for_bit() -> None:
    values = itls(1_200_000, 1)
    assert len(np.unique(values)) < len(values) // 10  # ties everywhere
    got = exact_percentiles(chunked(values, 100_000), PS)
    assert bits(got) == bits(np.percentile(values, PS))


def test_buckets_too_big_to_gather_are_split_again() -> None:
    values = itls(200_000, 2)
    got = exact_percentiles(chunked(values, 30_000), PS, max_gather=500)
    assert bits(got) == bits(np.percentile(values, PS))


@pytest.mark.parametrize("case", ["all-equal", "two-values", "negatives", "one", "two", "huge-range"])
def test_odd_inputs_equal_numpy(case: str) -> None:
    rng = np.random.default_rng(3)
    values = {
        "all-equal": np.full(50_000, 0.0125),
        "two-values": np.repeat([0.001, 7.5], [30_001, 19_999]),
        "negatives": rng.normal(0.0, 1.0, 40_000),
        "one": np.asarray([3.25]),
        "two": np.asarray([1.0, 2.0]),
        "huge-range": np.concatenate([rng.random(1000) * 1e-9, rng.random(1000) * 1e9, [0.0, 5e-324]]),
    }[case]
    for max_gather in (10, 1 << 22):
        got = exact_percentiles(chunked(values, 7_000), PS, max_gather=max_gather)
        assert bits(got) == bits(np.percentile(values, PS)), (case, max_gather)


def test_no_values_give_zeros_and_nan_gives_nan() -> None:
    assert exact_percentiles(lambda: iter([]), [50.0, 99.0]) == [0.0, 0.0]
    got = exact_percentiles(chunked(np.asarray([1.0, np.nan, 2.0]), 2), [50.0])
    assert np.isnan(got[0]) and np.isnan(np.percentile([1.0, np.nan, 2.0], 50.0))


def test_keys_sort_as_the_values_and_read_back() -> None:
    values = np.asarray([-np.inf, -1e300, -2.5, -5e-324, 0.0, 5e-324, 1e-300, 0.01, 2.5, 1e300, np.inf])
    keys = order_keys(values)
    assert (np.diff(keys.astype(object)) > 0).all()
    assert bits(key_values(keys)) == bits(values)


def test_memory_is_a_chunk_and_a_bucket_not_the_values() -> None:
    """8 MB of values made chunk by chunk: the passes hold a chunk, a histogram and one bucket's keys."""
    n, size = 1_000_000, 50_000

    def chunks():
        for i in range(n // size):
            yield itls(size, 100 + i)

    tracemalloc.start()
    try:
        exact_percentiles(chunks, [50.0, 99.0], max_gather=100_000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4_000_000, f"peak {peak} bytes: more than a chunk and a bucket"
