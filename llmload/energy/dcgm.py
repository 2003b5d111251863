"""NVIDIA DCGM exporter pages (``dcgm-exporter``'s ``:9400/metrics``) -> one reading per GPU.

dcgm-exporter writes one Prometheus gauge or counter per field, one sample per GPU, labelled ``gpu`` (the index),
``UUID``, ``device``, ``modelName`` and ``Hostname``. The fields llmload reads (docs/energy.md):

==================================== ===================== ========================================
field                                 kind                  reading
==================================== ===================== ========================================
``DCGM_FI_DEV_POWER_USAGE``           gauge, W              ``power_w``
``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` counter, mJ since boot ``energy_mj``
``DCGM_FI_DEV_GPU_UTIL``              gauge, %              ``util_pct``
``DCGM_FI_DEV_FB_USED`` / ``_FREE``   gauge, MiB            ``fb_used_mib`` / ``fb_free_mib``
``DCGM_FI_PROF_SM_ACTIVE``            gauge, ratio 0-1      ``sm_active``
``DCGM_FI_DEV_GPU_TEMP``              gauge, °C             ``temp_c``
``DCGM_FI_DEV_XID_ERRORS``            gauge, last XID       ``xid``
``DCGM_FI_DEV_POWER_VIOLATION``       counter, µs           ``power_violation_us``
``DCGM_FI_DEV_THERMAL_VIOLATION``     counter, µs           ``thermal_violation_us``
==================================== ===================== ========================================

The page is parsed by ``prometheus_client``'s parser (:mod:`llmload.servermetrics.parse`), as the server's are.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from llmload.servermetrics.parse import Sample

#: DCGM field -> the reading's name
FIELDS: dict[str, str] = {
    "DCGM_FI_DEV_POWER_USAGE": "power_w",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "energy_mj",
    "DCGM_FI_DEV_GPU_UTIL": "util_pct",
    "DCGM_FI_DEV_FB_USED": "fb_used_mib",
    "DCGM_FI_DEV_FB_FREE": "fb_free_mib",
    "DCGM_FI_PROF_SM_ACTIVE": "sm_active",
    "DCGM_FI_DEV_GPU_TEMP": "temp_c",
    "DCGM_FI_DEV_XID_ERRORS": "xid",
    "DCGM_FI_DEV_POWER_VIOLATION": "power_violation_us",
    "DCGM_FI_DEV_THERMAL_VIOLATION": "thermal_violation_us",
}
#: the readings a page needs at least one of to count as GPU telemetry
ENERGY_FIELDS = ("power_w", "energy_mj")


@dataclass(slots=True)
class GpuReading:
    """One GPU's fields at one scrape (absent fields are missing from ``values``)."""

    host: str
    gpu: str
    model: str = ""
    values: dict[str, float] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """``host/gpu``: unique over the nodes of a run."""
        return f"{self.host}/{self.gpu}"


def gpu_readings(samples: Iterable[Sample], default_host: str = "") -> dict[str, GpuReading]:
    """The page's readings by GPU key; a sample without a ``gpu`` label is not a GPU's (skipped). ``default_host``
    (the page's URL host) stands in for pages without a ``Hostname`` label."""
    out: dict[str, GpuReading] = {}
    for s in samples:
        name = s.name.removesuffix("_total") if s.name not in FIELDS else s.name
        reading_name = FIELDS.get(name)
        if reading_name is None or "gpu" not in s.labels:
            continue
        host = s.labels.get("Hostname") or s.labels.get("hostname") or default_host
        reading = GpuReading(host, s.labels["gpu"], s.labels.get("modelName", ""))
        reading = out.setdefault(reading.key, reading)
        reading.values[reading_name] = s.value
    return out


def has_energy(readings: dict[str, GpuReading]) -> bool:
    """Whether any GPU reports power or energy: a page without either is not DCGM telemetry llmload can use."""
    return any(name in r.values for r in readings.values() for name in ENERGY_FIELDS)
