"""Server metrics: Prometheus text -> samples (prometheus_client's parser), engine detection, and each engine's
names mapped to the common series, on exposition text in the engines' own format (tests/data/prometheus/)."""

from __future__ import annotations

import math
from itertools import pairwise
from pathlib import Path

import pytest

from llmload.servermetrics import (
    ExpositionError,
    Sample,
    build_snapshot,
    common_series,
    detect_engine,
    parse_exposition,
    sample_key,
)
from llmload.servermetrics.engines import ENGINES, source_names

DATA = Path(__file__).resolve().parents[1] / "data" / "prometheus"


def _text(engine: str) -> str:
    return (DATA / f"{engine}.txt").read_text(encoding="utf-8")


def _samples(engine: str) -> list[Sample]:
    return parse_exposition(_text(engine))


def _value(samples: list[Sample], name: str, **labels: str) -> float:
    found = [s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (name, labels, found)
    return found[0]


# --- parsing -------------------------------------------------------------------------------------------------


def test_histogram_samples_come_out_as_bucket_sum_count_with_le():
    samples = _samples("vllm")
    name = "vllm:time_to_first_token_seconds"
    buckets = [s for s in samples if s.name == f"{name}_bucket"]
    assert [s.labels["le"] for s in buckets][:3] == ["0.001", "0.005", "0.01"]
    assert buckets[-1].labels["le"] == "+Inf"
    assert buckets[-1].value == _value(samples, f"{name}_count") == 100.0
    assert buckets[0].labels["model_name"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert _value(samples, f"{name}_sum") == pytest.approx(21.4601)


def test_counter_names_are_kept_as_the_server_wrote_them():
    # prometheus_client's parser renames `# TYPE x counter` samples to x_total; TGI's counters have no _total
    tgi = _samples("tgi")
    assert _value(tgi, "tgi_request_count") == 160.0
    assert _value(tgi, "tgi_request_failure", err="validation") == 2.0
    assert not [s for s in tgi if s.name.endswith("_total")]
    vllm = _samples("vllm")
    assert _value(vllm, "vllm:prompt_tokens_total", engine="0") == 130048.0
    assert _value(vllm, "process_cpu_seconds_total") == 241.37


def test_odd_but_valid_text():
    text = "\n".join(
        [
            "no_help_no_type 1",
            'esc{path="C:\\\\dir",quote="say \\"hi\\"",nl="a\\nb"} 2',
            "nan_gauge NaN",
            "pos_inf +Inf",
            "neg_inf -Inf",
            "with_ts 3 1700000000000",
            "# TYPE lat histogram",
            'lat_bucket{le="0.5"} 1 # {trace_id="abc"} 0.3 1700000000.0',
            'lat_bucket{le="+Inf"} 2',
            "lat_sum 1.5",
            "lat_count 2",
            "# a comment that is neither HELP nor TYPE",
            "",
        ]
    )
    samples = parse_exposition(text)
    by_name = {s.name: s for s in samples}
    assert by_name["no_help_no_type"].value == 1.0
    assert by_name["esc"].labels == {"path": "C:\\dir", "quote": 'say "hi"', "nl": "a\nb"}
    assert math.isnan(by_name["nan_gauge"].value)
    assert by_name["pos_inf"].value == math.inf and by_name["neg_inf"].value == -math.inf
    assert by_name["with_ts"].value == 3.0
    assert [s.value for s in samples if s.name == "lat_bucket"] == [1.0, 2.0]
    assert by_name["lat_count"].value == 2.0


def test_empty_and_comment_only_text_have_no_samples():
    assert parse_exposition("") == []
    assert parse_exposition("\n\n# HELP x nothing yet\n# TYPE x gauge\n") == []


@pytest.mark.parametrize(
    "text",
    [
        "<!DOCTYPE html><html><body>Not Found</body></html>",
        '{"detail": "Not Found"}',
        "OK",
        "metric{unterminated=\"x} 1",
        "good 1\nbad line here\n",
        "x\x00 1",
    ],
)
def test_garbage_raises_exposition_error_in_one_line(text: str):
    with pytest.raises(ExpositionError) as caught:
        parse_exposition(text)
    message = str(caught.value)
    assert message.startswith("not Prometheus text")
    assert "\n" not in message and len(message) < 140


def test_sample_key_sorts_labels_and_escapes_values():
    assert sample_key("up", {}) == "up"
    assert sample_key("m", {"b": "2", "a": 'q"\\\n'}) == 'm{a="q\\"\\\\\\n",b="2"}'


# --- engines -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["vllm", "sglang", "tgi"])
def test_detect_engine(engine: str):
    assert detect_engine(_samples(engine)) == engine


def test_detect_engine_none_for_other_servers():
    assert detect_engine(parse_exposition("process_cpu_seconds_total 1\nhttp_requests_total 3\n")) is None
    assert detect_engine([]) is None


def test_vllm_mapping():
    series, hist = common_series(_samples("vllm"), "vllm")
    assert series["running"] == 12.0 and series["waiting"] == 3.0
    assert series["kv_cache_usage"] == pytest.approx(0.4213)
    assert series["prefix_cache_hits_total"] == 51200.0
    assert series["prefix_cache_queries_total"] == 130048.0
    assert series["preemptions_total"] == 2.0
    assert series["prompt_tokens_total"] == 130048.0
    assert series["generation_tokens_total"] == 25600.0
    assert series["requests_finished_total"] == 100.0  # stop 5 + length 95 + abort 0: summed over reasons
    assert series["ttft_seconds_count"] == 100.0
    assert series["ttft_seconds_sum"] == pytest.approx(21.4601)
    assert series["itl_seconds_count"] == 25500.0
    for name in ("queue_time_seconds", "e2e_seconds", "tpot_seconds"):
        assert series[f"{name}_count"] == 100.0
    assert "prefix_cache_hit_rate" not in series  # v1 exports counters, not a rate
    ttft = hist["ttft_seconds"]
    assert ttft[0] == (0.001, 0.0) and ttft[-1] == (math.inf, 100.0)
    assert [le for le, _ in ttft] == sorted(le for le, _ in ttft)
    assert all(a[1] <= b[1] for a, b in pairwise(ttft))  # cumulative


def test_sglang_mapping():
    series, hist = common_series(_samples("sglang"), "sglang")
    assert series["running"] == 24.0 and series["waiting"] == 7.0
    assert series["kv_cache_usage"] == pytest.approx(0.57)
    assert series["prefix_cache_hit_rate"] == pytest.approx(0.3125)
    assert series["prefix_cache_hits_total"] == 128000.0  # cached prompt tokens
    assert series["prefix_cache_queries_total"] == series["prompt_tokens_total"] == 409600.0
    assert series["preemptions_total"] == 3.0  # retracted requests
    assert series["generation_tokens_total"] == 51200.0
    assert series["requests_finished_total"] == 200.0
    assert series["ttft_seconds_count"] == series["queue_time_seconds_count"] == series["e2e_seconds_count"] == 200
    assert series["itl_seconds_count"] == 51000.0
    assert hist["queue_time_seconds"][0] == (0.0, 0.0) and hist["queue_time_seconds"][-1] == (math.inf, 200.0)


def test_tgi_mapping():
    series, hist = common_series(_samples("tgi"), "tgi")
    assert series["running"] == 8.0 and series["waiting"] == 2.0
    assert series["prompt_tokens_total"] == 144253.0  # tgi_request_input_length_sum
    assert series["generation_tokens_total"] == 30400.0  # tgi_request_generated_tokens_sum
    assert series["requests_finished_total"] == 150.0
    assert series["kv_cache_usage"] == pytest.approx(30464 / 121344)
    assert series["e2e_seconds_count"] == series["queue_time_seconds_count"] == series["itl_seconds_count"] == 150
    assert series["e2e_seconds_sum"] == pytest.approx(685.806957)
    assert "ttft_seconds_count" not in series and "preemptions_total" not in series  # TGI exports neither
    assert "prefix_cache_hits_total" not in series
    assert len(hist["e2e_seconds"]) == 36  # 35 geometric buckets and +Inf


def test_unknown_engine_maps_nothing():
    assert common_series(_samples("vllm"), None) == ({}, {})


def test_current_name_wins_over_the_deprecated_one():
    # vLLM 0.9/0.10 exported both the old and the new name with the same value: they must not add up
    text = (
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25\n'
        'vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.25\n'
        'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 10\n'
        'vllm:gpu_prefix_cache_hits_total{engine="0",model_name="m"} 10\n'
    )
    series, _ = common_series(parse_exposition(text), "vllm")
    assert series["kv_cache_usage"] == 0.25 and series["prefix_cache_hits_total"] == 10.0
    older_text = (
        'vllm:gpu_cache_usage_perc{engine="0"} 0.5\n'
        'vllm:gpu_prefix_cache_queries_total{engine="0"} 40\n'
        'vllm:time_per_output_token_seconds_bucket{engine="0",le="+Inf"} 7\n'
        'vllm:time_per_output_token_seconds_sum{engine="0"} 0.35\n'
        'vllm:time_per_output_token_seconds_count{engine="0"} 7\n'
        'vllm:gpu_prefix_cache_hit_rate{engine="0"} 0.25\n'  # the v0 engine's rate
    )
    older, _ = common_series(parse_exposition(older_text), "vllm")
    assert older["kv_cache_usage"] == 0.5 and older["prefix_cache_queries_total"] == 40.0
    assert older["itl_seconds_count"] == 7.0 and older["itl_seconds_sum"] == pytest.approx(0.35)
    assert older["prefix_cache_hit_rate"] == 0.25


def test_data_parallel_engines_add_up_and_kv_usage_is_averaged():
    text = "\n".join(
        [
            'vllm:num_requests_running{engine="0",model_name="m"} 4',
            'vllm:num_requests_running{engine="1",model_name="m"} 6',
            'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.2',
            'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.6',
            'vllm:e2e_request_latency_seconds_bucket{engine="0",le="1.0",model_name="m"} 1',
            'vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="m"} 2',
            'vllm:e2e_request_latency_seconds_bucket{engine="1",le="1.0",model_name="m"} 3',
            'vllm:e2e_request_latency_seconds_bucket{engine="1",le="+Inf",model_name="m"} 3',
            'vllm:e2e_request_latency_seconds_sum{engine="0",model_name="m"} 2.5',
            'vllm:e2e_request_latency_seconds_sum{engine="1",model_name="m"} 1.5',
            'vllm:e2e_request_latency_seconds_count{engine="0",model_name="m"} 2',
            'vllm:e2e_request_latency_seconds_count{engine="1",model_name="m"} 3',
        ]
    )
    series, hist = common_series(parse_exposition(text), "vllm")
    assert series["running"] == 10.0
    assert series["kv_cache_usage"] == pytest.approx(0.4) and series["kv_cache_usage_max"] == pytest.approx(0.6)
    assert series["e2e_seconds_sum"] == 4.0 and series["e2e_seconds_count"] == 5.0
    assert hist["e2e_seconds"] == [(1.0, 4.0), (math.inf, 5.0)]


def test_tensor_parallel_ranks_count_once_data_parallel_ranks_add_up():
    labels = 'engine_type="unified",model_name="m",moe_ep_rank="{r}",pp_rank="0",tp_rank="{r}"'
    lines = [f"sglang:num_running_reqs{{{labels.format(r=r)}}} 8" for r in range(4)]  # 4 TP ranks, one batch
    lines += [f'sglang:num_queue_reqs{{dp_rank="{d}",model_name="m",tp_rank="{d}"}} 2' for d in range(2)]
    series, _ = common_series(parse_exposition("\n".join(lines)), "sglang")
    assert series["running"] == 8.0
    assert series["waiting"] == 4.0


def test_histogram_without_count_takes_the_inf_bucket():
    text = 'vllm:e2e_request_latency_seconds_bucket{le="1.0"} 2\nvllm:e2e_request_latency_seconds_bucket{le="+Inf"} 5\n'
    series, hist = common_series(parse_exposition(text), "vllm")
    assert series["e2e_seconds_count"] == 5.0 and "e2e_seconds_sum" not in series  # no sum: no mean
    assert hist["e2e_seconds"] == [(1.0, 2.0), (math.inf, 5.0)]


def test_nan_values_are_no_value():
    series, _ = common_series(parse_exposition('vllm:num_requests_running{engine="0"} NaN\n'), "vllm")
    assert "running" not in series


def test_source_names_cover_histogram_parts():
    names = source_names("vllm")
    assert {"vllm:num_requests_running", "vllm:time_to_first_token_seconds_bucket",
            "vllm:time_to_first_token_seconds_sum", "vllm:time_to_first_token_seconds_count"} <= names
    assert source_names(None) == frozenset()
    assert set(ENGINES) == {"vllm", "sglang", "tgi"}


def test_snapshot_keeps_every_other_sample_raw():
    snap = build_snapshot(_samples("vllm"), t=5.0, wall=1.7e9)
    assert snap.engine == "vllm" and snap.t == 5.0 and snap.wall == 1.7e9
    assert snap.raw['vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"}'] == 12.0
    assert snap.raw['python_gc_objects_collected_total{generation="0"}'] == 18342.0
    assert snap.raw["process_cpu_seconds_total"] == 241.37
    assert not [k for k in snap.raw if "_bucket" in k or "_created" in k]
    assert snap.raw_dropped == 0


def test_snapshot_of_an_unknown_server():
    snap = build_snapshot(parse_exposition("up 1\nrequests_total 7\n"), t=1.0, wall=2.0)
    assert snap.engine is None and snap.series == {} and snap.histograms == {}
    assert snap.raw == {"up": 1.0, "requests_total": 7.0}
