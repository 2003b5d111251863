"""Mixed workloads: records of more than one user class give ``by_class`` numbers (result JSON, summary, live
tab) that add up to the totals, each class may have its own goodput SLOs, and a run of one class is unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from llmload.client.records import RequestRecord
from llmload.common.errors import ConfigError
from llmload.metrics import MetricsAccumulator, compute_metrics, parse_goodput, split_slos
from llmload.summary import format_summary
from llmload.webui.live import LiveStats, parse_slos

ALL = ("ttft", "tpot", "itl", "e2el")


def make(start: float, ttft: float, gaps: list[float], user_class: str, *, ok: bool = True,
         prompt: int = 10) -> RequestRecord:
    times = [start + ttft]
    for g in gaps:
        times.append(times[-1] + g)
    return RequestRecord(start=start, first_token=times[0], chunk_times=times, chunk_tokens=[1] * len(times),
                         output_tokens=len(times), success=ok, prompt_len=prompt, user_class=user_class,
                         error="" if ok else "HTTP 500", failure_kind="" if ok else "http_5xx")


# Chat: short prompts, fast first token, 4 tokens 20 ms apart.  TTFT 100/150/200 ms, E2EL +60 ms each
CHAT = [make(0.0, 0.100, [0.02] * 3, "Chat", prompt=20), make(0.5, 0.150, [0.02] * 3, "Chat", prompt=30),
        make(1.0, 0.200, [0.02] * 3, "Chat", prompt=40)]
# Batch: long prompts, slow first token, 3 tokens 50 ms apart, one failure.  TTFT 400/800 ms
BATCH = [make(0.2, 0.400, [0.05] * 2, "Batch", prompt=500), make(0.7, 0.800, [0.05] * 2, "Batch", prompt=700),
         make(0.9, 0.300, [], "Batch", ok=False, prompt=900)]
RECORDS = [CHAT[0], BATCH[0], CHAT[1], BATCH[1], BATCH[2], CHAT[2]]


def test_by_class_per_class_numbers_from_raw_times() -> None:
    d = compute_metrics(RECORDS, 2.0, selected_percentiles=(50, 99), selected_metrics=ALL).to_result_dict()
    chat, batch = d["by_class"]["Chat"], d["by_class"]["Batch"]
    assert sorted(d["by_class"]) == ["Batch", "Chat"]
    assert (chat["completed"], chat["failed"], batch["completed"], batch["failed"]) == (3, 0, 2, 1)
    assert chat["total_input_tokens"] == 90 and batch["total_input_tokens"] == 1200  # the failure has none
    assert chat["total_output_tokens"] == 12 and batch["total_output_tokens"] == 6
    assert chat["request_throughput"] == pytest.approx(1.5) and batch["output_throughput"] == pytest.approx(3.0)
    ttft_ms = np.array([100.0, 150.0, 200.0])
    assert chat["mean_ttft_ms"] == pytest.approx(float(np.mean(ttft_ms)))
    assert chat["p99_ttft_ms"] == pytest.approx(float(np.percentile(ttft_ms, 99)))
    assert chat["median_e2el_ms"] == pytest.approx(150.0 + 60.0)
    assert chat["mean_itl_ms"] == pytest.approx(20.0) and batch["mean_itl_ms"] == pytest.approx(50.0)
    assert chat["mean_tpot_ms"] == pytest.approx(20.0) and batch["p50_tpot_ms"] == pytest.approx(50.0)
    assert batch["median_ttft_ms"] == pytest.approx(600.0)
    assert batch["failures_by_kind"] == {"http_5xx": 1}
    assert "duration" not in chat and "p99_schedule_lag_ms" not in chat and "by_class" not in chat


def test_by_class_sums_equal_totals() -> None:
    d = compute_metrics(RECORDS, 2.0, goodput_slos={"ttft": 250}).to_result_dict()
    for key in ("completed", "failed", "cut_off", "sent", "total_requests", "total_input_tokens",
                "total_output_tokens", "request_throughput", "output_throughput", "total_token_throughput",
                "request_goodput"):
        assert sum(c[key] for c in d["by_class"].values()) == pytest.approx(d[key]), key
    pooled = sorted([0.02] * 9 + [0.05] * 4)
    assert d["mean_itl_ms"] == pytest.approx(float(np.mean(pooled)) * 1000.0)  # totals pool every class


def test_one_class_or_none_changes_nothing() -> None:
    plain = [RequestRecord.from_dict({**r.to_dict(), "user_class": ""}) for r in RECORDS]
    named = [RequestRecord.from_dict({**r.to_dict(), "user_class": "Only"}) for r in RECORDS]
    a = compute_metrics(plain, 2.0, goodput_slos={"ttft": 250})
    b = compute_metrics(named, 2.0, goodput_slos={"ttft": 250})
    assert "by_class" not in a.to_result_dict()
    assert a.to_result_dict() == b.to_result_dict()
    assert format_summary(a) == format_summary(b)
    assert "By user class" not in format_summary(a)


def test_class_slos_replace_the_run_wide_ones() -> None:
    # run-wide TTFT <= 250 ms: Chat 3 good, Batch 0 good. Batch's own TTFT <= 500 ms: Batch 1 good (400 ms)
    m = compute_metrics(RECORDS, 2.0, goodput_slos={"ttft": 250}, class_slos={"Batch": {"ttft": 500}})
    assert m.request_goodput == pytest.approx(4 / 2.0)
    assert m.by_class["Chat"].request_goodput == pytest.approx(3 / 2.0)
    assert m.by_class["Batch"].request_goodput == pytest.approx(1 / 2.0)
    # the count itself (the sweep's goodput share and --fail-on-slo read it, not goodput x duration)
    assert (m.good_requests, m.by_class["Chat"].good_requests, m.by_class["Batch"].good_requests) == (4, 3, 1)
    assert compute_metrics(RECORDS, 2.0).good_requests is None
    d = m.to_result_dict()
    assert d["goodput_slos_ms"] == {"ttft": 250.0, "Batch": {"ttft": 500.0}}
    assert d["by_class"]["Batch"]["goodput_slos_ms"] == {"ttft": 500.0}
    assert d["by_class"]["Chat"]["goodput_slos_ms"] == {"ttft": 250.0}
    # a class's SLOs replace the run-wide ones entirely: Chat checked on E2EL only (<= 250 ms: 100+60, 150+60)
    m2 = compute_metrics(RECORDS, 2.0, goodput_slos={"ttft": 1}, class_slos={"Chat": {"e2el": 250}})
    assert m2.by_class["Chat"].request_goodput == pytest.approx(2 / 2.0)
    assert m2.by_class["Batch"].request_goodput == 0.0
    # only class SLOs: the other classes have none to miss
    m3 = compute_metrics(RECORDS, 2.0, class_slos={"Chat": {"ttft": 120}})
    assert m3.request_goodput == pytest.approx((1 + 2) / 2.0)
    with pytest.raises(ConfigError):
        compute_metrics(RECORDS, 2.0, class_slos={"Chat": {"itl": 5}})


def test_parse_goodput_class_items_and_their_use() -> None:
    slos = parse_goodput(["ttft:250", "Batch:ttft:500", "Batch:e2el:2000"])
    assert slos == {"ttft": 250.0, "Batch": {"ttft": 500.0, "e2el": 2000.0}}
    assert split_slos(slos) == ({"ttft": 250.0}, {"Batch": {"ttft": 500.0, "e2el": 2000.0}})
    # bench passes parse_goodput's result as goodput_slos unchanged: the same as class_slos=
    via_items = compute_metrics(RECORDS, 2.0, goodput_slos=slos).to_result_dict()
    via_args = compute_metrics(RECORDS, 2.0, goodput_slos={"ttft": 250.0},
                               class_slos={"Batch": {"ttft": 500.0, "e2el": 2000.0}}).to_result_dict()
    assert via_items == via_args
    assert parse_slos({"ttft": "250", "tpot": "", "Batch:ttft": 500}) == {"ttft": 250.0, "Batch": {"ttft": 500.0}}
    with pytest.raises(ValueError, match="ttft"):
        parse_slos({"ttft": "-3"})


def test_summary_appends_the_class_section_after_the_existing_block() -> None:
    m = compute_metrics(RECORDS, 2.0, goodput_slos={"ttft": 250}, selected_metrics=ALL)
    with_classes = format_summary(m, backend_label="vllm").splitlines()
    m.by_class = {}
    without = format_summary(m, backend_label="vllm").splitlines()
    assert with_classes[: len(without)] == without
    extra = with_classes[len(without):]
    assert extra[0].strip("=") == " By user class " and len(extra[0]) == 50
    assert extra[-1] == "=" * 50
    assert "----------------------Batch-----------------------" in extra
    i = extra.index("-----------------------Chat-----------------------")
    assert extra[i + 1] == f"{'Successful requests:':<40} {3:<10}"
    assert f"{'Request goodput (req/s):':<40} {1.5:<10.2f}" in extra[i:]
    assert f"{'Mean TTFT (ms):':<40} {150.0:<10.2f}" in extra[i:]


def test_accumulator_live_by_class() -> None:
    acc = MetricsAccumulator()
    acc.extend(RECORDS)
    assert acc.classes == ["Batch", "Chat"]
    chat = acc.live(2.0, user_class="Chat", slos={"ttft": 120})
    assert chat["completed"] == 3 and chat["good"] == 1
    assert chat["ttft_ms"]["p50"] == pytest.approx(150.0)
    missing = acc.live(2.0, user_class="Nobody")
    assert missing["requests"] == 0 and missing["ttft_ms"]["count"] == 0


def test_live_stats_window_and_run_have_by_class() -> None:
    now = [10.0]
    source: list[RequestRecord] = []
    stats = LiveStats(source, clock=lambda: now[0])
    source.extend(make(10.0 + r.start, r.ttft, list(r.itls), r.user_class, ok=r.success, prompt=r.prompt_len)
                  for r in RECORDS)
    now[0] = 12.5
    stats.ingest()
    run = stats.run(slos_ms={"ttft": 250})
    window = stats.window(10.0)
    for numbers in (run, window):
        classes = numbers["by_class"]
        assert sorted(classes) == ["Batch", "Chat"]
        assert sum(c["completed"] for c in classes.values()) == numbers["completed"] == 5
        assert classes["Chat"]["ttft_ms"]["p50"] == pytest.approx(150.0)
    assert run["by_class"]["Chat"]["good"] == 3 and run["good"] == 3
    assert "by_class" not in run["by_class"]["Chat"]
    assert set(window) - {"by_class"} == set(window["by_class"]["Chat"])
    # one class only: the keys of before, no by_class
    single = LiveStats([make(0.0, 0.1, [0.02], "")], clock=lambda: 1.0)
    single.reset()
    single.source.append(make(1.0, 0.1, [0.02], ""))
    single.ingest()
    assert "by_class" not in single.run() and "by_class" not in single.window(10.0)


def with_model(r: RequestRecord, model: str) -> RequestRecord:
    return RequestRecord.from_dict({**r.to_dict(), "model": model})


# the same six requests, now also naming a LoRA adapter: one Chat and both good Batch requests on "lora:a"
BY_MODEL = [with_model(CHAT[0], "lora:a"), with_model(BATCH[0], "lora:a"), with_model(CHAT[1], "base"),
            with_model(BATCH[1], "lora:a"), with_model(BATCH[2], "base"), with_model(CHAT[2], "base")]


def test_by_model_and_by_class_both_add_up_from_one_set_of_groups() -> None:
    d = compute_metrics(BY_MODEL, 2.0, goodput_slos={"ttft": 250}, selected_metrics=ALL).to_result_dict()
    assert sorted(d["by_model"]) == ["base", "lora:a"] and sorted(d["by_class"]) == ["Batch", "Chat"]
    a, base = d["by_model"]["lora:a"], d["by_model"]["base"]
    assert (a["completed"], a["failed"], base["completed"], base["failed"]) == (3, 0, 2, 1)
    assert a["median_ttft_ms"] == pytest.approx(400.0)  # 100, 400, 800 ms
    assert base["failures_by_kind"] == {"http_5xx": 1}
    for key in ("completed", "failed", "sent", "total_input_tokens", "total_output_tokens", "request_goodput"):
        assert sum(m[key] for m in d["by_model"].values()) == pytest.approx(d[key]), key
        assert sum(c[key] for c in d["by_class"].values()) == pytest.approx(d[key]), key
    # a class spread over two models is still one class: its numbers do not change with the models
    assert d["by_class"] == compute_metrics(RECORDS, 2.0, goodput_slos={"ttft": 250},
                                            selected_metrics=ALL).to_result_dict()["by_class"]


def test_model_slos_win_over_class_and_run_wide_ones() -> None:
    slos = parse_goodput(["ttft:250", "Batch:ttft:500", "model=lora:a:ttft:900"])
    assert slos == {"ttft": 250.0, "Batch": {"ttft": 500.0}, "model=lora:a": {"ttft": 900.0}}
    m = compute_metrics(BY_MODEL, 2.0, goodput_slos=slos)
    # lora:a (TTFT <= 900): 100, 400, 800 ms all good; base: Chat 150, 200 <= 250 good, Batch's failure not
    assert m.good_requests == 5
    assert m.by_model["lora:a"].good_requests == 3 and m.by_model["base"].good_requests == 2
    assert m.to_result_dict()["goodput_slos_ms"] == slos
    assert m.by_model["lora:a"].goodput_slos == {"ttft": 900.0}
    # without the model's own SLOs, lora:a's Batch requests take Batch's (400 good, 800 not), its Chat the run's
    m = compute_metrics(BY_MODEL, 2.0, goodput_slos=parse_goodput(["ttft:250", "Batch:ttft:500"]))
    assert m.by_model["lora:a"].good_requests == 2
    assert "By model" in format_summary(m) and "lora:a" in format_summary(m)


@pytest.mark.parametrize("item", ["model=:ttft:3", "model=a:speed:3", "model=a:ttft:x"])
def test_bad_model_slos_are_one_line_errors(item: str) -> None:
    with pytest.raises(ConfigError, match="--goodput"):
        parse_goodput([item])


def test_live_numbers_by_model_and_the_tabs_slo_items() -> None:
    now = [10.0]
    stats = LiveStats([], clock=lambda: now[0])
    stats.source.extend(RequestRecord.from_dict({**r.to_dict(), "start": r.start + 10.0, "first_token":
                                                 r.first_token + 10.0, "chunk_times": [t + 10.0 for t in
                                                                                       r.chunk_times]})
                        for r in BY_MODEL)
    now[0] = 13.0
    stats.ingest()
    slos = parse_slos({"ttft": "250", "items": "model=lora:a:ttft:900, Batch:ttft:500"})
    assert slos == {"ttft": 250.0, "model=lora:a": {"ttft": 900.0}, "Batch": {"ttft": 500.0}}
    run = stats.run(slos_ms=slos)
    assert sorted(run["by_model"]) == ["base", "lora:a"] and sorted(run["by_class"]) == ["Batch", "Chat"]
    assert run["by_model"]["lora:a"]["completed"] == 3 and run["by_model"]["base"]["failed"] == 1
    assert run["by_model"]["lora:a"]["ttft_ms"]["p50"] == pytest.approx(400.0)
    assert run["good"] == 5 and run["by_model"]["lora:a"]["good"] == 3
    window = stats.window(10.0, slos_ms=slos)
    assert window["by_model"]["base"]["requests"] == 3
    with pytest.raises(ValueError, match="SLO"):
        parse_slos({"items": "model=a:ttft"})
