"""Structured output end to end (issue 36): ``llmload bench --response-format`` against the built-in simulator
sends OpenAI's ``response_format``, the simulator answers valid JSON for it, every answer's verdict lands in its
record, the result JSON's ``structured_output`` and the summary's line; ``llmload sim --invalid-json-rate P``
breaks about a share P, request by request as the simulator's trace says, also when two worker processes send;
bad ``--response-format`` input is one line and exit 2 before the first request."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from support import is_run_request, trace_lines

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 18},
                   "role": {"enum": ["admin", "user"]}, "notes": {"type": "array", "items": {"type": "string"}}},
    "required": ["name", "age", "role", "notes"],
    "additionalProperties": False,
}
#: small prompts and answers at fixed, short timing: the runs take a second or two
WORKLOAD = ("--dataset-name", "random", "--random-input-len", "16", "--random-output-len", "24", "--ignore-eos",
            "--tokenizer", "builtin", "--disable-tqdm", "--save-result", "--seed", "3")
SIM = "--ttft-ms 2 --itl-ms 1"


def summary_line(stdout: str) -> tuple[int, int]:
    found = re.search(r"^Structured output valid:\s+(\d+) / (\d+) \(", stdout, re.M)
    assert found, stdout[-3000:]
    return int(found.group(1)), int(found.group(2))


@pytest.mark.parametrize(("backend", "kind"), [("openai-chat", "json_schema"), ("vllm", "json_object")])
def test_every_answer_is_valid_from_a_correct_server(child_runner, tmp_path: Path, backend: str, kind: str) -> None:
    """Chat with a schema, completions with json_object (each dialect with each format would only repeat the
    unit tests of the simulator's answers: tests/unit/test_structured_output.py)."""
    schema = tmp_path / "person.json"
    schema.write_text(json.dumps(PERSON))
    trace = tmp_path / "trace.jsonl"
    fmt = "json_object" if kind == "json_object" else f"json_schema:{schema}"
    run = child_runner.bench("--sim-args", f"{SIM} --trace-file {trace} --trace-requests", "--backend", backend,
                             *WORKLOAD, "--num-prompts", "20", "--response-format", fmt)
    assert run.returncode == 0, run.describe()
    result, records = run.result(), run.records()
    assert result["structured_output"] == {"requests": 20, "valid": 20, "valid_rate": 1.0}, result
    assert summary_line(run.stdout) == (20, 20)
    assert all(r["structured_output_valid"] is True and r["structured_output_error"] == "" for r in records)
    answers = [json.loads(r["generated_text"]) for r in records]
    if fmt == "json_object":
        assert all(isinstance(a, dict) for a in answers), answers
    else:
        assert all(set(a) == set(PERSON["properties"]) and a["age"] >= 18 for a in answers), answers
    # the answers are as long as asked: the JSON's pieces are the tokens the server counted
    assert all(r["output_tokens"] == 24 and len(r["chunk_times"]) == 24 for r in records), records[0]
    sent = [t["request"]["body"]["response_format"] for t in trace_lines(trace) if is_run_request(t["client_id"])]
    assert len(sent) == 20
    expected = {"type": "json_object"} if kind == "json_object" else {
        "type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    assert all(s == expected for s in sent), sent[0]


@pytest.mark.slow
def test_invalid_json_rate_breaks_about_that_share_request_by_request(child_runner, tmp_path: Path) -> None:
    n, rate = 200, 0.3
    schema = tmp_path / "person.json"
    schema.write_text(json.dumps(PERSON))
    trace = tmp_path / "trace.jsonl"
    run = child_runner.bench("--sim-args", f"{SIM} --invalid-json-rate {rate} --trace-file {trace}", *WORKLOAD,
                             "--backend", "openai-chat", "--num-prompts", str(n), "--max-concurrency", "16",
                             "--response-format", f"json_schema:{schema}", "--processes", "2", timeout=180)
    assert run.returncode == 0, run.describe()
    result, records = run.result(), run.records()
    assert result["completed"] == n and len({r["worker"] for r in records}) == 2, result
    valid = sum(r["structured_output_valid"] for r in records)
    # the master's count is the records' (they came from both workers), and the summary's
    assert result["structured_output"] == {"requests": n, "valid": valid, "valid_rate": valid / n}, result
    assert summary_line(run.stdout) == (valid, n)
    # about 1 - P valid: within 4 standard deviations of the binomial
    assert abs(valid - n * (1 - rate)) <= 4 * math.sqrt(n * rate * (1 - rate)), valid
    # and exactly the answers the simulator broke, each with its reason
    told = {t["client_id"]: t["structured"] for t in trace_lines(trace) if is_run_request(t["client_id"])}
    assert len(told) == n and set(told.values()) == {"valid", "broken"}
    for r in records:
        assert r["structured_output_valid"] == (told[r["request_id"]] == "valid"), r
        assert r["structured_output_valid"] or r["structured_output_error"].startswith("not JSON:"), r


@pytest.mark.parametrize(("flags", "words"), [
    (("--response-format", "xml"), "expected json_object or json_schema:FILE, got 'xml'"),
    (("--response-format", "json_schema:{dir}/missing.json"), "cannot read"),
    (("--response-format", "json_schema:{dir}/not.json"), "is not JSON"),
    (("--response-format", "json_schema:{dir}/bad.json"), "not a valid JSON Schema"),
    (("--response-format", "json_object", "--backend", "tgi"), "--backend tgi has no response_format"),
])
def test_bad_response_format_is_one_line_and_exit_2(child_runner, tmp_path: Path, flags: tuple[str, ...],
                                                    words: str) -> None:
    (tmp_path / "not.json").write_text("{nope")
    (tmp_path / "bad.json").write_text(json.dumps({"type": "object", "properties": {"a": {"type": 12}}}))
    run = child_runner.bench("--base-url", "http://127.0.0.1:1", "--model", "m", "--tokenizer", "builtin",
                             "--num-prompts", "5", *(f.format(dir=tmp_path) for f in flags))
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.describe()
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("llmload bench: error: --response-format: ") and words in lines[-1], run.describe()
    assert sum(line.startswith("llmload bench: error:") for line in lines) == 1, run.describe()


def test_the_simulator_refuses_a_bad_invalid_json_rate(cli) -> None:
    run = cli("sim", "--invalid-json-rate", "1.5")
    assert run.returncode == 2 and "--invalid-json-rate" in run.stderr, run.describe()
