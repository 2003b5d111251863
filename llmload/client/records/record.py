"""One finished request, as measured by the client.

All times are ``time.perf_counter()`` seconds on the measuring process (CLOCK_MONOTONIC on Linux, so
comparable with the simulator's trace on the same host). Metrics are computed from these raw values
(see ``llmload.metrics``), never from Locust's rounded histograms; the latency properties below are the
definitions of :mod:`llmload.metrics.definitions`.

Records files written before a field existed stay readable: :meth:`RequestRecord.from_dict` gives a missing
key its default (``user_class`` ``""``) and ignores keys it does not know.
"""

from __future__ import annotations

import base64
import sys
from array import array
from collections.abc import Iterator, MutableSequence, Sequence
from dataclasses import MISSING, dataclass, field, fields
from itertools import repeat
from typing import Any, cast, overload

from llmload.metrics import definitions as _metric


class UnitCounts(Sequence[int]):
    """``n`` ones in a few bytes: the token counts of a stream whose every event carried one token (most do).
    Reads as the list of ones it stands for (``len``, indexing, iteration, ``sum``, ``==``)."""

    __slots__ = ("_n",)

    def __init__(self, n: int) -> None:
        self._n = n

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> list[int]: ...
    def __getitem__(self, index: int | slice) -> int | list[int]:
        if isinstance(index, slice):
            return [1] * len(range(*index.indices(self._n)))
        if not -self._n <= index < self._n:
            raise IndexError("UnitCounts index out of range")
        return 1

    def __iter__(self) -> Iterator[int]:
        return repeat(1, self._n)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, UnitCounts):
            return other._n == self._n
        return isinstance(other, Sequence) and len(other) == self._n and all(x == 1 for x in other)

    def __hash__(self) -> int:
        return hash(("UnitCounts", self._n))

    def __repr__(self) -> str:
        return f"UnitCounts({self._n})"


#: streams shorter than this keep a plain float64 array (the packed form's fixed cost is ~110 bytes)
PACK_MIN_TIMES = 32
#: bytes a packed step may take: the fewest that hold a record's largest step (a float64 takes 8)
PACK_WIDTHS = (4, 5, 6)


class PackedTimes(Sequence[float]):
    """Non-decreasing positive float64 times in 4 to 6 bytes each, exactly: the first time's IEEE-754 bit
    pattern and each next time's distance from the one before it in units in the last place, in the fewest
    bytes that hold the largest. Positive doubles order like their bit patterns read as integers, so adding the
    steps back up gives every time bit for bit. A unit in the last place grows with the clock's value (the
    machine's uptime, for ``perf_counter``): 10 ms steps take 4 bytes after ~1.5 days, 5 before
    (docs/performance.md, "master memory"). Reads as the list of floats it stands for (``len``, indexing,
    slicing, iteration, ``==``, numpy through ``__array__``)."""

    __slots__ = ("_first", "_steps", "_width")

    def __init__(self, first: int, steps: bytes, width: int) -> None:
        self._first = first
        self._steps = steps
        self._width = width

    @classmethod
    def pack(cls, times: Sequence[float]) -> PackedTimes | None:
        """The packed form of ``times``, or None when it cannot hold them exactly or would not save memory (too
        few, not all positive and finite, decreasing, or a step wider than 6 bytes)."""
        import numpy as np

        if len(times) < PACK_MIN_TIMES:
            return None
        values = np.asarray(times, dtype=np.float64)
        if not (np.isfinite(values).all() and values[0] > 0):
            return None
        bits = values.view(np.int64)
        steps = np.diff(bits)
        if steps.min() < 0:
            return None
        largest = int(steps.max())
        width = next((w for w in PACK_WIDTHS if largest < 1 << (8 * w)), 0)
        if not width:
            return None
        held = steps.astype("<u8").view(np.uint8).reshape(-1, 8)[:, :width].tobytes()
        return cls(int(bits[0]), held, width)

    def to_text(self) -> str:
        """The form a records journal writes (``"W:BASE64"``: the step width, then the first time's 8 bytes and
        the steps), ~6-7 characters a time instead of ~19 as JSON numbers; :meth:`from_text` reads it back."""
        head = self._first.to_bytes(8, "little", signed=True)
        return f"{self._width}:{base64.b64encode(head + self._steps).decode('ascii')}"

    @classmethod
    def from_text(cls, text: str) -> PackedTimes:
        width, _, data = text.partition(":")
        raw = base64.b64decode(data)
        return cls(int.from_bytes(raw[:8], "little", signed=True), raw[8:], int(width))

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        import numpy as np

        n = len(self)
        wide = np.zeros((n, 8), dtype=np.uint8)
        wide[1:, : self._width] = np.frombuffer(self._steps, dtype=np.uint8).reshape(-1, self._width)
        bits = wide.view("<i8").reshape(n)
        bits[0] = self._first
        values = np.cumsum(bits, out=bits).view(np.float64)
        return values if dtype is None else values.astype(dtype, copy=False)

    def __len__(self) -> int:
        return len(self._steps) // self._width + 1

    @overload
    def __getitem__(self, index: int) -> float: ...
    @overload
    def __getitem__(self, index: slice) -> list[float]: ...
    def __getitem__(self, index: int | slice) -> float | list[float]:
        if isinstance(index, slice):
            return self.__array__()[index].tolist()
        n = len(self)
        if not -n <= index < n:
            raise IndexError("PackedTimes index out of range")
        return float(self.__array__()[index])

    def __iter__(self) -> Iterator[float]:
        return iter(self.__array__().tolist())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and len(other) == len(self) and list(self) == list(other)

    def __hash__(self) -> int:
        return hash(("PackedTimes", self._first, self._steps))

    def __repr__(self) -> str:
        return f"PackedTimes({list(self)!r})"

class HeldText:
    """Where a record's generated text is when its keeper moved it out of memory: ``length`` bytes of a JSON
    string at ``offset`` of a :class:`~llmload.client.records.journal.RecordJournal`."""

    __slots__ = ("journal", "length", "offset")

    def __init__(self, journal: Any, offset: int, length: int) -> None:
        self.journal = journal
        self.offset = offset
        self.length = length

    def read(self) -> str:
        text: str = self.journal.read_text(self.offset, self.length)
        return text


@dataclass(slots=True)
class RequestRecord:
    """Everything measured about one request; the unit shipped from workers to the master."""

    request_id: str = ""
    backend: str = ""
    #: prompt length from the dataset (tokenized before the run)
    prompt_len: int = 0
    #: output length asked for (``max_tokens``)
    expected_output_len: int = 0
    #: open loop: when the schedule wanted this request sent; None in closed loop
    intended_send: float | None = None
    #: open loop: when the dispatcher released the request (``dispatched_at - intended_send`` = schedule lag)
    dispatched_at: float | None = None
    #: ``st``: immediately before the request was sent, after any concurrency slot was acquired
    start: float = 0.0
    #: arrival of the first event that counts as the first token (per ``ttft_rule``)
    first_token: float | None = None
    #: arrival of every counted event, first one included; ``chunk_times[-1]`` is the end of E2EL
    #: (an ``array("d")`` once :meth:`compact`-ed, as every record a run keeps is)
    chunk_times: MutableSequence[float] = field(default_factory=list)
    #: tokens carried by each counted event, when the wire says (else 1 each)
    chunk_tokens: MutableSequence[int] = field(default_factory=list)
    #: final output token count (see ``output_tokens_source``)
    output_tokens: int = 0
    #: "usage" (server usage), "tokenizer" (re-tokenized text) or "chunks" (one per event)
    output_tokens_source: str = "chunks"
    #: ``usage.prompt_tokens`` when the server reported it
    server_prompt_tokens: int | None = None
    generated_text: str = ""
    success: bool = False
    #: one line; empty when successful
    error: str = ""
    #: one of :data:`llmload.client.failures.KINDS` (``http_5xx``, ``disconnect``, ``cut_off``...); empty when successful
    failure_kind: str = ""
    status_code: int = 0
    #: set when the run ended while the request was in flight
    cut_off: bool = False
    #: which load process measured it (for distributed runs)
    worker: str = ""
    #: multi-turn replay (docs/conversations.md): the conversation's id ('' for a single request), this
    #: request's turn (1-based; 0 for a single request) and how many turns the conversation has in the workload
    conversation_id: str = ""
    turn: int = 0
    conversation_turns: int = 0
    #: on a conversation's last record: how it ended ("completed", "failed", "context_cap", "cut_off", "stopped")
    conversation_end: str = ""
    #: ``--response-format``: whether the completed answer parsed as JSON and matched the schema (None: not
    #: checked: no response format asked for, or the request did not complete), and why not, in one short line
    structured_output_valid: bool | None = None
    structured_output_error: str = ""
    #: ``usage.prompt_tokens_details.cached_tokens`` when the server reported it (a prefix-cache hit)
    cached_tokens: int | None = None
    #: arrival of the first event with answer text (reasoning excluded); None when no answer text arrived
    first_answer_token: float | None = None
    #: reasoning tokens streamed before/with the answer (``reasoning_content`` deltas), and their text
    reasoning_tokens: int = 0
    reasoning_text: str = ""
    #: the workload this request belongs to (the Locust user class's name); ``by_class`` metrics need two
    user_class: str = ""
    #: the client cancelled it on purpose (``--cancel-rate``): its own outcome, neither completed nor failed
    cancelled: bool = False
    #: the model (or LoRA adapter) the request named (``--model a,b``, ``--lora-modules``)
    model: str = ""
    #: agentic session replay (docs/agentic.md): the agent that made the call ('' for the main chain, else its
    #: agent id) and its kind ("main", or the sub-agent's type); '' for requests outside a session
    agent: str = ""
    agent_type: str = ""
    #: a request that carried ``tools`` (``--tools``): the tool calls in its answer, and the calls themselves
    #: (``{"id", "type", "function": {"name", "arguments"}}``, for a replayed conversation's tool messages)
    tool_calls: int = 0
    tool_call_items: list[dict[str, Any]] | None = None
    #: multi-turn replay with tools: 0 for a turn's first request, k for the k-th request after tool results
    tool_round: int = 0
    #: a KV-cache trace's own reuse for this request (Mooncake, agentic sessions): the prompt tokens a prefix cache
    #: that never evicts could serve it, from the trace's hash ids alone (None: not such a trace)
    trace_cached_tokens: int | None = None
    #: images the request carried, and the bytes of their URLs in the body (a ``data:`` URL's base64 text)
    images: int = 0
    image_bytes: int = 0
    #: a pooling request's input sequences: an embeddings batch's prompts, a rerank's documents (0: generation)
    input_sequences: int = 0
    #: requests with images or pooling inputs: seconds from the first byte of the request to the last going out
    #: (None: not timed, or the request failed before it was sent)
    send_s: float | None = None
    #: set when the records journal holds the generated text instead of ``generated_text`` (not a column of the
    #: records file: :meth:`to_dict` writes the text itself)
    held_text: HeldText | None = field(default=None, repr=False, compare=False)
    #: the request's place in the run's schedule (a conversation's turns share it), as the sender knew it: what a
    #: master files the record under without a table of request ids (not a column of the records file; None:
    #: not a scheduled request)
    schedule_index: int | None = field(default=None, repr=False, compare=False)

    def text(self) -> str:
        """The generated text, read back from the records journal when it was moved there."""
        return self.generated_text if self.held_text is None else self.held_text.read()

    @property
    def end(self) -> float | None:
        """Arrival of the last counted event (the end of E2EL); None when none arrived."""
        return self.chunk_times[-1] if len(self.chunk_times) else None

    ttft = property(_metric.ttft_s)
    e2el = property(_metric.e2el_s)
    itls = property(_metric.itls_s)
    tpot = property(_metric.tpot_s)
    schedule_lag = property(_metric.schedule_lag_s)
    queue_time = property(_metric.queue_time_s)

    def compact(self) -> None:
        """Hold the chunk times and token counts compactly instead of ~32 and 8 bytes an item in a list: times as
        :class:`PackedTimes` (4-6 bytes each, exact) or else a float64 array, counts as an int32 array, or as
        :class:`UnitCounts` when all are ones (most streams). A run keeps every record until its metrics are
        computed; this makes a kept record ~3x smaller (docs/reliability.md, "Soak").
        Everything that reads them (indexing, ``len``, iteration, numpy) is unchanged; compact only a finished
        record (an array or ``UnitCounts`` takes no more chunks). The labels a run repeats on every record
        (backend, worker, class, how the output was counted) become one shared string each, not one per
        record as they come off the wire."""
        for name in _LABELS:
            setattr(self, name, sys.intern(getattr(self, name)))
        if not isinstance(self.chunk_times, array | PackedTimes):
            packed = PackedTimes.pack(self.chunk_times)
            # 4 to 6 bytes a time where they can be held exactly so (docs/performance.md, master memory)
            self.chunk_times = cast(MutableSequence[float], packed) if packed is not None else array(
                "d", self.chunk_times)
        if isinstance(self.chunk_tokens, UnitCounts):
            return
        if not isinstance(self.chunk_tokens, array):
            self.chunk_tokens = array("i", self.chunk_tokens)
        if self.chunk_tokens and self.chunk_tokens.count(1) == len(self.chunk_tokens):
            # one token per event: 4 bytes an event saved (docs/performance.md, master memory)
            self.chunk_tokens = cast(MutableSequence[int], UnitCounts(len(self.chunk_tokens)))

    def to_dict(self, compact: bool = False) -> dict[str, Any]:
        """Plain JSON-ready values (lists, not arrays), copied: safe to ship or write while the record lives on.
        ``compact`` (the records journal): packed chunk times as ``{"packed": PackedTimes.to_text()}``, token
        counts of one a chunk as ``{"ones": n}``, and no field that holds its default, which :meth:`from_dict`
        reads back (a 16-token record's line: ~1.2 KB -> ~0.6 KB)."""
        if compact:
            out = {f.name: v for f in _FIELDS
                   if (v := getattr(self, f.name)) != _DEFAULTS.get(f.name, _KEEP) or type(v) is not type(
                       _DEFAULTS[f.name])}
        else:
            out = {f.name: getattr(self, f.name) for f in _FIELDS}
        times, counts = self.chunk_times, self.chunk_tokens
        out["chunk_times"] = {"packed": times.to_text()} if compact and isinstance(times, PackedTimes) else list(times)
        out["chunk_tokens"] = {"ones": len(counts)} if compact and isinstance(counts, UnitCounts) else list(counts)
        if not compact and isinstance(out["chunk_times"], list):  # derived (the last event), for the file's readers
            out["end"] = out["chunk_times"][-1] if out["chunk_times"] else None
        if self.held_text is not None:
            out["generated_text"] = self.held_text.read()
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        """The record :meth:`to_dict` wrote (compact or not); keys it lacks take their defaults, unknown keys are
        ignored."""
        record = cls(**{k: v for k, v in data.items() if k in _NAMES})
        if isinstance(record.chunk_times, dict):
            record.chunk_times = cast(MutableSequence[float], PackedTimes.from_text(record.chunk_times["packed"]))
        if isinstance(record.chunk_tokens, dict):
            record.chunk_tokens = cast(MutableSequence[int], UnitCounts(int(record.chunk_tokens["ones"])))
        return record


#: the fields a record file holds (every one but where a text is held and the schedule index)
_FIELDS = tuple(f for f in fields(RequestRecord) if f.name not in ("held_text", "schedule_index"))
_NAMES = frozenset(f.name for f in _FIELDS)
#: a field never equal to this is always written
_KEEP = object()
#: the defaults a compact line leaves out (the text, times and counts are always written: the journal reads them)
_DEFAULTS: dict[str, Any] = {f.name: f.default for f in _FIELDS
                             if f.default is not MISSING and f.name not in ("generated_text",)}
#: string fields with a few values per run, shared by :meth:`RequestRecord.compact`
_LABELS = ("backend", "output_tokens_source", "failure_kind", "worker", "user_class", "conversation_end", "model",
           "agent", "agent_type")
