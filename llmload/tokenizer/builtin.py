"""The shipped tokenizer read by the ``tokenizers`` library alone, for the processes that only count tokens.

``llmload bench`` and ``llmload sim`` use a tokenizer to turn dataset text into token counts, make prompts of a
given length and count generated text; that is ``__call__``, ``encode``, ``decode``, ``vocab_size``,
``num_special_tokens_to_add`` and ``all_special_ids`` of a transformers tokenizer. For ``--tokenizer builtin``
(the default against the simulator) :class:`BuiltinTokenizer` gives exactly those, with the numbers
transformers' ``PreTrainedTokenizerFast`` gives for the same ``tokenizer.json`` (tests/unit/test_tokenizer.py
compares them on texts across the shipped sample), without importing transformers: ~1 s of CPU at every start of
every bench and simulator process. ``load_tokenizer`` still returns the transformers tokenizer, for user code
that wants the rest (chat templates, special-token names).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class Encoded:
    """What ``tokenizer(text)`` returns, as far as llmload reads it (``BatchEncoding``'s names)."""

    input_ids: Any
    offset_mapping: Any = None

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)


class BuiltinTokenizer:
    """A ``tokenizer.json`` whose special tokens come from its ``tokenizer_config.json``."""

    is_fast = True

    def __init__(self, directory: Path) -> None:
        from tokenizers import Tokenizer

        self.backend_tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        self.backend_tokenizer.no_truncation()
        self.backend_tokenizer.no_padding()
        self.name_or_path = str(directory)
        config = json.loads((directory / "tokenizer_config.json").read_text())
        names = [config.get(key) for key in ("bos_token", "eos_token", "unk_token", "pad_token")]
        ids = (self.backend_tokenizer.token_to_id(name) for name in names if isinstance(name, str))
        self.all_special_ids = sorted({i for i in ids if i is not None})

    @property
    def vocab_size(self) -> int:
        """The base vocabulary, without added tokens (as transformers counts it)."""
        return self.backend_tokenizer.get_vocab_size(with_added_tokens=False)

    def __len__(self) -> int:
        return self.backend_tokenizer.get_vocab_size(with_added_tokens=True)

    def num_special_tokens_to_add(self, pair: bool = False) -> int:
        return self.backend_tokenizer.num_special_tokens_to_add(pair)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self.backend_tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return self.backend_tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def __call__(self, text: str | list[str], add_special_tokens: bool = True,
                 return_offsets_mapping: bool = False) -> Encoded:
        if isinstance(text, str):
            enc = self.backend_tokenizer.encode(text, add_special_tokens=add_special_tokens)
            return Encoded(enc.ids, enc.offsets if return_offsets_mapping else None)
        encs = self.backend_tokenizer.encode_batch(list(text), add_special_tokens=add_special_tokens)
        return Encoded([e.ids for e in encs], [e.offsets for e in encs] if return_offsets_mapping else None)
