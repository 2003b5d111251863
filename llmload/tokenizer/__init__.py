"""Tokenizers: ``builtin`` (shipped, ``tokenizers`` only) or a transformers one, and ``load_counting_tokenizer``
for the token counts; transformers imported safely under gevent (``transformers_import``).

    loading              load_tokenizer, load_counting_tokenizer, BUILTIN, where the shipped one lives
    builtin              the builtin tokenizer
    transformers_import  import transformers once, early, with gevent's patches undone for it
"""

from llmload.tokenizer.loading import BUILTIN, builtin_tokenizer_dir, load_counting_tokenizer, load_tokenizer

__all__ = ["BUILTIN", "builtin_tokenizer_dir", "load_counting_tokenizer", "load_tokenizer"]
