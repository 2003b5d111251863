"""What every dataset produces: prompts with their token lengths, ready to send."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from llmload.common.errors import DatasetError
from llmload.common.onread import OnReadByValue


@dataclass
class Turn:
    """One user turn of a conversation and the assistant reply the dataset recorded for it."""

    user: str
    """The user message."""
    user_len: int
    """Tokens of the user message alone (the workload's tokenizer, special tokens excluded)."""
    reply: str = ""
    """The recorded assistant reply ('' when the conversation ends on this user turn)."""
    reply_len: int = 0
    """Tokens of the recorded reply: this turn's ``max_tokens`` unless ``--output-len`` fixes it."""


@dataclass(slots=True)
class SampleRequest:
    """One request to send, built (and tokenized) before the test starts (slots: a run may hold millions, ~180
    bytes each instead of ~650 with a ``__dict__``)."""

    prompt: str
    """The text sent as the prompt (first user turn for ShareGPT)."""
    prompt_len: int
    """Prompt length in tokens of the workload's tokenizer."""
    expected_output_len: int
    """Tokens to ask for (``max_tokens``); the reference completion's length for ShareGPT."""
    conversation: list[dict[str, Any]] | None = None
    """All turns of the source conversation (``{"from", "value"}``), for multi-turn replay."""
    request_id: str = ""
    """The source row's id, when it has one."""
    arrival_s: float | None = None
    """Trace replay: the intended send offset in seconds, already time-scaled, relative to the first
    request of the window (which is at 0). ``None`` for datasets without timing."""
    turns: list[Turn] | None = None
    """Multi-turn replay: the conversation's user turns in order, after the sampling rules of
    docs/conversations.md (None: a single request). ``prompt`` is then the first turn's user message."""
    system: str = ""
    """Multi-turn replay: the system message sent first in every turn ('' for none)."""
    system_len: int = 0
    """Tokens of ``system``."""
    messages: list[dict[str, Any]] | None = None
    """Chat messages to send instead of ``prompt`` (one turn of a replayed conversation, with its history)."""
    #: Mooncake trace: the prompt tokens an unbounded prefix cache holds from the window's earlier requests,
    #: from the trace's ``hash_ids`` alone (None: not a KV-cache trace)
    trace_cached_tokens: int | None = None
    #: agentic session replay (``--dataset-name weka_trace``): the session, an
    #: :class:`~llmload.datasets.traces.weka_replay.AgentSession` (None: not a session)
    session: Any = None
    #: False: send this request without streaming (a trace's ``n`` call); None: the dialect's default
    stream: bool | None = None
    #: images sent with the prompt, as the URLs that go into the request: ``data:`` URLs (made or read here) or
    #: remote URLs passed through; chat dialects send them after the text of the user message (None: no image)
    images: list[str] | None = None
    #: a pooling request's texts (vLLM's list prompt): an embeddings batch (``--random-batch-size``), or a rerank's
    #: query followed by its documents (``random-rerank``); None: ``prompt`` alone
    inputs: list[str] | None = None


class SamplesOnRead(OnReadByValue[SampleRequest]):
    """A dataset's single requests, each made when it is read (:meth:`_made`), not held: a run of millions of
    requests keeps a few numbers a request (issue 37). Such samples are single requests (no turns, sessions or
    trace caches) with distinct ids, :meth:`request_id`, known without making them. Equal to a list holding
    the same requests."""

    def __len__(self) -> int:
        raise NotImplementedError

    def _made(self, i: int) -> SampleRequest:
        raise NotImplementedError

    def request_id(self, i: int) -> str:
        return self._made(i).request_id


class Tokenizer(Protocol):
    """The slice of a ``transformers`` tokenizer the datasets use."""

    vocab_size: int

    def __call__(self, text: str) -> Any: ...

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, token_ids: list[int]) -> str: ...

    def num_special_tokens_to_add(self) -> int: ...


def token_len(tokenizer: Tokenizer, text: str) -> int:
    """``len(tokenizer(text).input_ids)``: vLLM's count, special tokens (BOS) included."""
    return len(tokenizer(text).input_ids)


def jsonl_objects(path: Path, lines: Iterable[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """The non-blank lines of a JSONL file as ``(line number, object)``; errors name the file and line."""
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path}:{lineno}: column {exc.colno}: invalid JSON: {exc.msg}") from None
        if not isinstance(obj, dict):
            raise DatasetError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
        yield lineno, obj


@contextmanager
def reading(path: Path, what: str = "dataset") -> Iterator[None]:
    """One DatasetError line for each way reading a ``what`` file fails (missing, unreadable, not UTF-8)."""
    try:
        yield
    except FileNotFoundError:
        raise DatasetError(f"{what} file not found: {path}") from None
    except UnicodeDecodeError:
        raise DatasetError(f"{path}: not UTF-8 text") from None
    except OSError as exc:
        raise DatasetError(f"cannot read {what} file {path}: {exc.strerror or exc}") from None


def read_text(path: Path) -> str:
    """A dataset file's text (:func:`reading`'s errors)."""
    with reading(path):
        return path.read_text(encoding="utf-8")
