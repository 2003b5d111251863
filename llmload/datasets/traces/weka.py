"""Agentic session traces in the WEKA / Claude Code format (``--dataset-name weka_trace``): read and validate.

The format (docs/TRACE_FORMAT.md of the public ``agentic-coding-analysis`` repository) holds one session a trace:
``id``, ``block_size`` (64 tokens), ``hash_id_scope``, ``tool_tokens``, ``system_tokens`` and ``requests[]``. A
request has ``t`` (seconds from the trace's start), ``type`` (``n`` non-streaming, ``s`` streaming), ``model``,
``in`` and ``out`` (tokens), ``hash_ids`` (one id per full block; equal ids are equal blocks), ``input_types``,
``stop``, ``api_time``, ``think_time`` (seconds after the previous answer ended) and ``ttft``. An entry with ``type:
"subagent"`` is a sub-agent: ``t`` (its spawn time), ``agent_id``, ``subagent_type``, ``status`` and its own
``requests[]``, whose ``t`` counts from the spawn; it shares the trace's hash-id space.

Here a trace becomes a :class:`Session`: its main :class:`Chain` and the sub-agents' chains, each call numbered
in document order, depth first (a sub-agent's calls come where its entry stands), as the records' ``turn`` will
be. Every problem is one :class:`~llmload.common.errors.DatasetError` naming the file, the trace and the field.
How a session replays (chains, sub-agents beside their parent, think times) is :mod:`llmload.core.session`; the
dependencies it follows are worked out here (:meth:`Session.waits_for`, :meth:`Chain.start_pause`).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmload.common.errors import DatasetError
from llmload.datasets.base import reading
from llmload.datasets.traces.blocks import chained_reuse

#: a call's ``type``: non-streaming or streaming
CALL_TYPES = ("n", "s")
SUBAGENT = "subagent"
#: a sub-agent whose parent does not wait for it
ASYNC_STATUS = "async_launched"


@dataclass(frozen=True)
class Call:
    """One model call of a chain."""

    #: seconds from the start of its chain (the trace's start, or the sub-agent's spawn)
    t: float
    #: 0, 1, ... over the whole trace in document order, depth first
    turn: int
    stream: bool
    model: str
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...]
    #: seconds the recorded client waited after the previous answer of its chain ended
    think_time: float
    stop: str = ""
    input_types: tuple[str, ...] = ()
    #: the recorded time to the first token, for streamed calls that have it
    ttft: float | None = None
    #: the recorded seconds from send to the answer's end (0 when the trace lacks it)
    api_time: float = 0.0

    @property
    def recorded_end(self) -> float:
        """When the recorded answer ended, in seconds from the start of its chain."""
        return self.t + self.api_time


@dataclass
class Chain:
    """The calls one agent makes one after another: the main agent (``agent_id`` "") or one sub-agent."""

    agent_id: str
    calls: list[Call] = field(default_factory=list)
    #: when it starts, in seconds from the trace's start (0 for the main chain)
    spawn_t: float = 0.0
    subagent_type: str = ""
    #: the parent does not wait for it (``status: async_launched``)
    detached: bool = False
    #: the main chain's turn after which it was spawned (-1: before any; None for the main chain)
    after_turn: int | None = None

    @property
    def recorded_end(self) -> float:
        """When its last recorded answer ended, in seconds from the trace's start."""
        return self.spawn_t + (self.calls[-1].recorded_end if self.calls else 0.0)


@dataclass
class Session:
    """One trace: its main chain and its sub-agents' chains."""

    id: str
    block_size: int
    main: Chain
    subagents: list[Chain] = field(default_factory=list)
    source: str = ""
    #: ``local``: hash ids name blocks of this trace only; ``global``: every trace of the file shares them
    hash_id_scope: str = "local"

    @property
    def chains(self) -> list[Chain]:
        return [self.main, *self.subagents]

    @property
    def calls(self) -> int:
        return sum(len(c.calls) for c in self.chains)

    def waits_for(self, call: Call) -> list[Chain]:
        """The sub-agents a main-chain ``call`` waits for: those spawned before it that are not detached and
        whose recorded last answer ended before the call went out (a call recorded while a sub-agent still ran
        went out beside it)."""
        return [chain for chain in self.subagents
                if not chain.detached and chain.after_turn is not None and chain.after_turn < call.turn
                and chain.recorded_end <= call.t + 1e-6]

    def pause_before(self, chain: Chain, index: int) -> float:
        """The recorded seconds between what call ``index`` of ``chain`` waited for and its send: its
        ``think_time`` after the previous answer of its chain, or, for a main-chain call that waited for a
        sub-agent that ended later than that answer, the gap after the sub-agent's end. The first call of a
        chain: its ``t`` (the main chain's) or 0 (a sub-agent's first call goes at its spawn)."""
        call = chain.calls[index]
        if index == 0:
            return call.t if chain is self.main else 0.0
        previous_end = chain.calls[index - 1].recorded_end + chain.spawn_t
        waited = [s.recorded_end for s in self.waits_for(call)] if chain is self.main else []
        if waited and max(waited) > previous_end:
            return max(0.0, call.t - max(waited))
        return call.think_time

    def spawn_pause(self, chain: Chain) -> float:
        """The recorded seconds between the end of the parent call a sub-agent follows and its spawn."""
        parent = next((c for c in self.main.calls if c.turn == chain.after_turn), None)
        return max(0.0, chain.spawn_t - parent.recorded_end) if parent is not None else chain.spawn_t

    def ideal_reuse_tokens(self) -> int:
        """Prompt tokens a prefix cache that never evicts could serve when the calls go out in turn order (the
        trace's own reuse; a replay sends sub-agents beside their parent, so its order can differ)."""
        calls = sorted((c for chain in self.chains for c in chain.calls), key=lambda c: c.turn)
        return sum(prefix_reuse(calls, self.block_size))


def prefix_reuse(calls: list[Call], block_size: int) -> list[int]:
    """For each call in the order given, the prompt tokens of its leading blocks that an earlier call already sent
    (:func:`~llmload.datasets.traces.blocks.chained_reuse` of their hash ids)."""
    return chained_reuse([c.hash_ids for c in calls], block_size)


def read_sessions(path: Path) -> list[Session]:
    """Every trace under ``path``: a folder of ``.json`` files (one trace each, by name) or a ``.jsonl`` file (one
    trace a line)."""
    if path.is_dir():
        files = sorted(path.glob("*.json"))
        if not files:
            raise DatasetError(f"{path}: no .json trace files in this folder")
        return [_session(_load(f), str(f)) for f in files]
    with reading(path, "trace"):
        text = path.read_text(encoding="utf-8")
    sessions = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            sessions.append(_session(_parse(line, f"{path}:{n}"), f"{path}:{n}"))
    if not sessions:
        raise DatasetError(f"{path}: no traces in this file")
    return sessions


def _load(path: Path) -> Any:
    with reading(path, "trace"):
        return _parse(path.read_text(encoding="utf-8"), str(path))


def _parse(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{where}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None


def _session(data: Any, where: str) -> Session:
    if not isinstance(data, dict) or not isinstance(data.get("requests"), list):
        raise DatasetError(f"{where}: not a WEKA trace (an object with a \"requests\" list)")
    trace_id = str(data.get("id") or Path(where.split(":")[0]).stem)
    block_size = data.get("block_size", 64)
    if not isinstance(block_size, int) or isinstance(block_size, bool) or block_size <= 0:
        raise DatasetError(f"{where}: trace {trace_id}: block_size must be a positive integer, got {block_size!r}")
    scope = str(data.get("hash_id_scope") or "local")
    session = Session(trace_id, block_size, Chain(""), source=where, hash_id_scope=scope)
    turns = itertools.count()
    for i, entry in enumerate(data["requests"]):
        at = f"{where}: trace {trace_id}: requests[{i}]"
        if isinstance(entry, dict) and entry.get("type") == SUBAGENT:
            session.subagents.append(_subagent(entry, at, turns, session.main))
        else:
            session.main.calls.append(_call(entry, at, next(turns)))
    if not session.calls:
        raise DatasetError(f"{where}: trace {trace_id} has no requests")
    return session


def _subagent(entry: dict[str, Any], at: str, turns: Iterator[int], parent: Chain) -> Chain:
    spawn = _seconds(entry, "t", at)
    agent_id = str(entry.get("agent_id") or "")
    if not agent_id:
        raise DatasetError(f"{at}: a subagent needs an agent_id")
    requests = entry.get("requests")
    if not isinstance(requests, list):
        raise DatasetError(f"{at} ({agent_id}): requests must be a list")
    chain = Chain(agent_id, spawn_t=spawn, subagent_type=str(entry.get("subagent_type") or ""),
                  detached=entry.get("status") == ASYNC_STATUS,
                  after_turn=parent.calls[-1].turn if parent.calls else -1)
    for j, call in enumerate(requests):
        if isinstance(call, dict) and call.get("type") == SUBAGENT:
            raise DatasetError(f"{at} ({agent_id}): requests[{j}]: a subagent inside a subagent is not supported")
        chain.calls.append(_call(call, f"{at} ({agent_id}): requests[{j}]", next(turns)))
    return chain


def _call(entry: Any, at: str, turn: int) -> Call:
    if not isinstance(entry, dict):
        raise DatasetError(f"{at}: not an object")
    kind = entry.get("type")
    if kind not in CALL_TYPES:
        raise DatasetError(f"{at}: type must be one of n, s or subagent, got {kind!r}")
    hash_ids = entry.get("hash_ids", [])
    if not isinstance(hash_ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in hash_ids):
        raise DatasetError(f"{at}: hash_ids must be a list of integers")
    types = entry.get("input_types") or ()
    ttft = entry.get("ttft")
    api_time = entry.get("api_time")
    return Call(
        t=_seconds(entry, "t", at),
        turn=turn,
        stream=kind == "s",
        model=str(entry.get("model") or ""),
        input_tokens=_tokens(entry, "in", at),
        output_tokens=_tokens(entry, "out", at),
        hash_ids=tuple(hash_ids),
        think_time=_seconds(entry, "think_time", at, default=0.0),
        stop=str(entry.get("stop") or ""),
        input_types=tuple(str(x) for x in types) if isinstance(types, list) else (),
        ttft=float(ttft) if isinstance(ttft, (int, float)) and not isinstance(ttft, bool) else None,
        api_time=float(api_time) if isinstance(api_time, (int, float)) and not isinstance(api_time, bool)
        and math.isfinite(api_time) and api_time > 0 else 0.0,
    )


def _tokens(entry: dict[str, Any], key: str, at: str) -> int:
    if key not in entry:
        raise DatasetError(f"{at}: no {key!r} (its {'prompt' if key == 'in' else 'output'} tokens)")
    value = entry[key]
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise DatasetError(f"{at}: {key!r} must be a whole number of tokens >= 0, got {value!r}")
    return value


def _seconds(entry: dict[str, Any], key: str, at: str, default: float | None = None) -> float:
    value = entry.get(key, default)
    if value is None:
        raise DatasetError(f"{at}: no {key!r} (seconds)")
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
        raise DatasetError(f"{at}: {key!r} must be seconds >= 0, got {value!r}")
    return float(value)
