"""Agentic sessions (``--dataset-name weka_trace``) replayed against the simulator, with a prefix cache that never
evicts: every session completes, no call goes out before what it waits for has ended, the server's cached tokens
are the reuse the traces' hash ids allow, call by call, and sub-agents run beside their parent where the trace
says they do. The 40 real Claude Code sessions of ``../shared/traces/weka_cc`` (Apache-2.0, credit in its README)
replay at a high ``--time-scale`` with no failure.

The expected reuse is computed here from the trace files alone: a call's blocks are its first
``(in - 1) // 64`` hash ids (the builtin tokenizer adds one BOS), and a prefix cache finds the longest run of
leading blocks that a call the server saw before it began with.
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from pathlib import Path

import pytest
import test_webui
from test_webui import script

from llmload.datasets.traces.weka_synth import synthetic_traces

pytestmark = pytest.mark.slow

WEKA_CC = Path(__file__).resolve().parents[3] / "shared" / "traces" / "weka_cc"
BLOCK = 64
SIM = "--ttft-ms 2 --itl-ms 0.5 --prefix-cache-tokens 50000000 --prefix-cache-block 64 --max-model-len 300000"


def _call(t: float, ids: list[int], api: float, kind: str = "s", **extra: object) -> dict:
    return {"t": t, "type": kind, "model": "m", "in": BLOCK * len(ids) + 9, "out": 12, "hash_ids": ids,
            "api_time": api, **extra}


#: a main chain whose second call goes out while its sub-agent runs (recorded 2.0-3.0 inside the sub-agent's
#: 1.5-4.5), and whose third waits for the sub-agent's end (recorded at 6.0, after 4.5)
BESIDE = {"id": "beside", "block_size": BLOCK, "hash_id_scope": "local", "requests": [
    _call(0.0, [1, 2], 1.0),
    {"t": 1.5, "type": "subagent", "agent_id": "agent_001", "subagent_type": "Explore", "status": "completed",
     "requests": [_call(0.0, [1, 7], 1.0), _call(2.0, [1, 7, 8], 1.0, "n", think_time=1.0)]},
    _call(2.0, [1, 2, 3], 1.0, think_time=1.0),
    _call(6.0, [1, 2, 3, 4], 1.0, "n", think_time=3.0),
]}


def _traces(folder: Path) -> dict[str, dict]:
    return {json.loads(p.read_text())["id"]: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}


def _calls(trace: dict) -> list[dict]:
    """Every call of a trace in document order, depth first (its turn), with its agent."""
    out = []
    for entry in trace["requests"]:
        if entry["type"] == "subagent":
            out += [dict(c, agent=entry["agent_id"], spawn=entry["t"]) for c in entry["requests"]]
        else:
            out.append(dict(entry, agent=""))
    return out


def _blocks(call: dict) -> tuple[int, ...]:
    return tuple(call["hash_ids"][: (call["in"] - 1) // BLOCK])


def _findable(blocks: tuple[int, ...], seen: list[tuple[int, ...]]) -> int:
    """Brute force: the most leading blocks any earlier call shares with this one, in tokens."""
    best = 0
    for earlier in seen:
        k = 0
        while k < len(blocks) and k < len(earlier) and blocks[k] == earlier[k]:
            k += 1
        best = max(best, k)
    return best * BLOCK


def _run(child_runner, folder: Path, *extra: str, sim: str = SIM, timeout: float = 240) -> tuple[dict, list[dict]]:
    run = child_runner.bench("--dataset-name", "weka_trace", "--dataset-path", str(folder), "--sim-args", sim,
                             "--save-result", "--result-filename", "run.json", "--disable-tqdm", *extra,
                             timeout=timeout)
    assert run.returncode == 0, run.describe()
    return run.result(), run.records()


def test_sessions_replay_in_order_and_the_server_finds_the_hash_ids_reuse(child_runner, tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    folder.mkdir()
    for trace in [*synthetic_traces(11, sessions=3, calls=6, subagents=2), BESIDE]:
        (folder / f"{trace['id']}.json").write_text(json.dumps(trace))
    traces = _traces(folder)
    result, records = _run(child_runner, folder, "--time-scale", "2", "--no-initial-test", "--max-concurrency", "2",
                           sim=SIM + " --tokenizer builtin")
    calls = sum(len(_calls(t)) for t in traces.values())
    assert result["completed"] == calls == len(records) and result["failed"] == 0, result
    by_session: dict[str, dict[int, dict]] = defaultdict(dict)
    for r in records:
        by_session[r["conversation_id"]][r["turn"]] = r
    assert set(by_session) == set(traces)
    for sid, trace in traces.items():
        recs, spec = by_session[sid], _calls(trace)
        assert sorted(recs) == list(range(len(spec))), sid  # turns number the calls in document order
        for turn, call in enumerate(spec):
            r = recs[turn]
            assert r["agent"] == call["agent"] and r["prompt_len"] == call["in"], (sid, turn)
            assert r["agent_type"] == ("Explore" if call["agent"] else "main")
            assert r["server_prompt_tokens"] == call["in"], (sid, turn)  # built to the exact length
        # each call's trace_cached_tokens: the trace's own reuse, calls in turn order
        assert [recs[t]["trace_cached_tokens"] for t in sorted(recs)] == [
            _findable(_blocks(call), [_blocks(c) for c in spec[:turn]]) for turn, call in enumerate(spec)], sid
        chains: dict[str, list[dict]] = defaultdict(list)
        for turn in sorted(recs):
            chains[recs[turn]["agent"]].append(recs[turn])
        for chain in chains.values():  # no call before the previous call of its chain has ended
            for before, after in itertools.pairwise(chain):
                assert after["start"] >= before["end"], (sid, before["turn"], after["turn"])
    _check_beside(by_session["beside"])
    _check_cached_tokens(traces, records)
    # --max-concurrency 2: at most two sessions in flight, each from its first call's start to its last's end
    spans = [(min(r["start"] for r in recs.values()), max(r["end"] for r in recs.values()))
             for recs in by_session.values()]
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans], key=lambda e: (e[0], e[1]))
    assert max(itertools.accumulate(step for _, step in edges)) == 2


def _check_beside(recs: dict[int, dict]) -> None:
    """Turns: 0 main, 1-2 the sub-agent, 3 main (recorded while the sub-agent ran), 4 main (after it ended)."""
    sub_start, sub_end = recs[1]["start"], recs[2]["end"]
    assert sub_start >= recs[0]["end"]  # a sub-agent starts after the call that spawned it
    assert sub_start < recs[3]["start"] < sub_end, "the main chain's second call must run beside the sub-agent"
    assert recs[4]["start"] >= sub_end, "the main chain's third call waits for the sub-agent"


def _check_cached_tokens(traces: dict[str, dict], records: list[dict]) -> None:
    """Each call's cached tokens lie between what the calls that ended before it left and what every call sent
    before it left (equal for most: only calls in flight together can differ), computed from the trace alone."""
    spec = {(sid, turn): call for sid, t in traces.items() for turn, call in enumerate(_calls(t))}
    exact = 0
    for r in records:
        mine = spec[(r["conversation_id"], r["turn"])]
        scope = [x for x in records if x["conversation_id"] == r["conversation_id"] and x is not r]
        ended = [_blocks(spec[(x["conversation_id"], x["turn"])]) for x in scope if x["end"] <= r["start"]]
        sent = [_blocks(spec[(x["conversation_id"], x["turn"])]) for x in scope if x["start"] < r["start"]]
        low, high = _findable(_blocks(mine), ended), _findable(_blocks(mine), sent)
        assert low <= r["cached_tokens"] <= high, (r["request_id"], r["cached_tokens"], low, high)
        exact += low == high == r["cached_tokens"]
    assert exact >= 0.8 * len(records), f"only {exact} of {len(records)} calls had one possible answer"
    assert sum(r["cached_tokens"] for r in records) > BLOCK * len(records), "too little reuse to test anything"


@pytest.mark.skipif(not WEKA_CC.is_dir(), reason="../shared/traces/weka_cc is not here")
def test_the_40_real_claude_code_sessions_replay_without_a_failure(child_runner, start_sim) -> None:
    # a simulator that counts ~4 characters a token: tokenizing the traces' 25M prompt tokens would take it minutes
    sim = start_sim("--ttft-ms", "1", "--itl-ms", "0.05", "--max-model-len", "300000")
    run = child_runner.bench("--base-url", sim.url, "--tokenizer", "builtin", "--dataset-name", "weka_trace",
                             "--dataset-path", str(WEKA_CC), "--time-scale", "1000", "--max-idle", "0.2",
                             "--save-result", "--result-filename", "run.json", "--disable-tqdm", timeout=300)
    assert run.returncode == 0, run.describe()
    result, records = run.result(), run.records()
    assert result["completed"] == 611 and result["failed"] == 0, result
    assert len({r["conversation_id"] for r in records}) == 40
    assert sum(1 for r in records if r["agent"]) == 56
    sessions = result["sessions"]
    assert sessions["sessions"] == sessions["completed"] == 40 and sessions["calls"] == 611
    assert sessions["by_chain"][0]["agent_type"] == "main" and {row["agent_type"] for row in sessions["by_chain"]} == {"main", "Explore", "Plan"}
    assert result["trace_prompt_tokens"] == sum(r["prompt_len"] for r in records) == 24777318


def test_locust_replays_sessions_each_on_one_worker(child_runner, start_sim, tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    folder.mkdir()
    traces = synthetic_traces(5, sessions=4, calls=4, subagents=1)
    for trace in traces:
        (folder / f"{trace['id']}.json").write_text(json.dumps(trace))
    sim = start_sim("--ttft-ms", "2", "--itl-ms", "0.5")
    out = tmp_path / "records.jsonl"
    run = child_runner.locust("-f", "locustfiles/agentic.py", "--headless", "--host", sim.url, "-u", "2", "-r", "2",
                              "-t", "120s", "--tokenizer", "builtin", "--dataset-name", "weka_trace",
                              "--dataset-path", str(folder), "--time-scale", "50", "--llm-records", str(out),
                              "--processes", "2", timeout=180)
    assert run.returncode == 0, run.describe()
    assert "Traceback" not in run.stderr, run.describe()
    records = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    expected = sorted((t["id"], turn) for t in traces for turn in range(len(_calls(t))))
    assert sorted((r["conversation_id"], r["turn"]) for r in records) == expected
    assert all(r["success"] for r in records)
    workers = defaultdict(set)
    for r in records:  # a session stays on one worker
        workers[r["conversation_id"]].add(r["worker"])
    assert all(len(w) == 1 for w in workers.values()) and len(set().union(*workers.values())) == 2
    assert "Sessions" in run.stdout + run.stderr


start_web = test_webui.start_web  # the fixture


def test_the_llm_tab_shows_sessions_and_chain_types(start_sim, start_web, tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    folder.mkdir()
    for trace in synthetic_traces(9, sessions=3, calls=4, subagents=1):
        (folder / f"{trace['id']}.json").write_text(json.dumps(trace))
    sim = start_sim("--ttft-ms", "2", "--itl-ms", "0.5")
    web = start_web(script("locust"), "-f", "locustfiles/agentic.py", "--host", sim.url, "--tokenizer", "builtin",
                    "--dataset-name", "weka_trace", "--dataset-path", str(folder), "--time-scale", "50")
    resp = web.http.post("/swarm", data={"user_count": "3", "spawn_rate": "3", "host": sim.url})
    assert resp.json()["success"], resp.text
    live = web.wait_for("a sub-agent's row", lambda d: len(d["run"].get("sessions") or []) >= 3, timeout=60)
    rows = {row["label"]: row for row in live["run"]["sessions"]}
    assert rows["all"]["sessions"] >= 1 and rows["all"]["calls"] >= rows["main"]["calls"] >= 1
    assert rows["Explore"]["calls"] >= 1 and rows["main"]["ttft_p50_ms"] >= 2.0
    web.http.post("/stop")
    web.wait_for("the test to stop", lambda d: d["state"] == "stopped")
