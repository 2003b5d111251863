"""Prompts that share a few long prefixes, with vLLM's ``--dataset-name prefix_repetition`` semantics.

What vLLM's ``PrefixRepetitionRandomDataset`` does, and so do we:

* ``num_prefixes`` random prefixes of ``prefix_len`` tokens; each is followed by
  ``num_prompts // num_prefixes`` random suffixes of ``suffix_len`` tokens, so every prefix is shared by
  the same number of prompts (the workload a prefix cache is measured with);
* ``num_prompts`` under ``num_prefixes`` is an error; a remainder is not made (vLLM makes
  ``num_prefixes * (num_prompts // num_prefixes)`` prompts; the caller warns that fewer came back);
* random token ids ``randint(0, vocab_size)`` are decoded, re-encoded (no special tokens) and cut or
  topped up with more random ids until they re-encode to the target length (at most 10 rounds);
  ``prompt_len`` is the prefix's plus the suffix's token count, ``expected_output_len`` is ``output_len``;
* the prompts are shuffled at the end (``random.Random(seed)``), token draws come from one
  ``numpy.random.RandomState(seed)`` in vLLM's order (the prefix, then its suffixes), which equals vLLM's
  ``np.random.seed(seed)`` global draws;
* defaults: prefix 256, suffix 256, 10 prefixes, output 128 tokens.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np

from llmload.common.errors import DatasetError
from llmload.datasets.base import SampleRequest, Tokenizer

DEFAULT_PREFIX_LEN = 256
DEFAULT_SUFFIX_LEN = 256
DEFAULT_NUM_PREFIXES = 10
DEFAULT_OUTPUT_LEN = 128
MAX_ROUNDS = 10
"""Decode/re-encode rounds before a length is accepted as it is (vLLM's ``max_retry``)."""


def ids_of_length(tokenizer: Tokenizer, length: int, draw: Callable[[int], list[int]]) -> list[int]:
    """``length`` random token ids whose decoded text re-encodes to (nearly always) the same ids.

    ``length`` random ids do not always decode to text that tokenizes back to ``length`` tokens; a
    prompt built from them would then not have the length it claims. So: decode, re-encode, cut a
    surplus or top a shortfall up with ``draw(k)`` more ids, and repeat (at most ``MAX_ROUNDS`` times).
    """
    ids = draw(length)
    for attempt in range(MAX_ROUNDS + 1):
        ids = tokenizer.encode(tokenizer.decode(ids), add_special_tokens=False)
        if len(ids) == length or attempt == MAX_ROUNDS:
            break
        ids = ids[:length] if len(ids) > length else ids + draw(length - len(ids))
    return ids


def _check(num_prompts: int, prefix_len: int, suffix_len: int, num_prefixes: int, output_len: int) -> None:
    if num_prefixes < 1 or output_len < 1:
        raise DatasetError(
            "--prefix-repetition-num-prefixes and --prefix-repetition-output-len must be at least 1"
        )
    if prefix_len < 0 or suffix_len < 0 or prefix_len + suffix_len < 1:
        raise DatasetError(
            "--prefix-repetition-prefix-len and --prefix-repetition-suffix-len must be >= 0, "
            "and not both 0"
        )
    if num_prompts < num_prefixes:
        raise DatasetError(
            f"--num-prompts ({num_prompts}) must be at least --prefix-repetition-num-prefixes "
            f"({num_prefixes}): every prefix needs a prompt"
        )


def sample_prefix_repetition(
    tokenizer: Tokenizer,
    num_prompts: int,
    seed: int = 0,
    *,
    prefix_len: int = DEFAULT_PREFIX_LEN,
    suffix_len: int = DEFAULT_SUFFIX_LEN,
    num_prefixes: int = DEFAULT_NUM_PREFIXES,
    output_len: int = DEFAULT_OUTPUT_LEN,
    shuffle: bool = True,
) -> list[SampleRequest]:
    """``num_prefixes`` groups of prompts, each group sharing one prefix (see the module docstring)."""
    _check(num_prompts, prefix_len, suffix_len, num_prefixes, output_len)
    rng = np.random.RandomState(seed)
    vocab_size = int(tokenizer.vocab_size)

    def draw(k: int) -> list[int]:
        return rng.randint(0, vocab_size, size=k).tolist()

    out: list[SampleRequest] = []
    for p in range(num_prefixes):
        prefix = ids_of_length(tokenizer, prefix_len, draw)
        for j in range(num_prompts // num_prefixes):
            ids = prefix + ids_of_length(tokenizer, suffix_len, draw)
            out.append(
                SampleRequest(
                    prompt=tokenizer.decode(ids),
                    prompt_len=len(ids),
                    expected_output_len=output_len,
                    request_id=f"prefix-{p}-{j}",
                )
            )
    if shuffle:  # --disable-shuffle: grouped by prefix, as vLLM
        random.Random(seed).shuffle(out)
    return out
