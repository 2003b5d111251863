"""Whole ShareGPT conversations for multi-turn replay (``--dataset-name sharegpt --multi-turn``).

Selection: the same conversations as first-turn sampling. :func:`~llmload.datasets.sharegpt.select_sharegpt`
applies vLLM's rules to the raw (turn 0, turn 1) pair (shuffle with ``random.Random(seed)``, then the
length filters), and each conversation it keeps is expanded into turns. The only difference: a
conversation left without a user turn by the rules below is skipped and the next one taken.

Normalisation of a selected conversation, in this order:

1. roles: ``human``/``user`` -> user; ``gpt``/``assistant``/``chatgpt``/``bard``/``model`` -> assistant;
   ``system`` -> system (case-insensitive); any other role, or none, drops the message;
2. messages whose text is empty or whitespace only are dropped;
3. system messages before the first user message become the system message (several: joined with a
   blank line); a system message after it is dropped (chat templates want the system message first,
   and moving it there would change what the earlier turns saw);
4. assistant messages before the first user message are dropped;
5. consecutive messages of the same role are merged, joined with ``"\\n\\n"``;
6. the user/assistant pairs become turns; a final user message without a reply is dropped, unless it is
   the only user message: the conversation is then one turn with reply ``""`` and ``reply_len`` 0, and
   its ``expected_output_len`` is the output length the selection measured (turn 1's, as first-turn
   sampling asks for) or ``fixed_output_len``;
7. ``max_turns`` keeps the first N turns.

Texts are kept byte for byte. Lengths: ``prompt_len`` (the first user message) is ``token_len``, vLLM's
count with special tokens, as first-turn sampling reports it; every other length (``user_len``,
``reply_len``, ``system_len``) is ``len(tokenizer.encode(text, add_special_tokens=False))``: a
message's own tokens, without the BOS the request adds once. ``expected_output_len`` is the first
turn's ``reply_len``, or ``fixed_output_len``. Only the first turn passes vLLM's length filters; later
turns are not filtered.

``system_prompt_len`` N > 0 puts a shared system prompt of N tokens in front of every conversation's
system message (joined with a blank line): random token ids from one ``numpy.random.RandomState(seed)``
(special tokens excluded), decoded and re-encoded until they re-encode to N tokens (usually exactly N,
within 1-2 when a tokenizer does not settle in 10 rounds). The same text for every conversation: the
prefix a prefix cache can reuse.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from llmload.common.errors import DatasetError
from llmload.datasets.base import SampleRequest, Tokenizer, Turn, token_len
from llmload.datasets.prefix_repetition import ids_of_length
from llmload.datasets.sharegpt import Selected, check_fixed_output_len, request_id, select_sharegpt

USER, ASSISTANT, SYSTEM = "user", "assistant", "system"
ROLES = {
    "human": USER,
    "user": USER,
    "gpt": ASSISTANT,
    "assistant": ASSISTANT,
    "chatgpt": ASSISTANT,
    "bard": ASSISTANT,
    "model": ASSISTANT,
    "system": SYSTEM,
}
"""ShareGPT's role names (``from``) and what each is in a chat request; other names are dropped."""
JOIN = "\n\n"
"""What merged messages (and the shared and the dataset system prompt) are joined with."""


def _messages(path: Path, index: int, entry: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """``(role, text)`` of the entry's messages with a known role and some text (rules 1-2)."""
    for turn, message in enumerate(entry["conversations"]):
        value = message.get("value") if isinstance(message, dict) else None
        if not isinstance(value, str):
            raise DatasetError(f"{path}: entry {index} turn {turn} has no string 'value'")
        role = ROLES.get(str(message.get("from", "")).strip().lower())
        if role is not None and value.strip():
            yield role, value


def normalise(messages: Iterable[tuple[str, str]]) -> tuple[str, list[tuple[str, str]]]:
    """The system message and the ``(user, reply)`` exchanges (rules 3-6 of the module docstring)."""
    system: list[str] = []
    merged: list[tuple[str, str]] = []
    for role, text in messages:
        if role == SYSTEM:
            if not merged:
                system.append(text)
        elif role == USER or merged:
            if merged and merged[-1][0] == role:
                merged[-1] = (role, merged[-1][1] + JOIN + text)
            else:
                merged.append((role, text))
    exchanges = [
        (text, merged[i + 1][1] if i + 1 < len(merged) else "")
        for i, (role, text) in enumerate(merged)
        if role == USER
    ]
    if len(exchanges) > 1 and not exchanges[-1][1]:
        exchanges.pop()
    return JOIN.join(system), exchanges


def shared_system_prompt(tokenizer: Tokenizer, length: int, seed: int) -> str:
    """``length`` tokens of random text, the same for one seed and tokenizer (``--system-prompt-len``)."""
    if length <= 0:
        return ""
    rng = np.random.RandomState(seed)
    special = set(getattr(tokenizer, "all_special_ids", None) or ())
    allowed = np.array([t for t in range(int(tokenizer.vocab_size)) if t not in special])

    def draw(k: int) -> list[int]:
        return allowed[rng.randint(0, len(allowed), size=k)].tolist()

    return tokenizer.decode(ids_of_length(tokenizer, length, draw))


def _count(tokenizer: Tokenizer, text: str) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False)) if text else 0


def _expand(
    path: Path,
    chosen: Selected,
    tokenizer: Tokenizer,
    shared: str,
    max_turns: int | None,
    fixed_output_len: int | None,
) -> SampleRequest | None:
    """The selected conversation as a multi-turn sample; ``None`` when no user turn is left."""
    system, exchanges = normalise(_messages(path, chosen.index, chosen.entry))
    if not exchanges:
        return None
    turns = [
        Turn(user=u, user_len=_count(tokenizer, u), reply=r, reply_len=_count(tokenizer, r))
        for u, r in exchanges[:max_turns]
    ]
    system = JOIN.join(part for part in (shared, system) if part)
    if fixed_output_len is not None:
        expected = fixed_output_len
    else:
        expected = turns[0].reply_len if turns[0].reply else chosen.output_len
    return SampleRequest(
        prompt=turns[0].user,
        prompt_len=token_len(tokenizer, turns[0].user),
        expected_output_len=expected,
        conversation=chosen.entry["conversations"],
        request_id=request_id(chosen),
        turns=turns,
        system=system,
        system_len=_count(tokenizer, system),
    )


def sample_conversations(
    path: str | Path,
    tokenizer: Tokenizer,
    num_prompts: int,
    seed: int = 0,
    *,
    max_turns: int | None = None,
    fixed_output_len: int | None = None,
    system_prompt_len: int = 0,
) -> list[SampleRequest]:
    """Up to ``num_prompts`` whole conversations: first-turn sampling's choice, expanded into turns."""
    check_fixed_output_len(fixed_output_len)
    if max_turns is not None and max_turns < 1:
        raise DatasetError(f"--max-turns must be at least 1, got {max_turns}")
    if system_prompt_len < 0:
        raise DatasetError(f"--system-prompt-len must be >= 0, got {system_prompt_len}")
    path = Path(path)
    selected = select_sharegpt(path, tokenizer, seed, fixed_output_len=fixed_output_len)
    shared = shared_system_prompt(tokenizer, system_prompt_len, seed)
    out: list[SampleRequest] = []
    seen = 0
    while len(out) != num_prompts:
        chosen = next(selected, None)
        if chosen is None:
            break
        seen += 1
        sample = _expand(path, chosen, tokenizer, shared, max_turns, fixed_output_len)
        if sample is not None:
            out.append(sample)
    if not out and num_prompts > 0:
        if not seen:
            raise DatasetError(f"{path}: no conversation passes the ShareGPT length filters")
        raise DatasetError(
            f"{path}: no conversation that passes the ShareGPT length filters has a user turn "
            "(roles human/user; see docs/conversations.md)"
        )
    return out
