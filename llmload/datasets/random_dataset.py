"""Random-token prompts with vLLM's ``RandomDataset`` semantics.

For each request (vLLM ``benchmark_dataset.RandomDataset.sample``):

* input length ~ ``randint(int(L*(1-r)), int(L*(1+r)) + 1)`` where ``L = input_len - special tokens``
  (the BOS the tokenizer adds), output length likewise from ``output_len`` (at least 1);
* tokens ``(offset + i + j) % vocab_size`` for j in the input length, offset ~ ``randint(0, vocab)``,
  after ``prefix_len`` random prefix tokens shared by all requests;
* decoded to text, re-encoded and cut to the intended length, decoded again (N tokens do not
  always decode to a string that re-tokenizes to N tokens);
* ``prompt_len`` reported as ``prefix_len + input length``.

All draws come from one ``numpy.random.RandomState(seed)`` in vLLM's order (prefix, input lengths,
output lengths, offsets), which equals vLLM's ``np.random.seed(seed)`` global draws.
"""

from __future__ import annotations

import numpy as np

from llmload.common.errors import DatasetError
from llmload.datasets.base import SampleRequest, Tokenizer

DEFAULT_INPUT_LEN = 1024
DEFAULT_OUTPUT_LEN = 128
DEFAULT_RANGE_RATIO = 0.0
DEFAULT_PREFIX_LEN = 0


def sample_random(
    tokenizer: Tokenizer,
    num_prompts: int,
    seed: int | np.random.RandomState = 0,
    *,
    input_len: int = DEFAULT_INPUT_LEN,
    output_len: int = DEFAULT_OUTPUT_LEN,
    range_ratio: float | tuple[float, float] = DEFAULT_RANGE_RATIO,
    prefix_len: int = DEFAULT_PREFIX_LEN,
) -> list[SampleRequest]:
    """``num_prompts`` random-token requests (see the module docstring); ``range_ratio`` one ratio, or
    ``(input, output)`` (today's vLLM's ``{"input": r, "output": r}``)."""
    in_ratio, out_ratio = range_ratio if isinstance(range_ratio, tuple | list) else (range_ratio, range_ratio)
    for ratio in (in_ratio, out_ratio):
        if not 0.0 <= ratio < 1.0:
            raise DatasetError(f"--random-range-ratio must be in [0, 1), got {ratio}")
    if input_len < 1 or output_len < 1 or prefix_len < 0:
        raise DatasetError(
            "--random-input-len and --random-output-len must be >= 1 and --random-prefix-len >= 0"
        )
    rng = seed if isinstance(seed, np.random.RandomState) else np.random.RandomState(seed)
    vocab_size = int(tokenizer.vocab_size)
    real_input_len = max(1, input_len - tokenizer.num_special_tokens_to_add())
    prefix = rng.randint(0, vocab_size, size=prefix_len).tolist() if prefix_len > 0 else []
    input_low = max(1, int(real_input_len * (1 - in_ratio)))
    input_high = int(real_input_len * (1 + in_ratio))
    output_low = max(1, int(output_len * (1 - out_ratio)))
    output_high = int(output_len * (1 + out_ratio))
    input_lens = rng.randint(input_low, input_high + 1, size=num_prompts)
    output_lens = rng.randint(output_low, output_high + 1, size=num_prompts)
    offsets = rng.randint(0, vocab_size, size=num_prompts)
    out = []
    for i in range(num_prompts):
        n = int(input_lens[i])
        inner = ((offsets[i] + i + np.arange(n)) % vocab_size).tolist()
        text = tokenizer.decode(prefix + inner)
        reencoded = tokenizer.encode(text, add_special_tokens=False)[: prefix_len + n]
        out.append(
            SampleRequest(
                prompt=tokenizer.decode(reencoded),
                prompt_len=prefix_len + n,
                expected_output_len=int(output_lens[i]),
                request_id=f"random-{i}",
            )
        )
    return out
