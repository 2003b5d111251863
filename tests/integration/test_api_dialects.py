"""The Responses API and the Anthropic Messages API, end to end: the simulator speaks both, the official SDKs
read its streams, and ``llmload bench`` over each measures the same TTFT, ITL and token counts as over chat
completions, all checked against the simulator's own trace of what it sent; whole conversations replay over
each, and so does ``locust -f``.
"""

from __future__ import annotations

import json
from pathlib import Path
from statistics import median

import openai
import pytest
from support import match_trace, trace_lines

pytestmark = pytest.mark.slow

MODEL = "sim-test-model"
DIALECTS = ("openai-chat", "openai-responses", "anthropic-messages")
OUTPUT_LEN = 24
#: how far a median may be from what the server sent: half the simulator's 10 ms ITL
MARGIN_S = 0.005


@pytest.fixture(scope="module")
def sim(start_sim_module, tmp_path_factory):
    trace = tmp_path_factory.mktemp("dialects") / "trace.jsonl"
    sim = start_sim_module("--model", MODEL, "--ttft-ms", "20", "--itl-ms", "10", "--tokenizer", "builtin",
                           "--prefix-cache-tokens", "200000", "--trace-file", trace)
    return sim, trace


def test_the_official_sdks_read_the_simulators_streams(sim) -> None:
    sim, _ = sim
    with openai.OpenAI(base_url=f"{sim.url}/v1", api_key="x", max_retries=0, timeout=30) as client:
        with client.responses.stream(model=MODEL, input="Tell me about batching.", max_output_tokens=9,
                                     extra_body={"ignore_eos": True}) as stream:
            deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
            final = stream.get_final_response()
        assert len(deltas) == 9 and final.output_text == "".join(deltas)
        assert final.usage.output_tokens == 9 and final.usage.input_tokens > 0
        whole = client.responses.create(model=MODEL, input=[{"role": "user", "content": "hi"}], max_output_tokens=5,
                                        extra_body={"ignore_eos": True})
        assert whole.usage.output_tokens == 5 and whole.output_text
    anthropic = pytest.importorskip("anthropic")
    with anthropic.Anthropic(base_url=sim.url, api_key="x", max_retries=0, timeout=30) as client:
        with client.messages.stream(model=MODEL, max_tokens=7, messages=[{"role": "user", "content": "hello"}],
                                    extra_body={"ignore_eos": True}) as stream:
            texts = list(stream.text_stream)
            message = stream.get_final_message()
        assert len(texts) == 7 and message.content[0].text == "".join(texts)
        assert message.usage.output_tokens == 7 and message.stop_reason == "max_tokens"
        whole = client.messages.create(model=MODEL, max_tokens=4, system="be brief",
                                       messages=[{"role": "user", "content": "yo"}], extra_body={"ignore_eos": True})
        assert whole.usage.output_tokens == 4 and whole.content[0].text


def _itls(records: list[dict]) -> list[float]:
    return [b - a for r in records for a, b in zip(r["chunk_times"], r["chunk_times"][1:], strict=False)]


def test_bench_measures_the_same_over_every_dialect(child_runner, sim) -> None:
    sim, trace = sim
    runs = {}
    for dialect in DIALECTS:
        run = child_runner.bench("--backend", dialect, "--base-url", sim.url, "--model", MODEL, "--tokenizer",
                                 "builtin", "--num-prompts", "24", "--request-rate", "20", "--seed", "3",
                                 "--sharegpt-output-len", str(OUTPUT_LEN), "--ignore-eos", "--save-result",
                                 "--disable-tqdm", timeout=180)
        assert run.returncode == 0, run.describe()
        runs[dialect] = (run.result(), run.records())
    server = trace_lines(trace)
    for dialect, (result, records) in runs.items():
        assert result["completed"] == 24 and result["failed"] == 0, (dialect, result["failures_by_kind"])
        # every token counted, from the API's own usage, one timed event a token
        assert all(r["output_tokens"] == OUTPUT_LEN and r["output_tokens_source"] == "usage"
                   and len(r["chunk_times"]) == OUTPUT_LEN for r in records), dialect
        assert all(r["server_prompt_tokens"] and r["cached_tokens"] is not None for r in records), dialect
        pairs = match_trace(records, server)
        ttft_error = median(abs(rec["first_token"] - line["chunks"][0]) for rec, line in pairs)
        server_itl = median(b - a for _, line in pairs for a, b in zip(line["chunks"], line["chunks"][1:],
                                                                       strict=False))
        assert ttft_error < MARGIN_S and abs(median(_itls(records)) - server_itl) < MARGIN_S, (dialect, ttft_error)
    # the same prompts: the same server prompt tokens over every dialect but the chat template's few
    prompts = {d: sorted(r["prompt_len"] for r in recs) for d, (_, recs) in runs.items()}
    assert prompts["openai-responses"] == prompts["openai-chat"] == prompts["anthropic-messages"]


@pytest.mark.parametrize("dialect", ["openai-responses", "anthropic-messages"])
def test_whole_conversations_replay_over_the_dialect(child_runner, sim, dialect: str) -> None:
    sim, _ = sim
    run = child_runner.bench("--backend", dialect, "--base-url", sim.url, "--model", MODEL, "--tokenizer", "builtin",
                             "--multi-turn", "--num-prompts", "6", "--max-turns", "3", "--max-concurrency", "3",
                             "--history", "live", "--save-result", "--disable-tqdm", timeout=180)
    assert run.returncode == 0, run.describe()
    records = run.records()
    later = [r for r in records if r["turn"] > 1]
    assert later and all(r["success"] for r in records), [r["error"] for r in records if not r["success"]][:3]
    # a later turn carries the history: the server found its earlier turns' blocks in its prefix cache
    assert any((r["cached_tokens"] or 0) > 0 for r in later), [(r["turn"], r["cached_tokens"]) for r in later]


def test_locust_runs_the_messages_api(child_runner, sim, tmp_path: Path) -> None:
    sim, _ = sim
    result = tmp_path / "result.json"
    run = child_runner.locust("-f", "locustfiles/sharegpt.py", "--headless", "--host", sim.url, "-t", "60s",
                              "--backend", "anthropic-messages", "--model", MODEL, "--tokenizer", "builtin",
                              "--num-prompts", "8", "--arrival", "open", "--request-rate", "10",
                              "--sharegpt-output-len", "12", "--ignore-eos", "--llm-result", str(result), timeout=120)
    assert run.returncode == 0, run.describe()
    data = json.loads(result.read_text())
    assert data["completed"] == 8 and data["total_output_tokens"] == 8 * 12, data


REASONING = 4


def test_reasoning_streams_over_every_dialect(child_runner, start_sim, tmp_path: Path) -> None:
    """A simulator that thinks first: the SDKs read the reasoning item and thinking block, and bench over each
    typed dialect counts the reasoning tokens and times the answer's first token where the server sent it."""
    trace = tmp_path / "trace.jsonl"
    sim = start_sim("--model", MODEL, "--ttft-ms", "20", "--itl-ms", "10", "--reasoning-tokens", str(REASONING),
                    "--trace-file", trace)
    with openai.OpenAI(base_url=f"{sim.url}/v1", api_key="x", max_retries=0, timeout=30) as client:
        with client.responses.stream(model=MODEL, input="Why?", max_output_tokens=9,
                                     extra_body={"ignore_eos": True}) as stream:
            thought = "".join(e.delta for e in stream if e.type == "response.reasoning_text.delta")
            final = stream.get_final_response()
        assert [item.type for item in final.output] == ["reasoning", "message"] and thought and final.output_text
        assert final.usage.output_tokens_details.reasoning_tokens == REASONING
    anthropic = pytest.importorskip("anthropic")
    with anthropic.Anthropic(base_url=sim.url, api_key="x", max_retries=0, timeout=30) as client:
        with client.messages.stream(model=MODEL, max_tokens=7, messages=[{"role": "user", "content": "why?"}],
                                    extra_body={"ignore_eos": True}) as stream:
            answer = "".join(stream.text_stream)
            message = stream.get_final_message()
        assert [b.type for b in message.content] == ["thinking", "text"] and message.content[1].text == answer
    for dialect in ("openai-responses", "anthropic-messages"):  # chat's reasoning: test_conversation_runs
        run = child_runner.bench("--backend", dialect, "--base-url", sim.url, "--model", MODEL, "--tokenizer",
                                 "builtin", "--num-prompts", "8", "--request-rate", "20", "--seed", "3",
                                 "--sharegpt-output-len", "10", "--ignore-eos", "--save-result", "--disable-tqdm",
                                 timeout=180)
        assert run.returncode == 0, run.describe()
        result, records = run.result(), run.records()
        assert result["reasoning"]["total_reasoning_tokens"] == 8 * REASONING, (dialect, result.get("reasoning"))
        assert all(r["reasoning_tokens"] == REASONING and r["output_tokens"] == 10 for r in records), dialect
        # TTFT is the first reasoning token; the answer began at the server's fifth token
        pairs = match_trace(records, trace_lines(trace))
        assert len(pairs) == 8
        assert median(abs(rec["first_token"] - line["chunks"][0]) for rec, line in pairs) < MARGIN_S, dialect
        assert median(abs(rec["first_answer_token"] - line["chunks"][REASONING]) for rec, line in pairs) < MARGIN_S
