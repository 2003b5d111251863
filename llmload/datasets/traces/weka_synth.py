"""A seeded generator of agentic session traces in the WEKA / Claude Code format (:mod:`.weka`).

The project ships its own small sample instead of copying real traces: each session has the shape of a coding
agent's: a system-and-tools prefix every call repeats, a context that grows by a tool result per call (so a call
re-sends the previous call's whole prompt and a few new blocks), think times between calls, and sub-agents spawned
after a parent call, with their own prefix that shares the session's tool block, some of them detached
(``async_launched``). Equal seeds give equal traces.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

BLOCK = 64
MODEL, SUB_MODEL = "synthetic-main", "synthetic-sub"


def synthetic_traces(seed: int, sessions: int = 4, calls: int = 8, subagents: int = 1) -> list[dict[str, Any]]:
    """``sessions`` traces of ``calls`` main-chain calls and up to ``subagents`` sub-agents each."""
    rng = random.Random(f"llmload-weka-synth:{seed}")
    return [_trace(rng, f"synth_{seed}_{k:03d}", calls, subagents) for k in range(sessions)]


class _Blocks:
    """The trace's hash-id counter (ids are local to a trace)."""

    def __init__(self) -> None:
        self.next = 0

    def new(self, n: int) -> list[int]:
        ids = list(range(self.next, self.next + n))
        self.next += n
        return ids


def _trace(rng: random.Random, trace_id: str, calls: int, subagents: int) -> dict[str, Any]:
    blocks = _Blocks()
    tools = blocks.new(rng.randint(2, 4))
    system = blocks.new(rng.randint(1, 2))
    requests: list[dict[str, Any]] = []
    spawn_after = set(rng.sample(range(max(1, calls - 1)), min(subagents, max(1, calls - 1))))
    context = tools + system + blocks.new(rng.randint(1, 3))
    t = 0.0
    for k in range(calls):
        call = _call(rng, t, context, MODEL, first=k == 0, last=k == calls - 1)
        requests.append(call)
        ended = t + call["api_time"]
        if k in spawn_after:
            sub, sub_ended = _subagent(rng, ended + rng.uniform(0.0, 0.5), tools, blocks, len(requests))
            requests.append(sub)
            if sub["status"] != "async_launched":
                ended = max(ended, sub_ended)  # the parent's next call waits for the sub-agent's answer
        think = round(rng.uniform(0.0, 3.0), 3)
        t = round(ended + think, 3)
        context = context + blocks.new(rng.randint(1, 4))  # the tool's result joins the context
    # each call's think_time: how long after the previous answer of its chain it went out
    main = [r for r in requests if r["type"] != "subagent"]
    for before, call in itertools.pairwise(main):
        call["think_time"] = round(call["t"] - (before["t"] + before["api_time"]), 3)
    for sub in (r for r in requests if r["type"] == "subagent"):  # after a sub-agent, the wait is for it
        waited = [r for r in main if r["t"] > sub["t"]]
        if waited and sub["status"] != "async_launched":
            last = sub["requests"][-1]
            waited[0]["think_time"] = round(waited[0]["t"] - (sub["t"] + last["t"] + last["api_time"]), 3)
    return {"id": trace_id, "models": [MODEL, SUB_MODEL], "block_size": BLOCK, "hash_id_scope": "local",
            "tool_tokens": BLOCK * len(tools), "system_tokens": BLOCK * len(system), "requests": requests}


def _call(rng: random.Random, t: float, context: list[int], model: str, *, first: bool, last: bool) -> dict[str, Any]:
    stream = rng.random() < 0.3
    api_time = round(rng.uniform(0.5, 4.0), 3)
    call: dict[str, Any] = {
        "t": round(t, 3), "type": "s" if stream else "n", "model": model,
        "in": BLOCK * len(context) + rng.randint(0, BLOCK - 1), "out": rng.randint(16, 200),
        "hash_ids": list(context), "input_types": ["text"] if first else ["tool_result"],
        "output_types": ["text"] if last else ["text", "tool_use"], "stop": "end_turn" if last else "tool_use",
        "api_time": api_time, "think_time": 0.0,
    }
    if stream:
        call["ttft"] = round(rng.uniform(0.1, 0.8), 3)
    return call


def _subagent(rng: random.Random, spawn: float, tools: list[int], blocks: _Blocks,
              index: int) -> tuple[dict[str, Any], float]:
    """A sub-agent entry spawned at ``spawn`` and when its last answer ends (on the trace's clock)."""
    context = tools[:1] + blocks.new(rng.randint(1, 3))
    calls, t = [], 0.0
    count = rng.randint(2, 4)
    for k in range(count):
        call = _call(rng, t, context, SUB_MODEL, first=k == 0, last=k == count - 1)
        if k:
            call["think_time"] = round(t - (calls[-1]["t"] + calls[-1]["api_time"]), 3)
        calls.append(call)
        t = round(t + call["api_time"] + rng.uniform(0.0, 1.0), 3)
        context = context + blocks.new(rng.randint(1, 3))
    entry = {"t": round(spawn, 3), "type": "subagent", "agent_id": f"agent_{index:03d}", "subagent_type": "Explore",
             "status": "async_launched" if rng.random() < 0.25 else "completed", "models": [SUB_MODEL],
             "requests": calls}
    return entry, round(spawn, 3) + calls[-1]["t"] + calls[-1]["api_time"]
