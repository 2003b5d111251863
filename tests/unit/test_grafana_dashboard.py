"""docs/grafana-dashboard.json: a Grafana dashboard whose every expression names only series llmload exports (as
a scrape of llmload.exporter shows them) or vLLM's, with a Prometheus datasource variable; and
k8s/servicemonitor-example.yaml: valid manifests that point at the port the master is given."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from llmload.client.records import RequestRecord
from llmload.commands import bench
from llmload.exporter import METRIC_NAMES, LiveExporter, sample_names
from llmload.sim.metrics.spec import VLLM as VLLM_DIALECT

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "docs" / "grafana-dashboard.json"
SERVICE_MONITOR = ROOT / "k8s" / "servicemonitor-example.yaml"

#: vLLM v1's series, as llmload sim reproduces them (its dialect spec holds vLLM's own names)
VLLM = frozenset(name for f in VLLM_DIALECT.families
                 for name in ([f"{f.name}{s}" for s in ("_bucket", "_sum", "_count")] if f.kind == "histogram"
                              else [f.name]))
#: PromQL functions, aggregations and keywords the expressions use, and the labels they group by
PROMQL_WORDS = frozenset({"sum", "avg", "max", "min", "rate", "irate", "increase", "histogram_quantile", "by",
                          "without", "on", "ignoring", "and", "or", "unless", "clamp_min"})
IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def panels() -> list[dict]:
    dashboard = json.loads(DASHBOARD.read_text())
    out = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return [p for p in out if p.get("type") != "row"]


def metric_names(expr: str) -> set[str]:
    """The series an expression reads: identifiers outside label matchers, ranges, strings, groupings and
    numbers, that are not PromQL words."""
    bare = re.sub(r'"[^"]*"', "", expr)
    bare = re.sub(r"\{[^}]*\}|\[[^\]]*\]", "", bare)
    bare = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", bare)
    return {w for w in IDENTIFIER.findall(bare) if w not in PROMQL_WORDS}


def exported_series() -> set[str]:
    """The series a scrape of a run's exporter shows (with one record of each kind and the in-flight gauge)."""
    exporter = LiveExporter()
    exporter.set_in_flight(1)
    exporter.observe(RequestRecord(start=0.0, first_token=0.1, chunk_times=[0.1, 0.2, 0.3], output_tokens=3,
                                   success=True, intended_send=0.0, dispatched_at=0.0))
    text = exporter.exposition().decode()
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def test_the_dashboard_is_a_grafana_model_with_a_prometheus_datasource_variable() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert 36 <= dashboard["schemaVersion"] <= 41 and dashboard["uid"] and dashboard["title"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in panels():
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}" and target["expr"].strip(), panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]


def test_every_expression_names_only_series_llmload_or_vllm_export() -> None:
    exported = exported_series()
    assert exported <= sample_names()
    seen: set[str] = set()
    for panel in panels():
        for target in panel["targets"]:
            names = metric_names(target["expr"])
            assert names, (panel["title"], target["expr"])
            unknown = {n for n in names if n not in exported and n not in VLLM}
            assert not unknown, (panel["title"], target["expr"], unknown)
            seen |= names
    # every family llmload exports is plotted, and the vLLM series are beside them
    for family in METRIC_NAMES:
        assert any(n == family or n.startswith(f"{family}_") for n in seen), family
    assert {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
            "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total", "vllm:num_preemptions_total"} <= seen


def test_quantiles_are_taken_over_bucket_rates_grouped_by_le() -> None:
    for panel in panels():
        for target in panel["targets"]:
            expr = target["expr"]
            if "histogram_quantile" in expr:
                assert re.search(r"by \((le|[\w, ]*\ble\b[\w, ]*)\) \(rate\([\w:]+_bucket", expr), expr


@pytest.mark.parametrize("expr, names", [
    ('histogram_quantile(0.99, sum by (le) (rate(llmload_ttft_seconds_bucket{job=~"$j"}[5m])))',
     {"llmload_ttft_seconds_bucket"}),
    ("sum(rate(a_total[1m])) / sum(rate(vllm:b_total[1m]))", {"a_total", "vllm:b_total"}),
])
def test_metric_names_of_an_expression(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_the_service_monitor_example_selects_the_master_s_metrics_port() -> None:
    docs = [d for d in yaml.safe_load_all(SERVICE_MONITOR.read_text()) if d]
    by_kind = {d["kind"]: d for d in docs}
    service, monitor = by_kind["Service"], by_kind["ServiceMonitor"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    [endpoint] = monitor["spec"]["endpoints"]
    [port] = [p for p in service["spec"]["ports"] if p["name"] == endpoint["port"]]
    assert endpoint["path"] == "/metrics"
    master = yaml.safe_load((ROOT / "k8s" / "overlays" / "headless" / "job-llmload-master.yaml").read_text())
    labels = master["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    # the flags the example tells you to add to the master parse, and listen where the Service points
    flags = re.search(r"#\s*args to add.*?:\s*(.+)", SERVICE_MONITOR.read_text())
    assert flags, "the example names the master's flags"
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(flags.group(1).split())
    assert args.prometheus_port == port["targetPort"] and args.prometheus_host == "0.0.0.0"
