"""Trace replay: arrival times and token sizes from a production trace, prompts built to size.

    sample_trace(path, tokenizer, num_prompts=None, seed=0, *, trace_format=None, time_scale=1.0,
                 trace_start=0.0, trace_duration=None, prompt_path=None) -> list[SampleRequest]

Formats, detected from the first line (or forced with ``trace_format``):

``azure``     Azure LLM inference trace CSV, ``TIMESTAMP,ContextTokens,GeneratedTokens``; timestamps are
              ISO-8601 date-times (``2023-11-16 18:15:46.6805900``, 7 fractional digits; a UTC offset is
              allowed, naive ones are taken as UTC).
``burstgpt``  BurstGPT CSV, ``Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type``;
              timestamps in seconds. Failed requests (``Response tokens`` 0) are **kept**: they arrived and
              loaded the server like any other; they ask for 1 output token.
``jsonl``     one object per line, ``{"t": seconds, "input_tokens": n, "output_tokens": m}`` or
              ``{"t": seconds, "prompt": "...", "output_tokens": m}`` (the prompt is sent as is).

Timing: rows are ordered by time (stable). The window is ``[first + trace_start, first + trace_start +
trace_duration)`` in original trace seconds, where ``first`` is the file's earliest timestamp. Each kept
row's ``arrival_s`` is ``(t - t_window_first) / time_scale``: the first request of the window is sent at
0, and ``time_scale`` 2 replays twice as fast. ``num_prompts`` keeps the first N rows of the window.

Sizes: ``expected_output_len`` is the trace's output tokens (at least 1), meant to be forced with
``max_tokens`` + ``ignore_eos``. A prompt of ``n`` tokens is text whose ``len(tokenizer(text).input_ids)``
is exactly ``n`` (special tokens such as BOS counted, as :func:`~llmload.datasets.base.token_len` does).
It is cut from a token pool built once per call and deterministic per seed: random vocabulary words
(default) or, with ``prompt_path``, the turns of a ShareGPT file (each prompt starts at a turn and runs
on into the next ones: trimmed or padded). Each prompt starts at its own random place in the pool, so
prompts do not share prefixes by construction. A slice that does not re-tokenize to its length is
trimmed or extended until it does. Sizes below the tokenizer's special tokens + 1 get one content token
(``prompt_len`` says so).

Every problem with the file is one :class:`~llmload.errors.DatasetError` naming the file, line and column.
"""

from __future__ import annotations

import csv
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from llmload.choices import TRACE_FORMATS
from llmload.datasets.base import SampleRequest, Tokenizer, jsonl_objects, token_len
from llmload.errors import ConfigError, DatasetError

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")
"""The BurstGPT columns we read; ``Model``, ``Total tokens`` and ``Log Type`` may be present too."""

MIN_POOL_TOKENS = 16384
"""The smallest token pool; it is also at least twice the longest prompt, so starts vary widely."""

_FIT_ATTEMPTS = 12


@dataclass
class TraceRow:
    """One request of a trace, before prompts are built."""

    t: float
    """Seconds on the trace's own clock (any origin)."""
    input_tokens: int
    """Prompt tokens; ignored when ``prompt`` is set."""
    output_tokens: int
    """Output tokens the trace recorded."""
    line: int
    """1-based line in the file, for ids and messages."""
    prompt: str | None = None
    """Prompt text given by the trace (JSONL only)."""


# ---------------------------------------------------------------------------------------------- reading


def detect_format(path: str | Path) -> str:
    """``azure``, ``burstgpt`` or ``jsonl`` from the file's first non-blank line."""
    path = Path(path)
    first = _first_line(path)
    if first.lstrip().startswith("{"):
        return "jsonl"
    header = [c.strip().lstrip("\ufeff") for c in next(csv.reader([first]))]
    if all(c in header for c in AZURE_COLUMNS):
        return "azure"
    if all(c in header for c in BURSTGPT_COLUMNS):
        return "burstgpt"
    raise DatasetError(
        f"{path}:1: unknown trace format (header {first.strip()[:80]!r}); expected Azure "
        f"({','.join(AZURE_COLUMNS)}), BurstGPT ({','.join(BURSTGPT_COLUMNS)}) or JSONL with 't': "
        "pass --trace-format"
    )


def read_trace(path: str | Path, trace_format: str | None = None) -> list[TraceRow]:
    """All rows of a trace file, ordered by time (stable), validated."""
    path = Path(path)
    if trace_format is None:
        trace_format = detect_format(path)
    if trace_format not in TRACE_FORMATS:
        raise ConfigError(f"--trace-format must be one of {', '.join(TRACE_FORMATS)}, got {trace_format!r}")
    rows = _read_jsonl(path) if trace_format == "jsonl" else _read_csv(path, trace_format)
    if not rows:
        raise DatasetError(f"{path}: the trace has no requests")
    rows.sort(key=lambda r: r.t)
    return rows


def _first_line(path: Path) -> str:
    try:
        with path.open(encoding="utf-8-sig") as f:
            for line in f:
                if line.strip():
                    return line
    except FileNotFoundError:
        raise DatasetError(f"trace file not found: {path}") from None
    except UnicodeDecodeError:
        raise DatasetError(f"{path}: not UTF-8 text") from None
    except OSError as exc:
        raise DatasetError(f"cannot read trace file {path}: {exc.strerror or exc}") from None
    raise DatasetError(f"{path}: the trace file is empty")


def _read_text_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8-sig").splitlines()
    except FileNotFoundError:
        raise DatasetError(f"trace file not found: {path}") from None
    except UnicodeDecodeError:
        raise DatasetError(f"{path}: not UTF-8 text") from None
    except OSError as exc:
        raise DatasetError(f"cannot read trace file {path}: {exc.strerror or exc}") from None


def _read_csv(path: Path, trace_format: str) -> list[TraceRow]:
    wanted = AZURE_COLUMNS if trace_format == "azure" else BURSTGPT_COLUMNS
    lines = _read_text_lines(path)
    reader = csv.reader(lines)
    header: list[str] | None = None
    columns: list[list[str]] = [[], [], []]
    linenos: list[int] = []
    for fields in reader:
        lineno = reader.line_num
        if not fields or all(not f.strip() for f in fields):
            continue
        if header is None:
            header = [f.strip() for f in fields]
            missing = [c for c in wanted if c not in header]
            if missing:
                raise DatasetError(
                    f"{path}:{lineno}: the {trace_format} trace header lacks column(s) "
                    f"{', '.join(missing)} (header: {','.join(header)[:80]})"
                )
            index = [header.index(c) for c in wanted]
            continue
        if len(fields) != len(header):
            raise DatasetError(f"{path}:{lineno}: expected {len(header)} fields, got {len(fields)}")
        for col, i in zip(columns, index, strict=True):
            col.append(fields[i].strip())
        linenos.append(lineno)
    if header is None:
        raise DatasetError(f"{path}: the trace file is empty")
    line_arr = np.asarray(linenos, dtype=np.int64)
    if trace_format == "azure":
        times = _parse_datetimes(path, columns[0], line_arr, wanted[0])
    else:
        times = _parse_numbers(path, columns[0], line_arr, wanted[0], integer=False)
    inputs = _parse_numbers(path, columns[1], line_arr, wanted[1], integer=True)
    outputs = _parse_numbers(path, columns[2], line_arr, wanted[2], integer=True)
    return [
        TraceRow(t=float(t), input_tokens=int(i), output_tokens=int(o), line=int(n))
        for t, i, o, n in zip(times, inputs, outputs, line_arr, strict=True)
    ]


def _parse_datetimes(path: Path, values: list[str], lines: np.ndarray, column: str) -> np.ndarray:
    """ISO-8601 date-times to float seconds since the epoch (ns precision kept until the subtraction)."""
    import pandas as pd

    if not values:
        return np.zeros(0)
    try:
        stamps = pd.to_datetime(pd.Series(values), format="ISO8601", utc=True)
    except (ValueError, TypeError, OverflowError):
        for value, line in zip(values, lines, strict=True):
            try:
                pd.to_datetime(value, format="ISO8601", utc=True)
            except (ValueError, TypeError, OverflowError):
                raise DatasetError(
                    f"{path}:{line}: column {column}: {value!r} is not a date-time like 2023-11-16 18:15:46.6805900"
                ) from None
        raise DatasetError(f"{path}: column {column}: mixed date-time formats") from None
    if stamps.isna().any():
        bad = int(np.flatnonzero(stamps.isna().to_numpy())[0])
        raise DatasetError(f"{path}:{lines[bad]}: column {column}: empty date-time")
    ns = stamps.astype("int64").to_numpy()
    # seconds relative to the first row keep full precision in float64; the origin is irrelevant
    return (ns - ns[0]) / 1e9


def _parse_numbers(
    path: Path, values: list[str], lines: np.ndarray, column: str, *, integer: bool
) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=np.float64)
    except ValueError:
        for value, line in zip(values, lines, strict=True):
            try:
                float(value)
            except ValueError:
                raise DatasetError(f"{path}:{line}: column {column!r}: {value!r} is not a number") from None
        raise DatasetError(f"{path}: column {column!r}: cannot read the numbers") from None
    bad = ~np.isfinite(arr) | (arr < 0)
    if integer:
        bad |= arr != np.floor(arr)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        what = "a non-negative integer" if integer else "a non-negative finite number"
        raise DatasetError(f"{path}:{lines[i]}: column {column!r}: {values[i]!r} is not {what}")
    return arr.astype(np.int64) if integer else arr


def _read_jsonl(path: Path) -> list[TraceRow]:
    rows: list[TraceRow] = []
    for lineno, obj in jsonl_objects(path, _read_text_lines(path)):
        t = obj.get("t")
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
            raise DatasetError(
                f"{path}:{lineno}: key 't' must be a non-negative number of seconds, got {t!r}"
            )
        output = _json_count(path, lineno, obj, "output_tokens")
        prompt = obj.get("prompt")
        if prompt is not None:
            if not isinstance(prompt, str) or not prompt:
                raise DatasetError(f"{path}:{lineno}: key 'prompt' must be a non-empty string")
            rows.append(TraceRow(float(t), 0, output, lineno, prompt))
        else:
            if "input_tokens" not in obj:
                raise DatasetError(f"{path}:{lineno}: needs 'input_tokens' or 'prompt'")
            rows.append(TraceRow(float(t), _json_count(path, lineno, obj, "input_tokens"), output, lineno))
    return rows


def _json_count(path: Path, lineno: int, obj: dict[str, Any], key: str) -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise DatasetError(f"{path}:{lineno}: key {key!r} must be a non-negative integer, got {value!r}")
    return value


def select_window(
    rows: list[TraceRow],
    *,
    time_scale: float = 1.0,
    trace_start: float = 0.0,
    trace_duration: float | None = None,
    num_prompts: int | None = None,
) -> tuple[list[TraceRow], np.ndarray]:
    """The rows in the window (at most ``num_prompts``) and their scaled send offsets (first at 0)."""
    if not (math.isfinite(time_scale) and time_scale > 0):
        raise ConfigError(f"--time-scale must be a positive number, got {time_scale}")
    if not (math.isfinite(trace_start) and trace_start >= 0):
        raise ConfigError(f"--trace-start must be >= 0 seconds, got {trace_start}")
    if trace_duration is not None and not trace_duration > 0:
        raise ConfigError(f"--trace-duration must be > 0 seconds, got {trace_duration}")
    if num_prompts is not None and num_prompts < 0:
        raise ConfigError(f"--num-prompts must be >= 0, got {num_prompts}")
    times = np.fromiter((r.t for r in rows), dtype=np.float64, count=len(rows))
    lo = times[0] + trace_start
    keep = times >= lo
    if trace_duration is not None:
        keep &= times < lo + trace_duration
    index = np.flatnonzero(keep)
    if num_prompts is not None:
        index = index[:num_prompts]
    chosen = [rows[i] for i in index]
    if not len(index):
        return chosen, np.zeros(0)
    offsets = (times[index] - times[index[0]]) / time_scale
    return chosen, offsets


# ---------------------------------------------------------------------------------------------- prompts


class PromptBuilder:
    """Prompts of an exact token count, cut from a seeded token pool (see the module docstring).

    The pool is one long text, tokenized once with character offsets; a prompt of ``k`` content tokens
    is the text of pool tokens ``[s, s + k)``, a plain string slice. One batched tokenizer call then
    measures every prompt; the few that do not measure exactly are trimmed or extended.
    """

    def __init__(self, tokenizer: Tokenizer, seed: int = 0, *, prompt_path: str | Path | None = None) -> None:
        self.tokenizer = tokenizer
        self.seed = seed
        self.rng = np.random.RandomState(seed)
        self.specials = int(tokenizer.num_special_tokens_to_add())
        self.prompt_path = Path(prompt_path) if prompt_path is not None else None
        self.text = ""
        self.ids: list[int] = []
        self.ends: np.ndarray | None = None
        """Character end of each pool token in ``text`` (None for tokenizers without offsets)."""
        self.starts = np.zeros(0, dtype=np.int64)
        """Token indices where a prompt may start (every token, or the start of each dataset turn)."""
        self._order = self.starts
        self._cursor = 0

    # -- the pool

    def prepare(self, longest: int, count: int = 1) -> None:
        """Build the pool: at least twice ``longest`` tokens and 4 start places per prompt."""
        need = max(MIN_POOL_TOKENS, 2 * longest + 64, 4 * count)
        if len(self.ids) >= need:
            return
        if self.prompt_path is None:
            pieces = self._random_words(need)
        else:
            pieces = self._dataset_texts(need, 4 * count)
        while True:
            self._tokenize_pool("".join(pieces))
            if len(self.ids) >= need:
                break
            pieces = pieces + pieces
        if self.prompt_path is None:
            self.starts = np.arange(len(self.ids), dtype=np.int64)
        else:
            self.starts = self._piece_token_starts(pieces)
        self._order = self.rng.permutation(self.starts)
        self._cursor = 0

    def _random_words(self, count: int) -> list[str]:
        """``count`` seeded vocabulary words, each with a leading space (text that re-tokenizes stably)."""
        vocab = int(self.tokenizer.vocab_size)
        ids = self.rng.choice(vocab, size=min(vocab, 4096), replace=False).tolist()
        words = sorted(
            {w for w in (self.tokenizer.decode([i]).strip() for i in ids) if w.isascii() and w.isalpha()}
        )
        if len(words) < 16:  # an odd vocabulary: fall back to plain letters
            words = [chr(c) * k for c in range(ord("a"), ord("z") + 1) for k in (1, 2)]
        return [" " + words[i] for i in self.rng.choice(len(words), size=count)]

    def _dataset_texts(self, need: int, min_pieces: int) -> list[str]:
        """Turns of the ShareGPT file, shuffled by seed: enough characters for ``need`` tokens and at
        least ``min_pieces`` turns (cycling the file when it is smaller)."""
        from llmload.datasets.sharegpt import load_conversations

        assert self.prompt_path is not None
        texts = [
            t["value"].strip() + "\n\n"
            for entry in load_conversations(self.prompt_path)
            for t in entry["conversations"]
            if isinstance(t, dict) and isinstance(t.get("value"), str) and t["value"].strip()
        ]
        if not texts:
            raise DatasetError(f"{self.prompt_path}: no conversation text to build trace prompts from")
        random.Random(self.seed).shuffle(texts)
        out: list[str] = []
        chars = 0
        while chars < 8 * need or len(out) < min_pieces:  # a token is rarely over 8 characters
            for text in texts:
                out.append(text)
                chars += len(text)
                if chars >= 8 * need and len(out) >= min_pieces:
                    break
        return out

    def _tokenize_pool(self, text: str) -> None:
        self.text = text
        try:
            enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
            self.ids = list(enc.input_ids)
            self.ends = np.asarray([end for _, end in enc.offset_mapping], dtype=np.int64)
        except (NotImplementedError, TypeError, ValueError, AttributeError):  # slow tokenizers: no offsets
            self.ids = self.tokenizer.encode(text, add_special_tokens=False)
            self.ends = None

    def _piece_token_starts(self, pieces: list[str]) -> np.ndarray:
        char_starts = np.cumsum([0] + [len(p) for p in pieces[:-1]])
        if self.ends is None:
            return np.zeros(1, dtype=np.int64)
        # the first token that ends after the piece's first character
        return np.unique(np.searchsorted(self.ends, char_starts, side="right"))

    def cut(self, start: int, count: int) -> str:
        """The text of pool tokens ``[start, start + count)``, wrapping around the pool's end."""
        size = len(self.ids)
        if start + count > size:
            head = size - start
            return self.cut(start, head) + self.cut(0, count - head)
        if self.ends is None:
            return self.tokenizer.decode(self.ids[start : start + count])
        begin = int(self.ends[start - 1]) if start > 0 else 0
        return self.text[begin : int(self.ends[start + count - 1])]

    # -- prompts

    def draft(self, n: int) -> tuple[str, int]:
        """A first candidate for ``n`` tokens (usually exact) and the pool position after it.

        Starts are drawn without replacement (a seeded permutation), so no two prompts begin at the
        same place and share a prefix, until the pool's start places run out.
        """
        content = max(1, n - self.specials)
        last_start = len(self.ids) - content
        start = None
        while self._cursor < len(self._order):
            candidate = int(self._order[self._cursor])
            self._cursor += 1
            if candidate <= last_start:
                start = candidate
                break
        if start is None:  # places used up: repeat at random
            valid = self.starts[self.starts <= last_start]
            start = int(valid[self.rng.randint(len(valid))]) if len(valid) else 0
        return self.cut(start, content), (start + content) % len(self.ids)

    def fit(self, text: str, n: int, next_pos: int, measured: int | None = None) -> tuple[str, int]:
        """Trim or extend ``text`` until it measures ``n`` tokens; returns the text and its measured length."""
        target = max(n, self.specials + 1)
        length = token_len(self.tokenizer, text) if measured is None else measured
        for _ in range(_FIT_ATTEMPTS):
            if length == target:
                break
            if length > target:
                ids = self.tokenizer.encode(text, add_special_tokens=False)
                keep = max(1, len(ids) - (length - target))
                text = self.tokenizer.decode(ids[:keep])
            else:
                more = target - length
                text += self.cut(next_pos, more)
                next_pos = (next_pos + more) % len(self.ids)
            length = token_len(self.tokenizer, text)
        if length != target:
            text, length = self._fit_by_words(text, target)
        return text, length

    def _fit_by_words(self, text: str, target: int) -> tuple[str, int]:
        """Last resort for unruly tokenizers: cut at a word boundary, then add short words one at a time."""
        words = text.split()
        while words and token_len(self.tokenizer, " ".join(words)) > target:
            words.pop()
        text = " ".join(words)
        length = token_len(self.tokenizer, text)
        filler = ("a", "I", "x", "the", "of")
        guard = 0
        while length < target and guard < 4 * target + 64:
            for word in filler:
                candidate = f"{text} {word}" if text else word
                candidate_len = token_len(self.tokenizer, candidate)
                if candidate_len <= target:
                    text, length = candidate, candidate_len
                    break
            else:
                break
            guard += 1
        return text, length

    def measure(self, texts: list[str]) -> list[int]:
        """``token_len`` of each text in one batched call (parallel in fast tokenizers).

        The Rust backend's ``encode_batch_fast`` (no offsets) is used once a probe shows it counts
        exactly like ``tokenizer(text).input_ids``; otherwise the tokenizer itself is called.
        """
        fast = getattr(getattr(self.tokenizer, "backend_tokenizer", None), "encode_batch_fast", None)
        if fast is not None:
            probe = [*texts[:3], "x", ""]
            try:
                if [len(e.ids) for e in fast(probe)] == [token_len(self.tokenizer, t) for t in probe]:
                    return [len(e.ids) for e in fast(texts)]
            except Exception:  # an unexpected backend: measure the ordinary way
                pass
        return [len(ids) for ids in self.tokenizer(texts).input_ids]

    def build(self, lengths: list[int]) -> list[tuple[str, int]]:
        """One prompt per requested length, in order: (text, measured token length)."""
        if not lengths:
            return []
        self.prepare(max(lengths), len(lengths))
        drafts = [self.draft(n) for n in lengths]
        measured = self.measure([t for t, _ in drafts])
        return [
            self.fit(text, n, pos, length)
            for n, (text, pos), length in zip(lengths, drafts, measured, strict=True)
        ]


# ---------------------------------------------------------------------------------------------- entry


def sample_trace(
    path: str | Path,
    tokenizer: Tokenizer,
    num_prompts: int | None = None,
    seed: int = 0,
    *,
    trace_format: str | None = None,
    time_scale: float = 1.0,
    trace_start: float = 0.0,
    trace_duration: float | None = None,
    prompt_path: str | Path | None = None,
) -> list[SampleRequest]:
    """The window's requests with ``arrival_s`` set and prompts of the trace's sizes (module docstring)."""
    path = Path(path)
    rows = read_trace(path, trace_format)
    chosen, offsets = select_window(
        rows,
        time_scale=time_scale,
        trace_start=trace_start,
        trace_duration=trace_duration,
        num_prompts=num_prompts,
    )
    if not chosen and num_prompts != 0:
        span = rows[-1].t - rows[0].t
        raise DatasetError(
            f"{path}: no requests in the window --trace-start {trace_start:g} --trace-duration "
            f"{trace_duration if trace_duration is not None else 'end'} (the trace spans {span:.3f} s)"
        )
    to_build = [r.input_tokens for r in chosen if r.prompt is None]
    built = (
        iter(PromptBuilder(tokenizer, seed, prompt_path=prompt_path).build(to_build)) if to_build else None
    )
    out: list[SampleRequest] = []
    for row, offset in zip(chosen, offsets, strict=True):
        if row.prompt is not None:
            prompt, prompt_len = row.prompt, token_len(tokenizer, row.prompt)
        else:
            assert built is not None
            prompt, prompt_len = next(built)
        out.append(
            SampleRequest(
                prompt=prompt,
                prompt_len=prompt_len,
                expected_output_len=max(1, row.output_tokens),
                request_id=f"{path.name}:{row.line}",
                arrival_s=float(offset),
            )
        )
    return out
