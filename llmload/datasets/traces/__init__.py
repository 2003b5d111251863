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

    formats.py   TraceRow, format detection and the Azure / BurstGPT / JSONL readers
    window.py    the replay window and send offsets (select_window)
    prompts.py   PromptBuilder: prompts of exact token counts from a seeded pool
    replay.py    sample_trace, the entry point
"""

from __future__ import annotations

from llmload.datasets.traces.formats import (
    AZURE_COLUMNS,
    BURSTGPT_COLUMNS,
    TRACE_FORMATS,
    TraceRow,
    detect_format,
    read_trace,
)
from llmload.datasets.traces.prompts import MIN_POOL_TOKENS, PromptBuilder
from llmload.datasets.traces.replay import sample_trace
from llmload.datasets.traces.window import select_window

__all__ = [
    "AZURE_COLUMNS",
    "BURSTGPT_COLUMNS",
    "MIN_POOL_TOKENS",
    "TRACE_FORMATS",
    "PromptBuilder",
    "TraceRow",
    "detect_format",
    "read_trace",
    "sample_trace",
    "select_window",
]
