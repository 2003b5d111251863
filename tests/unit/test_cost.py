"""Per GPU and cost (``--gpus``, ``--gpu-type``, ``--gpu-hour-cost``): a recorded run's cost per million tokens,
computed by hand from its records, is the one the result JSON, the summary and a sweep row report."""

from __future__ import annotations

import argparse

import pytest

from llmload.client.records import RequestRecord
from llmload.common.errors import ConfigError
from llmload.core.result import result_data
from llmload.metrics import Deployment, compute_metrics
from llmload.summary import format_summary
from llmload.sweep.table import point_row


def records() -> list[RequestRecord]:
    """Four requests over 2 s: 10 + 20 + 30 + 40 output tokens, 100 prompt tokens each."""
    out = []
    for k, n in enumerate((10, 20, 30, 40)):
        start = 0.5 * k
        times = [start + 0.1 + 0.01 * i for i in range(n)]
        out.append(RequestRecord(start=start, first_token=times[0], chunk_times=times, chunk_tokens=[1] * n,
                                 output_tokens=n, success=True, prompt_len=100))
    return out


def options(**extra: object) -> argparse.Namespace:
    base = {"request_rate": 4.0, "backend": "vllm", "dataset_name": "random", "burstiness": 1.0,
            "max_concurrency": None, "label": None}
    return argparse.Namespace(**{**base, **extra})


def test_the_result_json_s_cost_is_the_hand_computed_one() -> None:
    metrics = compute_metrics(records(), 2.0)
    data = result_data(options=options(gpus=4, gpu_type="H100", gpu_hour_cost=2.5), metrics=metrics, model_id="m",
                       tokenizer_id="t", base_url="http://x", num_prompts=4, health=None, not_sent=0)
    output_per_s = (10 + 20 + 30 + 40) / 2.0       # 50 tok/s from the records alone
    total_per_s = (100 * 4 + 100) / 2.0            # 250 tok/s
    usd_per_hour = 4 * 2.5                          # four GPUs at $2.50
    assert data["output_throughput"] == pytest.approx(output_per_s)
    assert data["gpus"] == 4 and data["gpu_type"] == "H100" and data["gpu_hour_cost"] == 2.5
    assert data["output_throughput_per_gpu"] == pytest.approx(output_per_s / 4)
    assert data["total_token_throughput_per_gpu"] == pytest.approx(total_per_s / 4)
    # $10 an hour buys 50 x 3600 = 180,000 output tokens: $55.56 per million
    assert data["cost_per_million_output_tokens"] == pytest.approx(usd_per_hour / (output_per_s * 3600) * 1e6)
    assert data["cost_per_million_output_tokens"] == pytest.approx(55.5556, abs=1e-3)
    assert data["cost_per_million_total_tokens"] == pytest.approx(usd_per_hour / (total_per_s * 3600) * 1e6)
    # the sweep's row copies them; one user's rate is 1000 / median TPOT (10 ms here: 100 tok/s)
    row = point_row(1, "sweep", data, goodput=None, meets_target=None, result_file=None, records_file=None)
    assert row["cost_per_million_output_tokens"] == data["cost_per_million_output_tokens"]
    assert row["output_throughput_per_user"] == pytest.approx(100.0)


def test_without_a_price_there_is_no_cost_and_one_gpu_changes_nothing_shown() -> None:
    metrics = compute_metrics(records(), 2.0)
    data = result_data(options=options(), metrics=metrics, model_id="m", tokenizer_id="t", base_url="http://x",
                       num_prompts=4, health=None, not_sent=0)
    assert data["gpus"] == 1 and data["output_throughput_per_gpu"] == pytest.approx(50.0)
    assert "cost_per_million_output_tokens" not in data
    assert "Per GPU and cost" not in format_summary(metrics, deployment=Deployment())
    assert Deployment(gpu_hour_cost=3.0).cost_per_million(0.0) is None  # nothing made: no price per token


def test_the_summary_shows_per_gpu_and_cost() -> None:
    metrics = compute_metrics(records(), 2.0)
    text = format_summary(metrics, deployment=Deployment(2, "L40S", 1.2))
    lines = {line[:40].strip(): line[40:].strip() for line in text.splitlines() if line[40:41] == " "}
    assert lines["GPUs:"] == "2 x L40S" and float(lines["Output tok/s per GPU:"]) == pytest.approx(25.0)
    assert float(lines["Cost per 1M output tokens (USD):"]) == pytest.approx(2 * 1.2 / (50 * 3600) * 1e6, abs=0.01)


@pytest.mark.parametrize(("gpus", "cost"), [(0, None), (1, -1.0)])
def test_a_bad_deployment_is_a_one_line_error(gpus: int, cost: float | None) -> None:
    with pytest.raises(ConfigError, match="--gpu"):
        Deployment(gpus, None, cost)
