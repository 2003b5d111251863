"""argparse ``type=`` functions for every command: each names what it expects, so a bad value reads
``argument --request-rate: expected a number, got 'abc'`` (never argparse's ``invalid _rate value``)."""

from __future__ import annotations

import argparse
import math
import os

from llmload.common.choices import PERCENTILE_METRIC_NAMES

ArgumentTypeError = argparse.ArgumentTypeError


def number(text: str) -> float:
    """Any float but NaN (``inf`` allowed)."""
    try:
        value = float(text)
    except ValueError:
        raise ArgumentTypeError(f"expected a number, got {text!r}") from None
    if math.isnan(value):
        raise ArgumentTypeError(f"expected a number, got {text!r}")
    return value


def integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ArgumentTypeError(f"expected an integer, got {text!r}") from None


def rate(text: str) -> float:
    """Requests per second: > 0, or ``inf``."""
    value = number(text)
    if value <= 0:
        raise ArgumentTypeError(f"must be > 0 or inf, got {text}")
    return value


def positive_int(text: str) -> int:
    value = integer(text)
    if value < 1:
        raise ArgumentTypeError(f"must be at least 1, got {text}")
    return value


class AutoProcesses(int):
    """``--processes auto``: the worker count it chose (an int everywhere), with the cores it counted."""

    cores: int

    def __new__(cls, cores: int) -> AutoProcesses:
        value = super().__new__(cls, auto_processes(cores))
        value.cores = cores
        return value

    def __reduce__(self) -> tuple[type, tuple[int]]:
        return int, (int(self),)  # a copy is the count it chose


def auto_processes(cores: int) -> int:
    """One worker per core, leaving the master one when there are more than two."""
    return cores - 1 if cores > 2 else max(1, cores)


def process_count(text: str) -> int:
    """``--processes``: a count >= 1, or ``auto`` (:func:`auto_processes` of the cores this process may use, its
    CPU affinity)."""
    if text.strip().lower() == "auto":
        return AutoProcesses(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    return positive_int(text)


def non_negative_int(text: str) -> int:
    value = integer(text)
    if value < 0:
        raise ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def seconds(text: str) -> float:
    """A finite duration >= 0."""
    value = number(text)
    if value < 0 or math.isinf(value):
        raise ArgumentTypeError(f"must be a number of seconds >= 0, got {text}")
    return value


def positive_seconds(text: str) -> float:
    value = seconds(text)
    if value <= 0:
        raise ArgumentTypeError(f"must be > 0 seconds, got {text}")
    return value


def non_negative(text: str) -> float:
    """A finite number >= 0 (milliseconds, rates of a ramp)."""
    value = number(text)
    if value < 0 or math.isinf(value):
        raise ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def positive(text: str) -> float:
    value = number(text)
    if value <= 0 or math.isinf(value):
        raise ArgumentTypeError(f"must be > 0, got {text}")
    return value


def fraction(text: str) -> float:
    value = number(text)
    if not 0.0 <= value <= 1.0:
        raise ArgumentTypeError(f"must be a fraction between 0 and 1, got {text}")
    return value


def range_ratio(text: str) -> float:
    value = number(text)
    if not 0.0 <= value < 1.0:
        raise ArgumentTypeError(f"must be in [0, 1), got {text}")
    return value


def range_ratios(text: str) -> float | tuple[float, float]:
    """``--random-range-ratio``: one ratio, or today's vLLM's JSON ``{"input": r, "output": r}`` (both keys;
    each in [0, 1)) as ``(input, output)``."""
    try:
        return range_ratio(text)
    except ArgumentTypeError:
        if not str(text).lstrip().startswith("{"):
            raise
    import json

    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise ArgumentTypeError(f"not a number or a JSON object: {text}") from None
    if not isinstance(value, dict) or not {"input", "output"} <= set(value):
        raise ArgumentTypeError("When range_ratio is a dict it must contain 'input' and 'output' keys, got: "
                                f"{sorted(value) if isinstance(value, dict) else value}")
    pair = []
    for key in ("input", "output"):
        try:
            ratio = float(value[key])
        except (TypeError, ValueError):
            raise ArgumentTypeError(f"{key}_range_ratio must be a number, got {value[key]!r}") from None
        if not 0.0 <= ratio < 1.0:
            raise ArgumentTypeError(f"{key}_range_ratio must be in [0, 1).")
        pair.append(ratio)
    return pair[0], pair[1]


def mm_limits(text: str) -> dict[str, int]:
    """``--random-mm-limit-mm-per-prompt``: vLLM's JSON ``{"image": N, "video": N}``."""
    from llmload.common.errors import DatasetError
    from llmload.datasets.random_mm import parse_limits

    try:
        return parse_limits(text)
    except DatasetError as exc:
        raise ArgumentTypeError(str(exc).split(": ", 1)[-1]) from None


def mm_buckets(text: str) -> dict[tuple[int, int, int], float]:
    """``--random-mm-bucket-config``: vLLM's Python-literal ``{(H, W, T): probability}``."""
    from llmload.common.errors import DatasetError
    from llmload.datasets.random_mm import parse_bucket_config

    try:
        return parse_bucket_config(text)
    except DatasetError as exc:
        raise ArgumentTypeError(str(exc).split(": ", 1)[-1]) from None


def gpu_ids(text: str) -> list[int]:
    """``--energy-gpu-ids``: comma-separated GPU indexes (``0,1``), each >= 0, no repeats."""
    parts = [p.strip() for p in str(text).split(",")]
    if not all(p.isdigit() for p in parts):
        raise ArgumentTypeError(f"expected GPU indexes like 0,1, got {text!r}")
    ids = [int(p) for p in parts]
    if len(set(ids)) != len(ids):
        raise ArgumentTypeError(f"a GPU index appears twice in {text!r}")
    return ids


def port(text: str) -> int:
    value = integer(text)
    if not 0 < value < 65536:
        raise ArgumentTypeError(f"must be a TCP port (1-65535), got {text}")
    return value


def port_or_zero(text: str) -> int:
    """A TCP port, or 0: pick a free one."""
    value = integer(text)
    if not 0 <= value < 65536:
        raise ArgumentTypeError(f"must be a TCP port (0-65535; 0 picks a free one), got {text}")
    return value


def percentiles(text: str) -> list[float]:
    """Comma-separated percentiles in (0, 100]."""
    values = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        value = number(item)
        if not 0.0 < value <= 100.0:
            raise ArgumentTypeError(f"percentiles must be in (0, 100], got {item}")
        values.append(value)
    if not values:
        raise ArgumentTypeError("give at least one percentile, e.g. 50,99")
    return values


def metric_names(text: str) -> list[str]:
    """Comma-separated metric names from vLLM's ``--percentile-metrics``."""
    names = [x.strip() for x in text.split(",") if x.strip()]
    unknown = [n for n in names if n not in PERCENTILE_METRIC_NAMES]
    if unknown or not names:
        raise ArgumentTypeError(f"unknown metric {', '.join(unknown) or text!r} (use "
                                f"{','.join(PERCENTILE_METRIC_NAMES)})")
    return names
