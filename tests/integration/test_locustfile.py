"""`locust -f locustfiles/sharegpt.py` runs headless against a server, shows LLM rows and writes request records;
its options also come from LLMLOAD_* environment variables."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support import CLOCK_SLACK_S

LOCUSTFILE = "locustfiles/sharegpt.py"


def stats_rows(output: str) -> dict[str, tuple[int, int]]:
    """Locust's final stats table: row name -> (# reqs, # fails) for the ``LLM`` request type."""
    rows = {}
    for m in re.finditer(r"^LLM\s+(\S+)\s+(\d+)\s+(\d+)\(\d+\.\d+%\)\s*\|", output, re.M):
        rows[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    return rows


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def by_client_id(trace_path: Path) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for line in read_jsonl(trace_path):
        out.setdefault(line["client_id"], []).append(line)
    return out


# Locust starts its -t clock while llmload still builds the workload (tokenizer + dataset, ~2 s here, several
# times that on a loaded machine), so the runs are given 8 s to be sure to stream for a while.


@pytest.mark.slow
def test_headless_run_with_flags(child_runner, start_sim, tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    sim = start_sim("--ttft-ms", "20", "--itl-ms", "5", "--trace-file", str(trace))
    records_path = tmp_path / "records.jsonl"
    run = child_runner.locust("-f", LOCUSTFILE, "--headless", "-u", "4", "-r", "4", "-t", "8s", "--host", sim.url,
                              "--tokenizer", "builtin", "--num-prompts", "20", "--llm-records", records_path)
    assert run.returncode == 0, run.describe()
    assert "Traceback" not in run.stderr, run.describe()
    # the workload is loaded once, at init: the test start (where Locust fills in its own options) reuses it
    assert run.stderr.count("Loading tokenizer") == 1, run.describe()
    output = run.stdout + run.stderr
    rows = stats_rows(output)
    for name in ("E2E", "TTFT", "TPOT"):
        assert name in rows, f"no 'LLM {name}' row in Locust's stats:\n{output[-4000:]}"
    reqs, fails = rows["E2E"]
    assert reqs > 0 and fails == 0, rows
    assert rows["TTFT"][0] == reqs

    records = read_jsonl(records_path)
    # requests still streaming when -t ran out are recorded as cut off, not dropped and not failed
    cut = [r for r in records if r["cut_off"]]
    done = [r for r in records if not r["cut_off"]]
    assert len(done) == reqs, f"{len(done)} finished records for {reqs} requests in Locust's stats"
    assert all(not r["success"] and r["error"] and "\n" not in r["error"] for r in cut), cut
    assert all(r["success"] for r in done), [r["error"] for r in done if not r["success"]]
    server = by_client_id(trace)
    for r in done:
        # the request reached the server under its id, and the client saw what the server sent
        sent = [t for t in server.get(r["request_id"], []) if t["received"] >= r["start"] - CLOCK_SLACK_S]
        assert sent, r["request_id"]
        srv = min(sent, key=lambda t: t["received"])
        assert r["output_tokens"] == srv["completion_tokens"]
        assert len(r["chunk_times"]) == len(srv["chunks"])
        assert r["first_token"] - r["start"] >= 0.020 - CLOCK_SLACK_S  # the simulated TTFT, no earlier event
    # the 20 prompts sampled from the dataset are cycled through
    assert len({r["request_id"] for r in records}) <= 20


@pytest.mark.slow
def test_options_from_environment(child_runner, start_sim, tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    sim = start_sim("--ttft-ms", "10", "--itl-ms", "2", "--trace-file", str(trace))
    records_path = tmp_path / "env-records.jsonl"
    env = {
        "LLMLOAD_BACKEND": "openai-chat",
        "LLMLOAD_TOKENIZER": "builtin",
        "LLMLOAD_NUM_PROMPTS": "20",
        "LLMLOAD_MAX_TOKENS": "7",
        "LLMLOAD_IGNORE_EOS": "true",
        "LLMLOAD_RECORDS": str(records_path),
    }
    run = child_runner.locust("-f", LOCUSTFILE, "--headless", "-u", "2", "-r", "2", "-t", "8s", "--host", sim.url,
                              env_extra=env)
    assert run.returncode == 0, run.describe()
    records = read_jsonl(records_path)
    records = [r for r in records if not r["cut_off"]]
    assert records, run.describe()
    assert all(r["success"] for r in records), [r["error"] for r in records if not r["success"]]
    assert {r["output_tokens"] for r in records} == {7}
    assert {r["expected_output_len"] for r in records} == {7}
    assert {r["backend"] for r in records} == {"openai-chat"}
    paths = {t["path"] for lines in by_client_id(trace).values() for t in lines}
    assert paths == {"/v1/chat/completions"}, paths
    assert {t["max_tokens"] for lines in by_client_id(trace).values() for t in lines} == {7}


@pytest.mark.parametrize(("flags", "message"), [
    (("--request-rate", "5", "--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1", "--ramp-up-end-rps", "4"),
     "--request-rate cannot be combined with --ramp-up-strategy"),
    (("--ramp-up-strategy", "exponential"), "needs both --ramp-up-start-rps and --ramp-up-end-rps"),
    (("--goodput", "ttft"), "goodput"),
])
def test_locust_checks_the_run_options_as_bench_does(child_runner, start_sim, flags: tuple[str, ...],
                                                     message: str) -> None:
    """The one run configuration (core/run.RunConfig) checks locust -f's options as it checks bench's: a bad
    combination is one line and exit 2 before any request (the plugin used to build the schedule unchecked)."""
    trace = child_runner.tmp / "checks.trace.jsonl"
    sim = start_sim("--ttft-ms", "5", "--itl-ms", "2", "--trace-file", str(trace))
    run = child_runner.locust("-f", LOCUSTFILE, "--headless", "--arrival", "open", "-t", "30s", "--host", sim.url,
                              "--tokenizer", "builtin", "--num-prompts", "5", *flags)
    assert run.returncode == 2, run.describe()
    errors = [line for line in run.stderr.splitlines() if line.startswith("llmload: error:")]
    assert len(errors) == 1 and message in errors[0], run.describe()
    assert "Traceback" not in run.stderr, run.describe()
    assert not trace.exists() or not trace.read_text().strip(), "a request reached the server"
