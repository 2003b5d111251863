"""Protects the printed result block: vLLM's exact layout, then llmload's extra lines."""

from __future__ import annotations

from llmload.client.records import RequestRecord
from llmload.metrics import compute_metrics
from llmload.summary import format_run_header, format_summary, heading


def _records() -> list[RequestRecord]:
    # st=0, chunks 0.1, 0.15, 0.25, 3 tokens -> TTFT 100, TPOT 75, steady 100, ITLs 50/100
    ok = RequestRecord(
        start=0.0,
        first_token=0.1,
        chunk_times=[0.1, 0.15, 0.25],
        output_tokens=3,
        prompt_len=10,
        success=True,
    )
    bad = RequestRecord(start=0.0, success=False, error="HTTP 500", prompt_len=10)
    return [ok, bad]


def _lines(**kw) -> list[str]:
    goodput = kw.pop("goodput_slos", None)
    m = compute_metrics(_records(), 2.0, goodput_slos=goodput)
    return format_summary(m, **kw).splitlines()


def test_heading_and_first_lines_exact():
    lines = _lines()
    assert lines[0] == "============ Serving Benchmark Result ============"
    assert len(lines[0]) == 50
    # "Successful requests:" is 20 chars, padded to 40, a space, then the value padded to 10
    assert lines[1] == "Successful requests:" + " " * 20 + " " + "1" + " " * 9
    assert lines[2] == "Failed requests:" + " " * 24 + " " + "1" + " " * 9  # today's vLLM: right after
    assert lines[3] == "Benchmark duration (s):" + " " * 17 + " 2.00      "


def test_vllm_order_without_optional_lines():
    lines = _lines()
    end = lines.index("=" * 50)
    # section rules stay whole; value lines keep their 40-wide label only
    labels = [line if line.startswith("-") else line[:40].rstrip() for line in lines]
    assert labels[1:end] == [
        "Successful requests:",
        "Failed requests:",
        "Benchmark duration (s):",
        "Total input tokens:",
        "Total generated tokens:",
        "Request throughput (req/s):",
        "Output token throughput (tok/s):",
        "Peak output token throughput (tok/s):",
        "Peak concurrent requests:",
        "Total token throughput (tok/s):",
        "---------------Time to First Token----------------",
        "Mean TTFT (ms):",
        "Median TTFT (ms):",
        "P99 TTFT (ms):",
        "-----Time per Output Token (excl. 1st token)------",
        "Mean TPOT (ms):",
        "Median TPOT (ms):",
        "P99 TPOT (ms):",
        "---------------Inter-token Latency----------------",
        "Mean ITL (ms):",
        "Median ITL (ms):",
        "P99 ITL (ms):",
    ]


def test_section_rules_are_50_wide():
    lines = _lines()
    assert "---------------Time to First Token----------------" in lines
    assert "-----Time per Output Token (excl. 1st token)------" in lines
    assert "---------------Inter-token Latency----------------" in lines
    assert lines.index("=" * 50) > lines.index("---------------Inter-token Latency----------------")


def test_optional_vllm_lines():
    lines = _lines(max_concurrency=8, goodput_slos={"ttft": 500}, request_rate=4.0)
    assert lines[3] == f"{'Maximum request concurrency:':<40} {8:<10}"
    assert lines[4] == f"{'Request rate configured (RPS):':<40} {4.0:<10.2f}"  # a finite rate only
    assert not any(line.startswith("Request rate configured") for line in _lines(request_rate=float("inf")))
    # goodput comes right after request throughput: 1 good request / 2 s = 0.50
    i = next(k for k, line in enumerate(lines) if line.startswith("Request throughput"))
    assert lines[i + 1] == f"{'Request goodput (req/s):':<40} {0.5:<10.2f}"


def test_metric_values_formatted_to_two_decimals():
    lines = _lines()
    assert f"{'Mean TTFT (ms):':<40} {'100.00':<10}" in lines
    assert f"{'Mean TPOT (ms):':<40} {'75.00':<10}" in lines


def test_llmload_extras_follow_the_vllm_block():
    lines = _lines(backend_label="vllm", request_rate=float("inf"), burstiness=1.0)
    first_close = lines.index("=" * 50)
    extras = lines[first_close + 1 :]
    assert extras[0].startswith("=") and "llmload" in extras[0] and len(extras[0]) == 50
    assert not any(line.startswith("Failed requests:") for line in extras)  # in vLLM's block now
    assert f"{'Cut off by end of run:':<40} {0:<10}" in extras
    assert f"{'Mean TPOT excl. 1st ITL (ms):':<40} {'100.00':<10}" in extras
    assert f"{'Request rate (req/s):':<40} {'inf':<10}" in extras
    assert extras[-1] == "=" * 50
    assert not any("WARNING" in line for line in lines)


def test_client_bottleneck_warning_is_loud():
    health = {
        "cpu_percent_mean": 97.5,
        "cpu_percent_max": 100.0,
        "loop_lag_p99_ms": 12.3,
        "bottleneck": True,
        "reason": "CPU at 100%",
    }
    lines = _lines(client_health=health)
    assert f"{'Client CPU mean (%):':<40} {'97.50':<10}" in lines
    assert f"{'P99 event-loop lag (ms):':<40} {'12.30':<10}" in lines
    warnings = [line for line in lines if line.startswith("WARNING")]
    assert warnings and "BOTTLENECK" in warnings[0] and "CPU at 100%" in warnings[0]
    assert not any("--processes" in line for line in warnings)


def test_the_bottleneck_warning_names_the_processes_that_would_have_kept_the_run_accurate():
    health = {"cpu_percent_mean": 100.0, "bottleneck": True, "reason": "client CPU averaged 100%",
              "stall_p99_ms": 0.5, "stall_max_ms": 4.25, "merged_read_share": 0.0123,
              "process_capacity_tok_s": 36_000, "process_capacity_cpu_percent": 75.0, "processes_advised": 2}
    lines = _lines(client_health=health)
    assert f"{'P99 loop stall (ms):':<40} {'0.50':<10}" in lines
    assert f"{'Longest loop stall (ms):':<40} {'4.25':<10}" in lines
    assert f"{'Reads that merged chunks (%):':<40} {'1.23':<10}" in lines
    assert ("WARNING: one process drives about 36,000 output tok/s here at 75% CPU: --processes 2 would have "
            "kept this run accurate.") in lines


def test_run_header_like_vllm():
    text = format_run_header(float("inf"), 1.0, None)
    assert text.splitlines() == [
        "Traffic request rate: inf",
        "Burstiness factor: 1.0 (Poisson process)",
        "Maximum request concurrency: None",
    ]
    assert "Gamma distribution" in format_run_header(4.0, 0.5, 16)


def test_failures_by_kind_section():
    records = _records()  # one HTTP 500
    records += [RequestRecord(start=0.0, error=f"stream broken after {i} events: reset", failure_kind="disconnect")
                for i in (3, 4)]
    records.append(RequestRecord(start=0.0, error="cut off: the run ended", failure_kind="cut_off", cut_off=True))
    lines = format_summary(compute_metrics(records, 2.0)).splitlines()
    i = lines.index(heading("Failures by kind", "-"))
    assert len(lines[i]) == 50
    # most frequent first, ties by name; the label is vLLM's 40 wide, the count 10, then one example message
    assert lines[i + 1 : i + 4] == [
        f"{'disconnect:':<40} {2:<10} stream broken after 3 events: reset",
        f"{'cut_off:':<40} {1:<10} cut off: the run ended",
        f"{'http_5xx:':<40} {1:<10} HTTP 500",
    ]
    assert lines[i + 4].startswith("-")  # the next section
    # it sits in llmload's block, after vLLM's
    assert i > lines.index("=" * 50)


def test_no_failures_no_section():
    ok = _records()[:1]
    text = format_summary(compute_metrics(ok, 2.0))
    assert "Failures by kind" not in text


def test_long_example_messages_are_cut():
    bad = RequestRecord(start=0.0, error="HTTP 503: " + "x" * 500, status_code=503, failure_kind="http_5xx")
    lines = format_summary(compute_metrics([bad], 2.0)).splitlines()
    line = next(line for line in lines if line.startswith("http_5xx:"))
    assert line.endswith("...") and len(line) <= 52 + 100
