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

Only the draws are kept (:class:`RandomSamples`, 12 bytes a request): each prompt is made from them when it is read,
so a run of a million requests does not hold a million prompts (issue 37). A request's prompt depends on its own
draws and position alone, so reading it twice, or out of order, gives the same text.
"""

from __future__ import annotations

import numpy as np

from llmload.common.errors import DatasetError
from llmload.datasets.base import SampleRequest, SamplesOnRead, Tokenizer

DEFAULT_INPUT_LEN = 1024
DEFAULT_OUTPUT_LEN = 128
DEFAULT_RANGE_RATIO = 0.0
DEFAULT_PREFIX_LEN = 0
#: a workload of up to this many prompt tokens is made whole before the run (a few tens of MB of text): making a
#: prompt costs ~60 µs at 16 tokens and ~2.4 ms at 1,024 with the built-in tokenizer, which a process that sends
#: should not pay while it sends; a bigger one is made as it is read, so its memory does not grow with the run
MADE_AHEAD_TOKENS = 8_000_000


def sample_random(
    tokenizer: Tokenizer,
    num_prompts: int,
    seed: int | np.random.RandomState = 0,
    *,
    input_len: int = DEFAULT_INPUT_LEN,
    output_len: int = DEFAULT_OUTPUT_LEN,
    range_ratio: float | tuple[float, float] = DEFAULT_RANGE_RATIO,
    prefix_len: int = DEFAULT_PREFIX_LEN,
) -> RandomSamples:
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
    samples = RandomSamples(tokenizer, prefix, input_lens, output_lens, offsets)
    if num_prompts * (prefix_len + input_high) <= MADE_AHEAD_TOKENS:
        samples.make_all()
    return samples


class RandomSamples(SamplesOnRead):
    """The requests of :func:`sample_random`, each made from its draws when read (a list's equal: ``==``
    compares the requests)."""

    def __init__(self, tokenizer: Tokenizer, prefix: list[int], input_lens: np.ndarray, output_lens: np.ndarray,
                 offsets: np.ndarray) -> None:
        self._tokenizer = tokenizer
        self._prefix = prefix
        self._vocab_size = int(tokenizer.vocab_size)
        self._input_lens = input_lens.astype(np.int32)
        self._output_lens = output_lens.astype(np.int32)
        self._offsets = offsets.astype(np.int32)
        self._whole: list[SampleRequest] | None = None

    def make_all(self) -> None:
        """Make every request now and keep them (a small workload: nothing is made while the run sends)."""
        self._whole = [self._made(i) for i in range(len(self))]

    def __len__(self) -> int:
        return int(self._input_lens.size)

    def request_id(self, i: int) -> str:
        return f"random-{i}"

    def _made(self, i: int) -> SampleRequest:
        if self._whole is not None:
            return self._whole[i]
        n, prefix_len = int(self._input_lens[i]), len(self._prefix)
        inner = ((int(self._offsets[i]) + i + np.arange(n)) % self._vocab_size).tolist()
        text = self._tokenizer.decode(self._prefix + inner)
        reencoded = self._tokenizer.encode(text, add_special_tokens=False)[: prefix_len + n]
        return SampleRequest(prompt=self._tokenizer.decode(reencoded), prompt_len=prefix_len + n,
                             expected_output_len=int(self._output_lens[i]), request_id=self.request_id(i))
