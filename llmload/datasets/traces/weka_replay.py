"""Agentic sessions ready to replay (``--dataset-name weka_trace``): each WEKA trace with a prompt for every call.

Prompts are built as for a Mooncake trace (:mod:`.blocks`): equal hash ids are byte-identical blocks of
``block_size`` (64) tokens, so a server's prefix cache sees exactly the reuse the trace records, across
sub-agents too. Ids are a trace's own when its ``hash_id_scope`` is ``local`` (the same id in two traces is two
blocks) and shared by every trace of the folder when it is ``global``.

A call of ``n`` tokens is the blocks of its first ``(n - specials) // block_size`` ids, then a tail of its own
for the rest (the special tokens the tokenizer adds, a BOS, come off the tail). Every block and tail starts at a
word of the seeded pool, at a place no other block or tail of the workload starts, and every block is whole words
(it ends where a word ends), so with a tokenizer that splits words at spaces (byte-level BPE, SentencePiece) it
measures ``block_size`` tokens alone, the whole prompt measures the sum of its parts, and the server's cache blocks
line up with the trace's. A seeded sample of blocks and the longest prompt are measured to confirm it; with a
tokenizer where they do not, every block is measured (and moved to another place until it measures its size) and
every prompt is measured, so ``prompt_len`` is always what the tokenizer counts.

The prompt texts are not held: a call's prompt is joined from the session's block texts when it is sent
(:meth:`AgentSession.prompt`), so a folder of 100k-token sessions costs the blocks once, not each call's copy.
"""

from __future__ import annotations

import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from llmload.common.errors import DatasetError
from llmload.datasets.base import SampleRequest, Tokenizer, token_len
from llmload.datasets.traces.blocks import aligned_word_starts, chained_reuse, word_starts
from llmload.datasets.traces.prompts import PromptBuilder
from llmload.datasets.traces.weka import Call, Chain, Session, read_sessions

#: another place is drawn for a block that does not measure ``block_size`` tokens alone, this many times
_BLOCK_ATTEMPTS = 8
#: blocks measured alone (a seeded spread) to check that whole words measure their length with this tokenizer
_CHECKED_BLOCKS = 64


@dataclass
class CallPrompt:
    """What one call sends: its leading blocks (hash ids), its own tail, and the prompt's measured length."""

    blocks: tuple[int, ...]
    tail: str
    prompt_len: int
    #: the prompt tokens a never-evicting prefix cache could serve it when its trace's calls go out in turn order
    ideal_cached: int = 0


@dataclass
class AgentSession:
    """One trace with the text of every block its calls send: the unit a session replay schedules."""

    session: Session
    #: block text by hash id (the session's own ids)
    blocks: dict[int, str] = field(default_factory=dict)
    #: by the call's turn
    prompts: dict[int, CallPrompt] = field(default_factory=dict)
    #: prompt tokens a prefix cache that never evicts could serve when the calls go out in turn order (over the
    #: full blocks the prompts hold: a call of exactly k blocks and a BOS holds k - 1)
    ideal_reuse_tokens: int = 0

    @property
    def calls(self) -> int:
        return self.session.calls

    def prompt(self, call: Call) -> str:
        """The call's prompt text, joined now."""
        p = self.prompts[call.turn]
        return "".join([*(self.blocks[h] for h in p.blocks), p.tail])

    def prompt_len(self, call: Call) -> int:
        return self.prompts[call.turn].prompt_len

    def call_sample(self, call: Call, request_id: str, stream: bool | None = None) -> SampleRequest:
        """What one call sends: its prompt, joined now, ``max_tokens`` its ``out`` (at least 1)."""
        return SampleRequest(self.prompt(call), self.prompt_len(call), max(1, call.output_tokens),
                             request_id=request_id, stream=stream)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values: what a job item carries to a worker (a session stays on one worker)."""
        return {"session": asdict(self.session), "blocks": {str(k): v for k, v in self.blocks.items()},
                "prompts": {str(k): [list(p.blocks), p.tail, p.prompt_len, p.ideal_cached]
                            for k, p in self.prompts.items()},
                "ideal_reuse_tokens": self.ideal_reuse_tokens}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AgentSession:
        raw = data["session"]
        chains = [_chain(c) for c in [raw["main"], *raw["subagents"]]]
        session = Session(raw["id"], raw["block_size"], chains[0], chains[1:], raw.get("source", ""),
                          raw.get("hash_id_scope", "local"))
        return cls(session, {int(k): v for k, v in data["blocks"].items()},
                   {int(k): CallPrompt(tuple(p[0]), p[1], p[2], *p[3:]) for k, p in data["prompts"].items()},
                   int(data.get("ideal_reuse_tokens", 0)))


def _chain(raw: dict[str, Any]) -> Chain:
    calls = [Call(**{**c, "hash_ids": tuple(c["hash_ids"]), "input_types": tuple(c["input_types"])})
             for c in raw["calls"]]
    return Chain(raw["agent_id"], calls, raw["spawn_t"], raw["subagent_type"], raw["detached"], raw["after_turn"])


def sample_weka(path: str | Path, tokenizer: Tokenizer, num_prompts: int | None = None, seed: int = 0, *,
                prompt_path: str | Path | None = None) -> list[SampleRequest]:
    """One sample per session (the first ``num_prompts`` by file name; all by default), each carrying its
    :class:`AgentSession`. ``prompt_len`` and ``expected_output_len`` are its first call's."""
    path = Path(path)
    if not path.exists():
        raise DatasetError(f"--dataset-path {path}: no such file or folder (a folder of WEKA .json traces or a "
                           ".jsonl file of them)")
    sessions = read_sessions(path)
    if num_prompts is not None:
        if num_prompts < 1:
            raise DatasetError(f"--num-prompts must be at least 1 session, got {num_prompts}")
        sessions = sessions[:num_prompts]
    built = SessionPrompts(tokenizer, seed, prompt_path=prompt_path).build(sessions)
    out = []
    for agent in built:
        first = agent.session.main.calls[0] if agent.session.main.calls else agent.session.chains[1].calls[0]
        out.append(SampleRequest(prompt="", prompt_len=agent.prompt_len(first),
                                 expected_output_len=max(1, first.output_tokens), request_id=agent.session.id,
                                 session=agent))
    return out


class SessionPrompts:
    """Builds the blocks and tails of a workload of sessions from one seeded :class:`PromptBuilder` pool."""

    def __init__(self, tokenizer: Tokenizer, seed: int = 0, *, prompt_path: str | Path | None = None) -> None:
        self.builder = PromptBuilder(tokenizer, seed, prompt_path=prompt_path)
        self.seed = seed
        #: the tokenizer splits text into pre-tokens at every space (see :func:`splits_at_words`)
        self.words_stand_alone = False

    def build(self, sessions: list[Session]) -> list[AgentSession]:
        """Every session with its block texts and call prompts (see the module docstring)."""
        b = self.builder
        full = {(s.id, c.turn): self._full_ids(s, c) for s in sessions for c in _calls(s)}
        keys = sorted({(_scope(s), h, s.block_size) for s in sessions for c in _calls(s) for h in full[s.id, c.turn]})
        tails = [(s, c) for s in sessions for c in _calls(s) if self._tail_len(s, c) > 0]
        widest = max([s.block_size for s in sessions] + [self._tail_len(s, c) for s, c in tails])
        places = self._places(widest, len(keys) + len(tails))
        texts = self._blocks(keys, {s.block_size for s in sessions}, places[: len(keys)])
        tail_texts = self._tails(tails, places[len(keys):])
        out = []
        for s in sessions:
            scope = _scope(s)
            ordered = sorted(_calls(s), key=lambda c: c.turn)  # the blocks the prompts hold, in turn order
            sent = chained_reuse([full[s.id, c.turn] for c in ordered], s.block_size)
            reuse = {c.turn: n for c, n in zip(ordered, sent, strict=True)}
            agent = AgentSession(s, ideal_reuse_tokens=sum(reuse.values()))
            for c in _calls(s):
                ids = full[s.id, c.turn]
                length = b.specials
                for h in ids:
                    agent.blocks[h], n = texts[scope, h, s.block_size]
                    length += n
                tail, tail_len = tail_texts.get((s.id, c.turn), ("", 0))
                agent.prompts[c.turn] = CallPrompt(tuple(ids), tail, length + tail_len, reuse[c.turn])
            out.append(agent)
        self._check_lengths(out)
        return out

    def _full_ids(self, s: Session, c: Call) -> tuple[int, ...]:
        content = max(1, c.input_tokens - self.builder.specials)
        return c.hash_ids[: min(len(c.hash_ids), content // s.block_size)]

    def _tail_len(self, s: Session, c: Call) -> int:
        content = max(1, c.input_tokens - self.builder.specials)
        return content - len(self._full_ids(s, c)) * s.block_size

    def _places(self, width: int, count: int) -> np.ndarray:
        """``count`` places in a seeded order, none twice while the pool has enough (then cycling): word starts
        with a word start ``width`` tokens on, so that a block cut there holds whole words (and so measures its
        length alone: words tokenize the same wherever they stand). The pool grows until it has enough."""
        b = self.builder
        hint = max(1, count // 2)
        while True:
            b.prepare(2 * width + 64, hint)
            starts = aligned_word_starts(b, width)
            if len(starts) >= count or hint >= 8 * count:
                break
            hint *= 2
        order = np.random.default_rng([self.seed & 0xFFFFFFFF, 0x5E55]).permutation(starts)
        return np.resize(order, max(count, 1))

    def _blocks(self, keys: list[tuple[int, int, int]], sizes: set[int],
                places: np.ndarray) -> dict[tuple[int, int, int], tuple[str, int]]:
        """Each key's text and measured length: a block cut at its place, moved to another word start (drawn
        from the seed and the key) while it does not measure its size alone."""
        b = self.builder
        chosen = {key: b.cut(int(place), key[2]) for key, place in zip(keys, places, strict=True)}
        spread = keys[:: max(1, len(keys) // _CHECKED_BLOCKS)]
        sample = [chosen[k] for k in spread]
        self.words_stand_alone = splits_at_words(b.tokenizer, sample)
        if self.words_stand_alone and all(n - b.specials == k[2]
                                          for k, n in zip(spread, b.measure(sample), strict=True)):
            # whole words, and a tokenizer that never merges across a space: each block is its size alone
            return {k: (chosen[k], k[2]) for k in keys}
        pending = list(keys)
        lengths: dict[tuple[int, int, int], int] = {}
        starts = {size: word_starts(b, size) for size in sizes}
        for attempt in range(_BLOCK_ATTEMPTS + 1):
            measured = b.measure([chosen[k] for k in pending])
            lengths.update((k, n - b.specials) for k, n in zip(pending, measured, strict=True))
            pending = [k for k in pending if lengths[k] != k[2]]
            if not pending or attempt == _BLOCK_ATTEMPTS:
                break
            for key in pending:
                rng = np.random.default_rng([self.seed & 0xFFFFFFFF, key[0], key[1] & 0xFFFFFFFFFFFF, attempt])
                pool = starts[key[2]]
                chosen[key] = b.cut(int(pool[rng.integers(len(pool))]), key[2])
        return {k: (chosen[k], lengths[k]) for k in keys}

    def _tails(self, tails: list[tuple[Session, Call]], places: np.ndarray) -> dict[tuple[str, int], tuple[str, int]]:
        """Each call's own tail of its exact length (fitted like any trace prompt)."""
        b = self.builder
        if not tails:
            return {}
        drafts = [(b.cut(int(place), self._tail_len(s, c)), (int(place) + self._tail_len(s, c)) % len(b.ids))
                  for (s, c), place in zip(tails, places, strict=True)]
        measured = b.measure([text for text, _ in drafts])
        out = {}
        for (s, c), (text, pos), length in zip(tails, drafts, measured, strict=True):
            want = self._tail_len(s, c)
            if length - b.specials != want:
                text, length = b.fit(text, want + b.specials, pos, length)
            out[(s.id, c.turn)] = (text, length - b.specials)
        return out

    def _check_lengths(self, sessions: list[AgentSession]) -> None:
        """With a tokenizer that splits at spaces, measure the longest whole prompt (a last check); otherwise, or
        when it does not measure the sum of its parts, measure every prompt."""
        agent, call = max(((a, c) for a in sessions for c in _calls(a.session)), key=lambda ac: ac[0].prompt_len(ac[1]))
        if self.words_stand_alone and token_len(self.builder.tokenizer, agent.prompt(call)) == agent.prompt_len(call):
            return
        for agent in sessions:
            calls = _calls(agent.session)
            for c, n in zip(calls, self.builder.measure([agent.prompt(c) for c in calls]), strict=True):
                agent.prompts[c.turn].prompt_len = n


def _calls(s: Session) -> list[Call]:
    return [c for chain in s.chains for c in chain.calls]


def splits_at_words(tokenizer: Tokenizer, texts: list[str]) -> bool:
    """Whether the tokenizer's pre-tokenizer starts a new piece at every space of ``texts`` (byte-level BPE's and
    SentencePiece's do): no token then spans two words, so whole-word blocks tokenize the same alone and side by
    side. False for a tokenizer without an inspectable pre-tokenizer (a slow one): then everything is measured."""
    pre = getattr(getattr(tokenizer, "backend_tokenizer", None), "pre_tokenizer", None)
    if pre is None:
        return False
    text = "".join(texts)
    try:
        starts = {start for _, (start, _end) in pre.pre_tokenize_str(text)}
    except Exception:  # an unexpected backend: measure
        return False
    return all(i in starts for i, ch in enumerate(text) if ch == " ")


def _scope(s: Session) -> int:
    """The first part of a block's identity (its trace, unless ids are global; then its id and its size)."""
    return 0 if s.hash_id_scope == "global" else zlib.crc32(s.id.encode()) + 1
