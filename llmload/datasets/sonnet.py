"""vLLM's ``sonnet`` dataset: prompts of poem lines (``--sonnet-input-len`` 550, ``--sonnet-output-len`` 150,
``--sonnet-prefix-len`` 200 tokens). As vLLM: the base prompt "Pick as many lines as you can from these poem
lines:\\n", then the file's first lines as a prefix shared by every request (``prefix_len`` tokens, less the base
prompt's), then lines drawn with ``random.choices`` to about ``input_len`` tokens; a draw longer than
``input_len`` is drawn again. The tokenizer's chat template wraps the prompt for counting when it has one (vLLM
counts the templated prompt and sends the bare one to chat servers). Without ``--dataset-path``: the shipped
sample (Shakespeare's sonnets, public domain)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from llmload.common.errors import DatasetError
from llmload.datasets.base import SampleRequest, Tokenizer, read_text, token_len

BASE_PROMPT = "Pick as many lines as you can from these poem lines:\n"
DEFAULT_INPUT_LEN, DEFAULT_OUTPUT_LEN, DEFAULT_PREFIX_LEN = 550, 150, 200
#: draws before giving up on a prompt that fits ``input_len``
_TRIES = 1000


def default_sonnet_path() -> Path:
    return Path(__file__).resolve().parents[1] / "data" / "sonnets.txt"


def _templated(tokenizer: Any, text: str) -> str:
    template = getattr(tokenizer, "apply_chat_template", None)
    if template is None or not getattr(tokenizer, "chat_template", None):
        return text
    return template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False)


def sample_sonnet(path: str | Path, tokenizer: Tokenizer, num_prompts: int | None, seed: int = 0, *,
                  input_len: int = DEFAULT_INPUT_LEN, output_len: int = DEFAULT_OUTPUT_LEN,
                  prefix_len: int = DEFAULT_PREFIX_LEN) -> list[SampleRequest]:
    """``num_prompts`` (default 1000, as ``--num-prompts``) prompts of poem lines (module docstring)."""
    path = Path(path)
    lines = [line if line.endswith("\n") else line + "\n" for line in read_text(path).splitlines() if line.strip()]
    if not lines:
        raise DatasetError(f"{path}: no lines")
    average = sum(token_len(tokenizer, line) for line in lines) / len(lines)
    base_offset = token_len(tokenizer, _templated(tokenizer, BASE_PROMPT))
    if input_len <= base_offset:
        raise DatasetError(f"--sonnet-input-len {input_len} must be more than the base prompt's {base_offset} "
                           "tokens")
    num_input = round((input_len - base_offset) / average)
    num_prefix = max(round((prefix_len - base_offset) / average), 0)
    if num_prefix > num_input:
        raise DatasetError(f"--sonnet-prefix-len {prefix_len} must not exceed --sonnet-input-len {input_len}")
    prefix = lines[:num_prefix]
    rng = random.Random(seed)
    out: list[SampleRequest] = []
    count = 1000 if num_prompts is None else num_prompts
    tries = 0
    while len(out) < count:
        prompt = BASE_PROMPT + "".join(prefix + rng.choices(lines, k=num_input - num_prefix))
        length = token_len(tokenizer, _templated(tokenizer, prompt))
        if length <= input_len:
            out.append(SampleRequest(prompt=prompt, prompt_len=length, expected_output_len=output_len,
                                     request_id=f"sonnet-{len(out)}"))
            tries = 0
        else:
            tries += 1
            if tries > _TRIES:
                raise DatasetError(f"{path}: no draw of {num_input} lines fits --sonnet-input-len {input_len}")
    return out
