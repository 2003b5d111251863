"""Generate the synthetic ShareGPT-format sample shipped in the package, ``llmload/data/``.

The real ``ShareGPT_V3_unfiltered_cleaned_split.json`` cannot be downloaded on our build machines,
so this script writes a stand-in with the same shape: a JSON list of
``{"id": str, "conversations": [{"from": "human"|"gpt", "value": str}, ...]}``.

What resembles ShareGPT:

* turn counts: about half the conversations are one human/gpt exchange, with a geometric tail up
  to 20 turns; about 2% have a single turn and some end on a human turn (the sampler drops or
  truncates these, like vLLM);
* lengths: per-turn token targets drawn from lognormal distributions with a long tail (a few
  prompts are pasted documents above vLLM's 1024-token cut, a few are "hi"-sized and below 4);
* text: English-like sentences from a built-in Zipf-weighted word list, lists, and some code.

Calibration (docs/design.md, "Workload"): the design asks for about 220 prompt and 200 output tokens on average after vLLM's
filtering *with Llama-2's tokenizer*. That tokenizer is not available offline, so the parameters
below were calibrated with the builtin tokenizer (``llmload/data/tokenizer``, trained by
``datasets/make_tokenizer.py`` on this very file); Llama-2 would count somewhat differently.

Deterministic: the same seed gives a byte-identical file. Stdlib + numpy only.

    python datasets/make_sharegpt_sample.py    # writes llmload/data/sharegpt_sample.json[.gz]
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "llmload" / "data" / "sharegpt_sample.json"
"""Inside the package, so that a wheel install carries it (``llmload.datasets.sharegpt`` finds it there)."""
MAX_PLAIN_BYTES = 8_000_000
"""Above this size the sample is written gzip-compressed as ``sharegpt_sample.json.gz``."""

SEED = 20240601
NUM_CONVERSATIONS = 3000

# Lognormal token targets: (median, sigma). Calibrated with the builtin tokenizer (see module doc).
FIRST_PROMPT = (127.0, 1.25)
FIRST_ANSWER = (130.0, 0.75)
FOLLOWUP_PROMPT = (28.0, 1.1)
FOLLOWUP_ANSWER = (120.0, 0.75)
MAX_TURN_TOKENS = 6000
TINY_PROMPT_SHARE = 0.03
"""Share of first prompts that are 1-3 words ("hi", "continue"), dropped by vLLM's filter."""


def _ws(text: str) -> list[str]:
    """Whitespace-separated word list."""
    return text.split()


_WORD_TEXT = """
the of and to a in is you that it for on with as are this be can or by your from an at
will not have use which we if more they all one has their but these other each also its
data how when time what new some there so would should may about into used using like
make first any see need code value example two function only file such then system them
than user our most set both way model work over well get different number information
between those many just process where return create run list test type through because
following same here order result name out while even must key could add three level change
best first without important point during access error part before within case memory
server request response client input output string object class method variable table query
model training token text language question answer problem solution step approach design
performance network service application database table index cache thread queue event
message file path directory config option value parameter argument default version update
simple complex common specific general possible available useful different similar large
small long short high low fast slow clear early late main real local global public private
write read explain describe provide help show build check handle store send receive start
stop open close load save keep find give take look call try move follow include allow
consider ensure improve reduce increase support manage define convert compare generate
people company market business customer product price team project plan goal result report
story history world country city school student teacher book music film game health food
water energy power light color family friend child life day week month year morning night
research study analysis theory method evidence effect cause factor role impact benefit risk
strategy policy law right rule article section chapter page line word sentence paragraph
good great better little own old right big young certain whole free full strong ready
quickly simply really usually often always never again already still almost perhaps rather
however therefore instead finally together especially actually directly probably currently
"""
_WORDS = _WORD_TEXT.split()
_FIRST_CONTENT_WORD = _WORDS.index("data")
"""Words before this are function words, never inflected."""

_OPENERS = [
    "Can you",
    "Please",
    "Could you",
    "I need you to",
    "Help me",
    "I want to",
    "Write a",
    "Explain how",
    "What is the",
    "How do I",
    "Why does the",
    "Give me a",
    "Act as a",
    "Summarize the",
    "Rewrite this",
]
_TINY_PROMPTS = ["hi", "continue", "thanks", "ok", "go on", "more", "yes", "why?", "hello!", "next"]
_ANSWER_OPENERS = [
    "Sure! Here is",
    "Certainly. Here is",
    "Great question.",
    "Of course.",
    "Here are a few",
    "There are several",
    "I'm sorry, but",
    "Yes,",
    "To do this,",
    "In short,",
]
_CODE_NAMES = _ws(
    "data items result value config user count index response total buffer path text model cache request query record"
)
_CODE_FUNCS = _ws(
    "load parse compute update process fetch validate render build send filter merge format split"
)


RARE_WORDS = 6000
_ONSETS = _ws("b c d f g h k l m n p r s t v w z br ch cl cr dr fl gr pl pr sh sl st str th tr")
_VOWELS = _ws("a e i o u ai ea ee io ou y")
_CODAS = ["", "", "", *_ws("n r s t l m nd nt st ck ng x rt sh")]
_SUFFIXES = _ws("s s ed ing er ly ness tion al ize able")


def _pseudo_words(rng: np.random.Generator, n: int) -> list[str]:
    """``n`` distinct pronounceable made-up words (rare terms, names) of 2-4 syllables."""
    seen: set[str] = set(_WORDS)
    out: list[str] = []
    while len(out) < n:
        syllables = int(rng.integers(2, 5))
        w = "".join(
            str(rng.choice(_ONSETS)) + str(rng.choice(_VOWELS)) + str(rng.choice(_CODAS))
            for _ in range(syllables)
        )
        if w not in seen:
            seen.add(w)
            out.append(w)
    return out


def _number(rng: np.random.Generator) -> str:
    k = rng.random()
    if k < 0.4:
        return str(int(rng.integers(0, 100)))
    if k < 0.6:
        return str(int(rng.integers(1900, 2030)))
    if k < 0.8:
        return f"{rng.random() * 100:.1f}"
    return f"{int(rng.integers(1, 100))}%"


class TextMaker:
    """Draws English-like text of a given approximate token length from a seeded generator."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        ranks = np.arange(1, len(_WORDS) + 1, dtype=float)
        weights = 1.0 / ranks**0.9
        self._p = weights / weights.sum()
        self._rare = _pseudo_words(rng, RARE_WORDS)
        rare_w = 1.0 / np.arange(1, len(self._rare) + 1, dtype=float)
        self._rare_p = rare_w / rare_w.sum()

    def _words(self, n: int) -> list[str]:
        """``n`` words: common ones (sometimes inflected), rare pseudo-words, names and numbers."""
        rng = self.rng
        idx = rng.choice(len(_WORDS), size=n, p=self._p)
        kinds = rng.random(n)
        out = []
        for i, k in zip(idx, kinds, strict=True):
            if k < 0.07:
                out.append(self._rare[rng.choice(len(self._rare), p=self._rare_p)])
            elif k < 0.085:
                out.append(self._rare[rng.choice(len(self._rare), p=self._rare_p)].capitalize())
            elif k < 0.10:
                out.append(_number(rng))
            elif k < 0.25 and i >= _FIRST_CONTENT_WORD:
                out.append(_WORDS[i] + str(rng.choice(_SUFFIXES)))
            else:
                out.append(_WORDS[i])
        return out

    def sentence(self, opener: str | None = None) -> tuple[str, int]:
        """One sentence and its approximate token count (words plus punctuation)."""
        n = int(self.rng.integers(5, 23))
        words = self._words(n)
        if opener:
            words = [*opener.split(), *words]
        elif words:
            words[0] = words[0].capitalize()
        if n > 10 and self.rng.random() < 0.4:
            words[int(self.rng.integers(3, n - 3))] += ","
        end = self.rng.choice([".", ".", ".", ".", "?", "!", ":"])
        return " ".join(words) + str(end), len(words) + 2

    def code(self) -> tuple[str, int]:
        """A small fenced, Python-like code block and its approximate token count."""
        rng = self.rng
        func = f"{rng.choice(_CODE_FUNCS)}_{rng.choice(_CODE_NAMES)}"
        args = ", ".join(str(a) for a in rng.choice(_CODE_NAMES, size=int(rng.integers(1, 4)), replace=False))
        lines = ["```python", f"def {func}({args}):"]
        for _ in range(int(rng.integers(2, 9))):
            kind = rng.random()
            a, b = rng.choice(_CODE_NAMES, size=2)
            if kind < 0.4:
                lines.append(f"    {a} = {rng.choice(_CODE_FUNCS)}({b}, {int(rng.integers(0, 100))})")
            elif kind < 0.6:
                lines.append(f"    if {a} is None:")
                lines.append(f'        raise ValueError("missing {a}")')
            elif kind < 0.8:
                lines.append(f"    for {a[0]} in {b}:")
                lines.append(f"        {a}.append({a[0]} * 2)")
            else:
                lines.append(f"    # {' '.join(self._words(int(rng.integers(3, 9))))}")
        lines += [f"    return {rng.choice(_CODE_NAMES)}", "```"]
        text = "\n".join(lines)
        return text, int(len(text) / 3.2)

    def text(self, target: int, *, human: bool) -> str:
        """Paragraphs of about ``target`` tokens; prompts open with a request, answers may hold code."""
        if human and target < 4:
            return str(self.rng.choice(_TINY_PROMPTS))
        paragraphs: list[str] = []
        current: list[str] = []
        used = 0
        first = True
        while used < target:
            if not first and not human and target > 120 and self.rng.random() < 0.03:
                if current:
                    paragraphs.append(" ".join(current))
                    current = []
                block, cost = self.code()
                paragraphs.append(block)
                used += cost
                continue
            if not first and self.rng.random() < 0.06:
                # A short numbered list.
                if current:
                    paragraphs.append(" ".join(current))
                    current = []
                items = []
                for k in range(int(self.rng.integers(2, 6))):
                    s, cost = self.sentence()
                    items.append(f"{k + 1}. {s}")
                    used += cost + 2
                paragraphs.append("\n".join(items))
                continue
            opener = None
            if first:
                opener = str(self.rng.choice(_OPENERS if human else _ANSWER_OPENERS))
            s, cost = self.sentence(opener)
            first = False
            current.append(s)
            used += cost
            if self.rng.random() < 0.2:
                paragraphs.append(" ".join(current))
                current = []
        if current:
            paragraphs.append(" ".join(current))
        return "\n\n".join(paragraphs)


def _lognormal(rng: np.random.Generator, median_sigma: tuple[float, float]) -> int:
    median, sigma = median_sigma
    return int(min(MAX_TURN_TOKENS, max(1.0, rng.lognormal(np.log(median), sigma))))


def _num_turns(rng: np.random.Generator) -> int:
    """ShareGPT-like turn counts: mostly 2, geometric tail up to 20, a few 1s and odd counts."""
    if rng.random() < 0.02:
        return 1
    pairs = min(10, int(rng.geometric(0.5)))
    turns = 2 * pairs
    if pairs > 1 and rng.random() < 0.05:
        turns -= 1  # ends on an unanswered human turn
    return turns


def make_conversations(seed: int = SEED, n: int = NUM_CONVERSATIONS) -> list[dict]:
    """Build ``n`` synthetic ShareGPT conversations deterministically from ``seed``."""
    rng = np.random.default_rng(seed)
    maker = TextMaker(rng)
    out = []
    for i in range(n):
        turns = []
        for t in range(_num_turns(rng)):
            human = t % 2 == 0
            if t == 0:
                target = 2 if rng.random() < TINY_PROMPT_SHARE else _lognormal(rng, FIRST_PROMPT)
            elif t == 1:
                target = _lognormal(rng, FIRST_ANSWER)
            else:
                target = _lognormal(rng, FOLLOWUP_PROMPT if human else FOLLOWUP_ANSWER)
            turns.append({"from": "human" if human else "gpt", "value": maker.text(target, human=human)})
        out.append({"id": f"synth_{i:05d}", "conversations": turns})
    return out


def write_sample(conversations: list[dict], out: Path = DEFAULT_OUT) -> Path:
    """Write plain JSON if it stays under 8 MB, else ``<out>.gz``; remove the other variant."""
    data = json.dumps(conversations, ensure_ascii=False, indent=1).encode("utf-8")
    gz = out.with_name(out.name + ".gz")
    if len(data) <= MAX_PLAIN_BYTES:
        out.write_bytes(data)
        gz.unlink(missing_ok=True)
        return out
    # mtime=0 keeps the compressed bytes reproducible.
    gz.write_bytes(gzip.compress(data, compresslevel=9, mtime=0))
    out.unlink(missing_ok=True)
    return gz


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("-n", "--num-conversations", type=int, default=NUM_CONVERSATIONS)
    parser.add_argument("-o", "--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    path = write_sample(make_conversations(args.seed, args.num_conversations), args.out)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
