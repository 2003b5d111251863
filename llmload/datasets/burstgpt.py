"""vLLM's ``burstgpt`` dataset: request and response lengths from a BurstGPT CSV (lengths only; ``--dataset-name
trace`` replays the same file with its timestamps). As vLLM: the ``GPT-4`` rows with a response (``Response
tokens`` > 0), ``num_prompts`` of them drawn by the seed (with replacement when the file has fewer), each prompt
``Request tokens`` long, made of consecutive token ids decoded, the output ``Response tokens`` long."""

from __future__ import annotations

from pathlib import Path

from llmload.common.errors import DatasetError
from llmload.datasets.base import SampleRequest, Tokenizer

COLUMNS = ("Model", "Request tokens", "Response tokens")


def sample_burstgpt(path: str | Path, tokenizer: Tokenizer, num_prompts: int | None, seed: int = 0
                    ) -> list[SampleRequest]:
    """``num_prompts`` requests (all GPT-4 rows with a response when ``None``)."""
    import pandas as pd

    path = Path(path)
    try:
        frame = pd.read_csv(path)
    except FileNotFoundError:
        raise DatasetError(f"dataset file not found: {path}") from None
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise DatasetError(f"{path}: not a readable CSV ({str(exc).splitlines()[0]})") from None
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise DatasetError(f"{path}: not a BurstGPT CSV: no column {', '.join(repr(c) for c in missing)}")
    rows = frame[(frame["Model"] == "GPT-4") & (frame["Response tokens"] > 0)]
    if rows.empty:
        raise DatasetError(f"{path}: no GPT-4 row with a response")
    count = len(rows) if num_prompts is None else num_prompts
    chosen = rows.sample(n=count, random_state=seed, replace=count > len(rows))
    vocab = int(tokenizer.vocab_size)
    out = []
    for i, (index, row) in enumerate(chosen.iterrows()):
        input_len, output_len = int(row["Request tokens"]), int(row["Response tokens"])
        if input_len < 1:
            raise DatasetError(f"{path}: row {index}: 'Request tokens' must be >= 1, got {input_len}")
        prompt = tokenizer.decode([(i + j) % vocab for j in range(input_len)])
        out.append(SampleRequest(prompt=prompt, prompt_len=input_len, expected_output_len=output_len,
                                 request_id=f"burstgpt-{index}"))
    return out
