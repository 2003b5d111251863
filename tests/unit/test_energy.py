"""GPU telemetry to energy per token (docs/energy.md): a page as NVIDIA's dcgm-exporter writes it, counters with
resets, power integrated when there is no counter, and the keys and findings a run gets."""

from __future__ import annotations

import pytest

from llmload.energy.dcgm import gpu_readings, has_energy
from llmload.energy.summary import GpuScrape, energy_keys, findings, power_integral
from llmload.servermetrics.parse import parse_exposition
from llmload.servermetrics.summarize import increase

LABELS = ('gpu="{gpu}",UUID="GPU-9c2ad6ad-0d3c-11ee-be56-0242ac12000{gpu}",pci_bus_id="00000000:0{gpu}:00.0",'
          'device="nvidia{gpu}",modelName="NVIDIA H100 80GB HBM3",Hostname="node-7",'
          'DCGM_FI_DRIVER_VERSION="550.54.15"')


def dcgm_page(power: list[float], energy_mj: list[int], util: list[int], used: list[int], xid: int = 0) -> str:
    """A page in dcgm-exporter's format (its default counters: HELP and TYPE lines from default-counters.csv, one
    sample per GPU with its labels), for as many GPUs as the lists are long."""
    families = [
        ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", [60 + i for i in range(len(power))]),
        ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", power),
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter",
         "Total energy consumption since boot (in mJ).", energy_mj),
        ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", util),
        ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", [81559 - u for u in used]),
        ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", used),
        ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", [xid] * len(power)),
        ("DCGM_FI_DEV_POWER_VIOLATION", "counter", "Throttling duration due to power constraints (in us).",
         [0] * len(power)),
        ("DCGM_FI_PROF_SM_ACTIVE", "gauge", "The ratio of cycles an SM has at least 1 warp assigned.",
         [0.5] * len(power)),
    ]
    lines = []
    for name, kind, help_text, values in families:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        lines += [f"{name}{{{LABELS.format(gpu=i)}}} {v}" for i, v in enumerate(values)]
    return "\n".join(lines) + "\n"


def test_a_dcgm_exporter_page_gives_one_reading_per_gpu() -> None:
    page = dcgm_page([312.5, 88.0], [123456789, 987654321], [97, 3], [70000, 61000], xid=79)
    readings = gpu_readings(parse_exposition(page))
    assert set(readings) == {"node-7/0", "node-7/1"}
    first = readings["node-7/0"]
    assert first.model == "NVIDIA H100 80GB HBM3"
    assert first.values == {"temp_c": 60.0, "power_w": 312.5, "energy_mj": 123456789.0, "util_pct": 97.0,
                            "fb_free_mib": 11559.0, "fb_used_mib": 70000.0, "xid": 79.0,
                            "power_violation_us": 0.0, "sm_active": 0.5}
    assert has_energy(readings)


def test_a_page_without_gpu_series_is_not_telemetry() -> None:
    assert not has_energy(gpu_readings(parse_exposition("# TYPE vllm:num_requests_running gauge\n"
                                                        'vllm:num_requests_running{model_name="m"} 3\n')))


@pytest.mark.parametrize(("values", "expected"), [
    ([10, 15, 25], 15),
    ([10, 15, 3, 8], 5 + 3 + 5),  # a reset after 15: the counter restarted from 0 and reached 3
    ([7], 0),
    ([5, 5, 5], 0),
])
def test_the_energy_counters_increase_handles_resets(values: list[float], expected: float) -> None:
    """The energy counter's increase is the server counters' (one rule: a drop is a restart from 0)."""
    assert increase(values) == expected


def test_power_is_integrated_where_there_is_no_counter() -> None:
    assert power_integral([0.0, 1.0, 3.0], [100.0, 200.0, 200.0]) == pytest.approx(150.0 + 400.0)


def scrapes(times: list[float], pages: list[str]) -> list[GpuScrape]:
    return [GpuScrape(t, 1e9 + t, gpu_readings(parse_exposition(p))) for t, p in zip(times, pages, strict=True)]


def test_energy_keys_from_the_counter_over_two_gpus() -> None:
    pages = [dcgm_page([100.0, 50.0], [1_000_000, 2_000_000], [90, 10], [40000, 40000]),
             dcgm_page([300.0, 60.0], [1_500_000, 2_100_000], [100, 20], [41000, 40000]),
             dcgm_page([100.0, 50.0], [1_900_000, 2_150_000], [80, 0], [40000, 40000])]
    keys = energy_keys(scrapes([10.0, 12.0, 14.0], pages), output_tokens=2000, completed=50, price_kwh=0.2)
    energy = (900_000 + 150_000) / 1000.0
    assert keys["gpu_energy_j"] == pytest.approx(energy)
    assert keys["gpu_energy_duration_s"] == pytest.approx(4.0)
    assert keys["gpu_avg_power_w"] == pytest.approx(energy / 4.0)
    assert keys["gpu_energy_per_output_token_j"] == pytest.approx(energy / 2000)
    assert keys["energy_per_request_j"] == pytest.approx(energy / 50)
    assert keys["output_tokens_per_joule"] == pytest.approx(2000 / energy)
    assert keys["energy_source"] == "counter"
    assert keys["energy_cost_usd"] == pytest.approx(energy / 3.6e6 * 0.2)
    gpu0 = keys["gpus"]["node-7/0"]
    assert gpu0["energy_j"] == pytest.approx(900.0) and gpu0["max_power_w"] == 300.0
    assert gpu0["mean_util_pct"] == pytest.approx(90.0) and gpu0["fb_total_mib"] == 81559


def test_energy_falls_back_on_power_and_says_so() -> None:
    page = "# TYPE DCGM_FI_DEV_POWER_USAGE gauge\nDCGM_FI_DEV_POWER_USAGE{gpu=\"0\",Hostname=\"h\"} %s\n"
    keys = energy_keys(scrapes([0.0, 2.0], [page % 100, page % 300]), output_tokens=0, completed=0)
    assert keys["gpu_energy_j"] == pytest.approx(400.0) and keys["energy_source"] == "power"
    assert keys["gpu_energy_per_output_token_j"] is None  # no output tokens: no per-token number, not a division


def test_no_power_no_energy_keys() -> None:
    page = "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\nDCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 50\n"
    assert energy_keys(scrapes([0.0, 1.0], [page, page]), output_tokens=10, completed=1) == {}


def test_findings_name_xid_errors_full_memory_and_an_idle_gpu_under_a_queue() -> None:
    pages = [dcgm_page([100.0], [0], [10], [80000], xid=48), dcgm_page([100.0], [1000], [20], [80500], xid=48)]
    keys = energy_keys(scrapes([0.0, 1.0], pages), output_tokens=10, completed=1)
    said = findings(keys, waiting_peak=12)
    assert any("XID errors [48]" in line for line in said)
    assert any("memory near full" in line for line in said)
    assert any("busy 15 %" in line and "12 requests waited" in line for line in said)
    assert findings(keys) != said and not any("waited" in line for line in findings(keys))


@pytest.mark.parametrize("records", ["run.records.jsonl", "run.records.parquet", "run.json"])
def test_the_gpu_series_is_named_as_the_server_series_is(records: str, tmp_path) -> None:
    """``X.gpu_metrics.jsonl`` beside ``X.server_metrics.jsonl``, whatever the records file is."""
    from llmload.energy.report import gpu_series_path
    from llmload.servermetrics.store import series_path_for

    path = tmp_path / records
    assert gpu_series_path(path) == tmp_path / "run.gpu_metrics.jsonl"
    assert series_path_for(path) == tmp_path / "run.server_metrics.jsonl"
