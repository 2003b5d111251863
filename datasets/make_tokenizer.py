"""Train the builtin tokenizer shipped in ``llmload/data/tokenizer``.

A byte-level BPE (vocab 8000) trained with the ``tokenizers`` library on the text of the synthetic
ShareGPT sample, saved as a ``transformers`` fast tokenizer so that
``AutoTokenizer.from_pretrained("llmload/data/tokenizer")`` works offline. Like Llama tokenizers it
prepends ``<s>`` when ``add_special_tokens=True`` and ships a simple chat template. It is a stand-in
for tests and offline runs, not a model's tokenizer: counts differ from Llama-2's.

Deterministic: the same sample gives the same ``tokenizer.json``.

    python datasets/make_sharegpt_sample.py && python datasets/make_tokenizer.py
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SAMPLE = REPO / "llmload" / "data" / "sharegpt_sample.json"
"""Or its ``.gz``: the synthetic sample that ``make_sharegpt_sample.py`` writes into the package."""
DEFAULT_OUT = REPO / "llmload" / "data" / "tokenizer"
VOCAB_SIZE = 8000
SPECIAL_TOKENS = ["<s>", "</s>", "<unk>", "<pad>"]

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
"""``<s><|user|>\\nHi</s>\\n<|assistant|>\\n``: plain text role markers, one ``</s>`` per turn."""


def _load(sample: Path) -> list[dict]:
    if not sample.exists():
        gz = sample.with_name(sample.name + ".gz")
        if gz.exists():
            return json.loads(gzip.decompress(gz.read_bytes()))
    return json.loads(sample.read_bytes())


def iter_texts(sample: Path) -> Iterator[str]:
    """Every turn's text in file order."""
    for conv in _load(sample):
        for turn in conv["conversations"]:
            yield turn["value"]


def train(sample: Path = DEFAULT_SAMPLE, out: Path = DEFAULT_OUT, vocab_size: int = VOCAB_SIZE) -> Path:
    """Train the tokenizer on ``sample`` and save it (transformers format) into ``out``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(iter_texts(sample), trainer=trainer)
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        model_max_length=4096,
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    fast.save_pretrained(str(out))
    _portable_config(out)
    return out


def _portable_config(out: Path) -> None:
    """Keep the files loadable by transformers 4.x and 5.x alike.

    transformers 5 writes the chat template to ``chat_template.jinja`` and names its own
    ``TokenizersBackend`` class; both versions read ``chat_template`` from tokenizer_config.json and
    know ``PreTrainedTokenizerFast``. special_tokens_map.json is written for older loaders.
    """
    config_path = out / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config["chat_template"] = CHAT_TEMPLATE
    config.pop("backend", None)
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    (out / "chat_template.jinja").unlink(missing_ok=True)
    tokens = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}
    (out / "special_tokens_map.json").write_text(json.dumps(tokens, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=Path, default=DEFAULT_SAMPLE)
    parser.add_argument("-o", "--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--vocab-size", type=int, default=VOCAB_SIZE)
    args = parser.parse_args()
    out = train(args.sample, args.out, args.vocab_size)
    print(f"wrote {out}: {sorted(p.name for p in out.iterdir())}")


if __name__ == "__main__":
    main()
