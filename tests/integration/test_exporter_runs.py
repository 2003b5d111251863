"""``--prometheus-port`` in real runs against the simulator: ``/metrics`` answers during the run in valid
exposition format, and its final values (taken in the ``--prometheus-linger`` window, every request counted)
equal the result JSON and the records: requests by outcome, errors by kind, output tokens, TTFT count and sum.
In one ``llmload bench`` process, with ``--processes 2`` (the master counts the workers' records) and in
``locust -f``; a busy port is exit 2 before the first request."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support import end_process, free_port, llmload_command, locust_argv, locust_command, offline_env, tail

PROMPTS = 30
#: the simulator's seeded faults fail 5 of the first 30 requests (HTTP errors, disconnects): errors by kind count
SIM = ("--ttft-ms", "50", "--itl-ms", "10", "--error-rate", "0.2", "--disconnect-rate", "0.1")
WORKLOAD = ("--num-prompts", str(PROMPTS), "--request-rate", "10", "--sharegpt-output-len", "20", "--seed", "3")
LINGER = ("--prometheus-linger", "300")  # ends with our scrape after the run, long before this


@dataclass
class Scrapes:
    """Every /metrics answer a run gave, parsed: sample name -> {sorted label items: value}."""

    taken: list[dict[str, dict[tuple, float]]] = field(default_factory=list)

    @property
    def final(self) -> dict[str, dict[tuple, float]]:
        assert self.taken, "no scrape was answered"
        return self.taken[-1]


def parse(text: str) -> dict[str, dict[tuple, float]]:
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def scrape_until_exit(proc: subprocess.Popen, port: int, timeout: float) -> Scrapes:
    """Scrape every 50 ms until the process exits. The last answer comes after the run: the linger waits for
    one more scrape once every request is counted, so it holds the final values."""
    scrapes = Scrapes()
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
                assert answer.status == 200
                assert answer.headers["Content-Type"].startswith("text/plain")
                scrapes.taken.append(parse(answer.read().decode()))
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.05)
    return scrapes


def total(samples: dict, name: str, **labels: str) -> float:
    """The sum over every series of ``name`` whose labels include ``labels``."""
    return sum(v for k, v in samples.get(name, {}).items() if labels.items() <= dict(k).items())


def run_with_scrapes(argv: list[str], port: int, tmp: Path, timeout: float = 180.0) -> tuple[Scrapes, str]:
    out, err = tmp / "stdout.txt", tmp / "stderr.txt"
    with open(out, "wb") as o, open(err, "wb") as e:
        proc = subprocess.Popen(argv, stdout=o, stderr=e, stdin=subprocess.DEVNULL, env=offline_env(),
                                cwd=Path(__file__).resolve().parents[2], start_new_session=True)
    try:
        scrapes = scrape_until_exit(proc, port, timeout)
        proc.wait(timeout=30)
    finally:
        end_process(proc)
    output = f"{tail(out)}\n{tail(err)}"
    assert proc.returncode == 0, output
    assert "Traceback" not in err.read_text(errors="replace"), output
    assert "stays up until scraped once more" in err.read_text(errors="replace"), output
    return scrapes, output


def check_during(scrapes: Scrapes, output: str, in_flight: bool = True) -> None:
    """Some scrape came while requests were still running, with the in-flight gauge (a headless ``locust -f``
    master counts its workers' once-a-second reports)."""
    partial = [s for s in scrapes.taken if total(s, "llmload_requests_total") < PROMPTS]
    assert partial, f"no scrape during the run ({len(scrapes.taken)} scrapes)\n{output}"
    assert any("llmload_requests_in_flight" in s for s in partial) == in_flight, output
    counts = [total(s, "llmload_requests_total") for s in scrapes.taken]
    assert counts == sorted(counts), "a counter went back"


def check_final(final: dict, records: list[dict], failures_by_kind: dict[str, int], output: str) -> None:
    done = [r for r in records if r["success"] and not r["cut_off"]]
    failed = [r for r in records if not r["success"] and not r["cut_off"]]
    assert len(records) == PROMPTS, output
    assert failed and done, output
    assert total(final, "llmload_requests_total", outcome="completed") == len(done), output
    assert total(final, "llmload_requests_total", outcome="failed") == len(failed), output
    assert total(final, "llmload_requests_total", outcome="cut_off") == 0, output
    errors = {dict(k)["kind"]: v for k, v in final["llmload_errors_total"].items() if v}
    assert errors == failures_by_kind, output
    assert total(final, "llmload_output_tokens_total") == sum(r["output_tokens"] for r in done)
    # the server's prompt tokens where it reported them (today's vLLM's total_input_tokens), else the dataset's
    assert total(final, "llmload_input_tokens_total") == sum(
        r["prompt_len"] if r["server_prompt_tokens"] is None else r["server_prompt_tokens"] for r in done)
    ttfts = [r["first_token"] - r["start"] for r in done]
    assert total(final, "llmload_ttft_seconds_count") == len(ttfts)
    assert total(final, "llmload_ttft_seconds_sum") == pytest.approx(sum(ttfts), rel=1e-9)
    assert total(final, "llmload_ttft_seconds_bucket", le="+Inf") == len(ttfts)
    itl_count = sum(len(r["chunk_times"]) - 1 for r in done)
    assert total(final, "llmload_itl_seconds_count") == itl_count
    assert total(final, "llmload_e2e_latency_seconds_count") == len(done)
    assert total(final, "llmload_schedule_lag_seconds_count") == PROMPTS  # open loop: every request sent
    assert total(final, "llmload_requests_in_flight") == 0


@pytest.mark.parametrize("extra", [(), ("--processes", "2")], ids=["single", "processes-2"])
@pytest.mark.slow
def test_bench_serves_live_metrics_that_end_equal_to_the_result(start_sim, tmp_path: Path,
                                                                 extra: tuple[str, ...]) -> None:
    sim = start_sim(*SIM)
    port = free_port()
    results = tmp_path / "results"
    argv = [*llmload_command(), "bench", "--base-url", sim.url, *WORKLOAD, "--no-initial-test", *extra,
            "--prometheus-port", str(port), *LINGER, "--save-result", "--result-dir", str(results), "--disable-tqdm"]
    scrapes, output = run_with_scrapes(argv, port, tmp_path)
    check_during(scrapes, output)
    [result_path] = results.glob("*.json")
    result = json.loads(result_path.read_text())
    records_path = result_path.with_name(result_path.name[: -len(".json")] + ".records.jsonl")
    records = [json.loads(line) for line in records_path.read_text().splitlines() if line.strip()]
    final = scrapes.final
    assert total(final, "llmload_requests_total", outcome="completed") == result["completed"], output
    assert total(final, "llmload_requests_total", outcome="failed") == result["failed"], output
    assert total(final, "llmload_output_tokens_total") == result["total_output_tokens"], output
    assert total(final, "llmload_input_tokens_total") == result["total_input_tokens"], output
    check_final(final, records, result["failures_by_kind"], output)
    if extra:
        assert {r["worker"] for r in records} == {"worker0", "worker1"}  # counted on the master, from both


@pytest.mark.parametrize("extra", [(), ("--processes", "2")], ids=["local", "processes-2"])
@pytest.mark.slow
def test_locust_serves_live_metrics_that_end_equal_to_the_records(start_sim, tmp_path: Path,
                                                                  extra: tuple[str, ...]) -> None:
    sim = start_sim(*SIM)
    port = free_port()
    records_path = tmp_path / "records.jsonl"
    argv = locust_argv("-f", "locustfiles/sharegpt.py", "--headless", "--host", sim.url, "-t", "120s",
                       "--tokenizer", "builtin", "--arrival", "open", *WORKLOAD, "--prometheus-port", str(port),
                       *LINGER, "--llm-records", str(records_path), "--exit-code-on-error", "0",
                       *extra)  # the faults: on purpose
    scrapes, output = run_with_scrapes(argv, port, tmp_path)
    check_during(scrapes, output)
    records = [json.loads(line) for line in records_path.read_text().splitlines() if line.strip()]
    kinds: dict[str, int] = {}
    for r in records:
        if not r["success"]:
            kinds[r["failure_kind"]] = kinds.get(r["failure_kind"], 0) + 1
    check_final(scrapes.final, records, kinds, output)
    if extra:
        assert {r["worker"] for r in records} == {"worker0", "worker1"}  # counted on the master, from both


@pytest.mark.parametrize("way", ["bench", "locust"])
def test_a_busy_port_is_exit_2_before_the_first_request(start_sim, tmp_path: Path, way: str) -> None:
    trace = tmp_path / "trace.jsonl"
    sim = start_sim("--ttft-ms", "50", "--itl-ms", "10", "--trace-file", str(trace))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        if way == "bench":
            argv = [*llmload_command(), "bench", "--base-url", sim.url]
        else:
            argv = [*locust_command(), "-f", "locustfiles/sharegpt.py", "--headless", "--host", sim.url, "-t", "30s",
                    "--tokenizer", "builtin", "--arrival", "open"]
        proc = subprocess.run([*argv, *WORKLOAD, "--prometheus-port", str(port)], capture_output=True, text=True,
                              env=offline_env(), timeout=120, stdin=subprocess.DEVNULL,
                              cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if f"--prometheus-port {port}" in line]
    assert len(errors) == 1 and "cannot listen" in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not trace.exists() or not trace.read_text().strip(), "a request was sent"
