"""What :class:`llmload.metrics.MetricsAccumulator` keeps per set of requests (one set per user class): counters
(:class:`Tally`) and value columns (:class:`Values`), both filled one record at a time from the definitions in
:mod:`llmload.metrics.definitions`."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from llmload.client.failures import kind_of
from llmload.metrics.definitions import (
    GOODPUT_MISSING,
    METRICS,
    QUEUE_METRICS,
    SENT,
    input_tokens,
    meets_slo,
    server_input_tokens,
)
from llmload.metrics.histogram import LogHistogram
from llmload.metrics.spill import Chunked, SpillColumn

if TYPE_CHECKING:
    from llmload.metrics.request import MeasuredRequest

#: latency metrics taken from completed requests, one value each (aligned: NaN where it does not apply)
ALIGNED = (*(k for k, m in METRICS.items() if m.applies_to != SENT and not m.pooled), *QUEUE_METRICS)
#: every metric a column holds
_ALL = {**METRICS, **QUEUE_METRICS}
#: latency metrics taken from every request sent, where they exist
SENT_KEYS = tuple(k for k, m in METRICS.items() if m.applies_to == SENT)
#: :class:`Tally`'s plain counters (what :meth:`Tally.merged` adds up)
_COUNTS = ("records", "completed", "failed", "cut_off", "cancelled", "total_input", "total_input_server",
           "total_output", "server_reported", "prompt_mismatch", "prompt_diff", "structured_checked",
           "structured_valid", "tool_calls", "tool_call_answers", "pooling_records", "images", "image_bytes",
           "input_sequences", "sends", "send_total")


#: a float column grown in chunks, on disk past a size (:mod:`llmload.metrics.spill`)
Column = SpillColumn


class Pool:
    """Pooled values (ITLs): exact, until :meth:`to_histogram` trades them for a :class:`LogHistogram`."""

    def __init__(self) -> None:
        self.exact: Column | None = Column()
        self.hist: LogHistogram | None = None

    @property
    def size(self) -> int:
        return self.exact.size if self.exact is not None else 0

    def extend(self, values: np.ndarray) -> None:
        if self.exact is not None:
            self.exact.extend(values)
        else:
            assert self.hist is not None
            self.hist.add(values)

    def to_histogram(self) -> None:
        if self.exact is not None:
            self.hist, self.exact = LogHistogram.of(self.exact.array()), None


class Tally:
    """Counters over one set of requests: outcomes, tokens, where counts came from, failures by kind."""

    def __init__(self) -> None:
        self.records = self.completed = self.failed = self.cut_off = self.cancelled = 0
        self.total_input = self.total_input_server = self.total_output = 0
        self.server_reported = self.prompt_mismatch = self.prompt_diff = 0
        #: completed requests whose answer was checked against a response format, and those found valid
        self.structured_checked = self.structured_valid = 0
        #: tool calls in completed answers (``--tools``), and the answers that made at least one
        self.tool_calls = self.tool_call_answers = 0
        #: requests sent to a pooling endpoint (every outcome); images, their URL bytes and the pooling inputs of
        #: completed requests; completed requests whose send was timed, their send seconds summed, the longest
        self.pooling_records = self.images = self.image_bytes = self.input_sequences = 0
        self.sends = 0
        self.send_total = self.send_max = 0.0
        self.sources: Counter[str] = Counter()
        self.failures: Counter[str] = Counter()
        self.examples: dict[str, str] = {}

    def add(self, r: MeasuredRequest, completed: bool) -> None:
        self.records += 1
        sequences = getattr(r, "input_sequences", 0)
        self.pooling_records += sequences > 0
        if not completed:
            if r.cut_off:
                self.cut_off += 1
            elif getattr(r, "cancelled", False):
                self.cancelled += 1  # its own outcome, not a failure kind (--cancel-rate)
                return
            else:
                self.failed += 1
            kind = kind_of(r)
            self.failures[kind] += 1
            self.examples.setdefault(kind, r.error)
            return
        self.completed += 1
        self.total_output += r.output_tokens
        self.total_input += input_tokens(r)
        server = server_input_tokens(r)
        self.total_input_server += server
        self.server_reported += r.server_prompt_tokens is not None
        if server != r.prompt_len:
            self.prompt_mismatch += 1
            self.prompt_diff += server - r.prompt_len
        self.sources[r.output_tokens_source] += 1
        self.input_sequences += sequences
        if images := getattr(r, "images", 0):
            self.images += images
            self.image_bytes += r.image_bytes  # type: ignore[attr-defined]
        if (send := getattr(r, "send_s", None)) is not None:
            self.sends += 1
            self.send_total += send
            self.send_max = max(self.send_max, send)
        calls = getattr(r, "tool_calls", 0)
        if calls:
            self.tool_calls += calls
            self.tool_call_answers += 1
        verdict = getattr(r, "structured_output_valid", None)
        if verdict is not None:
            self.structured_checked += 1
            self.structured_valid += bool(verdict)

    @classmethod
    def merged(cls, tallies: Iterable[Tally]) -> Tally:
        """One tally over the requests of several (a class's requests across its models, say)."""
        out = cls()
        for t in tallies:
            for name in _COUNTS:
                setattr(out, name, getattr(out, name) + getattr(t, name))
            out.send_max = max(out.send_max, t.send_max)
            out.sources.update(t.sources)
            out.failures.update(t.failures)
            for kind, message in t.examples.items():
                out.examples.setdefault(kind, message)
        return out

    def failure_counts(self) -> tuple[dict[str, int], dict[str, str]]:
        """``(count per kind, first message per kind)``, most frequent first (ties by name)."""
        order = sorted(self.failures, key=lambda k: (-self.failures[k], k))
        return {k: self.failures[k] for k in order}, {k: self.examples[k] for k in order}


class Values:
    """The latency values of one set of requests, in seconds, in the order the records came."""

    def __init__(self) -> None:
        self.aligned = {k: Column() for k in ALIGNED}
        self.sent = {k: Column() for k in SENT_KEYS}
        self.itl = Pool()

    def add(self, r: MeasuredRequest, completed: bool, gaps: np.ndarray | None = None) -> None:
        """Take one record; ``gaps``: its ITLs when the caller has them already."""
        for key, column in self.sent.items():
            if (value := METRICS[key].value(r)) is not None:
                column.append(value)
        if not completed:
            return
        for key, column in self.aligned.items():
            value = _ALL[key].value(r)
            column.append(math.nan if value is None else float(value))
        if len(r.chunk_times) > 1:
            self.itl.extend(METRICS["itl"].value(r) if gaps is None else gaps)

    def good(self, slos_ms: Mapping[str, float]) -> int:
        """Completed requests meeting every SLO: :func:`~llmload.metrics.definitions.is_good` over the columns
        at once (NaN, a missing value, takes :data:`GOODPUT_MISSING`'s stand-in or fails)."""
        if not slos_ms:
            return self.aligned["ttft"].size
        names = list(slos_ms)
        total = 0
        # the columns line up row for row, chunk for chunk (each holds one value per completed request)
        for chunks in zip(*(self.aligned[name].chunks() for name in names), strict=True):
            good = np.ones(chunks[0].size, dtype=bool)
            for name, values in zip(names, chunks, strict=True):
                if name in GOODPUT_MISSING:
                    values = np.nan_to_num(values, nan=GOODPUT_MISSING[name])
                with np.errstate(invalid="ignore"):
                    good &= meets_slo(values, slos_ms[name])
            total += int(good.sum())
        return total


def joined(columns: Sequence[Column], *, finite: bool = False) -> np.ndarray | Chunked:
    """The columns' values one after the other (NaN left out with ``finite``); no copy for a single column.
    Once a column spilled to disk, a :class:`Chunked` source that reads them a chunk at a time."""
    if any(c.spilled for c in columns):
        return Chunked(columns, finite=finite)
    arrays = [c.array() for c in columns]
    arr = arrays[0] if len(arrays) == 1 else (np.concatenate(arrays) if arrays else np.zeros(0))
    return arr[~np.isnan(arr)] if finite else arr
