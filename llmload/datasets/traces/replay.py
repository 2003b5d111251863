"""The trace dataset's entry point: read, window, build prompts, one SampleRequest per kept row."""

from __future__ import annotations

from pathlib import Path

from llmload.common.errors import DatasetError
from llmload.datasets.base import SampleRequest, Tokenizer, token_len
from llmload.datasets.traces.blocks import DEFAULT_BLOCK_SIZE, BlockPrompts, prefix_reuse
from llmload.datasets.traces.formats import MooncakeKeys, read_trace
from llmload.datasets.traces.prompts import PromptBuilder
from llmload.datasets.traces.window import select_window


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
    block_size: int = DEFAULT_BLOCK_SIZE,
    mooncake: MooncakeKeys | None = None,
) -> list[SampleRequest]:
    """The window's requests with ``arrival_s`` set and prompts of the trace's sizes.

    Timing and sizing rules are in :mod:`llmload.datasets.traces`; a Mooncake trace's prompts share their
    prefix blocks as its ``hash_ids`` say (:mod:`llmload.datasets.traces.blocks`, ``block_size`` tokens a block).
    """
    path = Path(path)
    rows = read_trace(path, trace_format, mooncake)
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
    builder = PromptBuilder(tokenizer, seed, prompt_path=prompt_path)
    kv_trace = any(r.hash_ids is not None for r in chosen)
    reuse: list[int | None] = list(prefix_reuse(chosen, block_size)) if kv_trace else [None] * len(chosen)
    if kv_trace:
        built = iter(BlockPrompts(builder, block_size).build([r for r in chosen if r.prompt is None]))
    else:
        to_build = [r.input_tokens for r in chosen if r.prompt is None]
        built = iter(builder.build(to_build)) if to_build else None
    out: list[SampleRequest] = []
    for row, offset, cached in zip(chosen, offsets, reuse, strict=True):
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
                trace_cached_tokens=cached,
            )
        )
    return out
