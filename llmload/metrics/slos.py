"""Goodput SLOs: the one parser (``--goodput`` for bench, report and compare; the live tab's form) and checks.

Structure (milliseconds):

    ["ttft:500", "tpot:50"]                  -> {"ttft": 500.0, "tpot": 50.0}             as always
    ["ttft:500", "Chat:ttft:300", "Chat:e2el:9000"]
                                             -> {"ttft": 500.0, "Chat": {"ttft": 300.0, "e2el": 9000.0}}

    ["ttft:500", "model=lora-a:ttft:200"]    -> {"ttft": 500.0, "model=lora-a": {"ttft": 200.0}}

A ``CLASS:METRIC:MS`` item gives the requests of one user class (``RequestRecord.user_class``) SLOs of their
own; they replace the run-wide ones for that class (a metric it leaves out is not checked for it). A
``model=NAME:METRIC:MS`` item does the same for the requests that named one model or LoRA adapter
(``RequestRecord.model``; NAME may hold colons), and wins over its class's: :func:`slos_for` picks a request's.
:func:`split_slos` separates run-wide from the rest; :func:`llmload.metrics.compute_metrics` takes either.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from llmload.common.errors import ConfigError
from llmload.metrics.definitions import GOODPUT_METRICS

#: run-wide SLOs, or run-wide plus per-class and per-model ones: what :func:`parse_goodput` returns
SLOs = dict[str, Any]
#: how a per-model entry's key starts (a user class, a Python name, cannot hold ``=``)
MODEL_PREFIX = "model="


def model_key(model: str) -> str:
    """The key of one model's SLOs in :func:`parse_goodput`'s structure."""
    return MODEL_PREFIX + model


def _number(item: str, value: str) -> float:
    try:
        ms = float(value)
    except ValueError:
        raise ConfigError(f"--goodput: {item!r}: {value!r} is not a number of milliseconds") from None
    if not ms >= 0 or math.isinf(ms):
        raise ConfigError(f"--goodput: {item!r}: the SLO must be a finite number of ms >= 0")
    return ms


def parse_goodput(items: list[str] | None) -> SLOs | None:
    """``--goodput`` items -> SLOs in ms (structure in the module docstring); None when there are none."""
    if not items:
        return None
    slos: SLOs = {}
    for item in items:
        head, sep, value = item.rpartition(":")
        user_class, _, name = head.rpartition(":")
        if not sep or name not in GOODPUT_METRICS or (":" in head and not user_class) \
                or user_class == MODEL_PREFIX:
            raise ConfigError(f"--goodput: expected METRIC:MS, CLASS:METRIC:MS or model=NAME:METRIC:MS with METRIC "
                              f"one of {', '.join(GOODPUT_METRICS)}, got {item!r}")
        if not user_class:
            slos[name] = _number(item, value)
        elif user_class in GOODPUT_METRICS:
            raise ConfigError(f"--goodput: {item!r}: a user class cannot be called {user_class!r}")
        else:
            slos.setdefault(user_class, {})[name] = _number(item, value)
    return slos


def split_slos(slos: Mapping[str, Any] | None) -> tuple[dict[str, float] | None, dict[str, dict[str, float]]]:
    """``(run-wide SLOs or None, {class: SLOs})`` from :func:`parse_goodput`'s structure."""
    run_wide = {k: v for k, v in (slos or {}).items() if not isinstance(v, Mapping)}
    by_class = {k: dict(v) for k, v in (slos or {}).items() if isinstance(v, Mapping)}
    return run_wide or None, by_class


def slos_for(run_wide: Mapping[str, float] | None, parts: Mapping[str, Mapping[str, float]], user_class: str,
             model: str = "") -> dict[str, float]:
    """The SLOs a request of ``user_class`` that named ``model`` is judged by: its model's, else its class's,
    else the run-wide ones (``parts``: :func:`split_slos`'s second half)."""
    own = parts.get(model_key(model)) if model else None
    if own is None:
        own = parts.get(user_class)
    return dict(own if own is not None else run_wide or {})


def check_slos(slos: Mapping[str, float] | None, where: str = "--goodput") -> None:
    """Raise :class:`ConfigError` for an unknown metric or a negative SLO."""
    for name, slo in (slos or {}).items():
        if name not in GOODPUT_METRICS:
            raise ConfigError(f"{where}: unknown metric {name!r} (use {', '.join(GOODPUT_METRICS)})")
        if not slo >= 0:
            raise ConfigError(f"{where}: the SLO for {name} must be non-negative, got {slo}")


def form_items(form: Mapping[str, Any]) -> list[str]:
    """The live tab's SLO form (``{"ttft": "500", "tpot": "", "Chat:e2el": 900, "items": "model=a:ttft:200"}``)
    as ``--goodput`` items: ``items`` holds whole items (space or comma separated), every other key ending in a
    metric is ``KEY:VALUE``; empty fields and other keys are left out."""
    items = []
    for key, raw in form.items():
        if key == "items":
            items.extend(item for item in str(raw or "").replace(",", " ").split())
        elif raw not in (None, "") and key.rpartition(":")[2] in GOODPUT_METRICS:
            items.append(f"{key}:{raw}")
    return items
