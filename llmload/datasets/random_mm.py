"""``--dataset-name random-mm``: random-token prompts with random images, with vLLM's ``RandomMultiModalDataset`` flags
and meanings (docs/multimodal.md).

Per request (vLLM ``benchmarks/datasets``, autumn 2026):

* the text is the ``random`` dataset's for the same seed and lengths (:func:`~llmload.datasets.random_dataset.
  sample_random`): ``prompt_len`` counts the text alone, as vLLM's does;
* the number of images is uniform over ``[floor(n(1-r)), min(sum of limits, ceil(n(1+r)))]`` where ``n`` is
  ``--random-mm-base-items-per-request`` and ``r`` ``--random-mm-num-mm-items-range-ratio``;
* each image's size is drawn from ``--random-mm-bucket-config``, ``{(height, width, frames): probability}``
  (zero-probability buckets dropped); a draw of a modality already at its ``--random-mm-limit-mm-per-prompt`` is
  thrown away and that modality's buckets are dropped for the rest of the request;
* the pixels are uniform random RGB, saved as JPEG (:func:`~llmload.datasets.images.random_jpeg`).

The counts and sizes come from ``numpy.random.default_rng(seed)`` in request order, each image's pixels from
``default_rng((seed, request, item))``: the same seed gives the same images, byte for byte, whichever process makes
them and in whatever order. vLLM draws the text and the pixels from its one generator too, so its bytes differ.

A bucket with more than one frame is a video: refused until llmload sends videos. vLLM rescales probabilities that
do not add up to 1; llmload refuses them (one line, exit 2), so a typo does not silently change the mix.
"""

from __future__ import annotations

import ast
import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llmload.common.errors import DatasetError
from llmload.datasets.base import SampleRequest, SamplesOnRead, Tokenizer
from llmload.datasets.images import data_url, random_jpeg
from llmload.datasets.random_dataset import RandomSamples, sample_random

#: (height, width, frames)
Bucket = tuple[int, int, int]

#: vLLM's defaults
DEFAULT_BASE_ITEMS = 1
DEFAULT_LIMITS: dict[str, int] = {"image": 255, "video": 1}
DEFAULT_BUCKETS: dict[Bucket, float] = {(256, 256, 1): 0.5, (720, 1280, 1): 0.5, (720, 1280, 16): 0.0}
#: images are made before the run while their ``data:`` URLs take at most this many bytes in all (a JPEG of noise is
#: ~0.8 bytes of URL a pixel); a bigger workload's are made when read: in a ``--processes`` run the master makes them
#: a part ahead, in one process they are made as each request goes out (~1.4 ms at 256×256, ~19 ms at 720×1280)
MADE_AHEAD_BYTES = 256 * 2**20
#: data-URL bytes a pixel, for the estimate above
_URL_BYTES_PER_PIXEL = 0.82


def parse_bucket_config(text: str | dict) -> dict[Bucket, float]:
    """``--random-mm-bucket-config``: a Python-literal dict ``{(H, W, T): probability}`` (vLLM reads it with
    ``ast.literal_eval``; string keys such as JSON's ``"(256, 256, 1)"`` are read the same way)."""
    value: Any = text
    if isinstance(text, str):
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            raise DatasetError(f"--random-mm-bucket-config: not a Python literal: {text}") from None
    if not isinstance(value, dict):
        raise DatasetError("--random-mm-bucket-config: Bucket config must parse to a dict.")
    out: dict[Bucket, float] = {}
    for key, prob in value.items():
        if isinstance(key, str):
            try:
                key = ast.literal_eval(key)
            except (ValueError, SyntaxError):
                pass
        if not (isinstance(key, tuple) and len(key) == 3 and all(type(v) is int for v in key)):
            raise DatasetError(f"--random-mm-bucket-config: Invalid bucket key {key!r}. Expected tuple (H, W, T).")
        if isinstance(prob, bool) or not isinstance(prob, int | float):
            raise DatasetError(f"--random-mm-bucket-config: the probability of {key} must be a number, got {prob!r}")
        out[key] = float(prob)
    return out


def parse_limits(text: str | dict) -> dict[str, int]:
    """``--random-mm-limit-mm-per-prompt``: JSON ``{"image": N, "video": N}``."""
    value: Any = text
    if isinstance(text, str):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"--random-mm-limit-mm-per-prompt: not JSON: {exc.msg}: {text}") from None
    if not isinstance(value, dict) or not all(
            isinstance(k, str) and type(v) is int and v >= 0 for k, v in value.items()):
        raise DatasetError('--random-mm-limit-mm-per-prompt: expected a JSON object of counts, e.g. '
                           f'{{"image": 2, "video": 0}}, got {text}')
    return dict(value)


@dataclass(frozen=True)
class MultiModalSpec:
    """The ``--random-mm-*`` flags."""

    base_items: int = DEFAULT_BASE_ITEMS
    items_range_ratio: float = 0.0
    limits: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_LIMITS))
    buckets: dict[Bucket, float] = field(default_factory=lambda: dict(DEFAULT_BUCKETS))

    def checked(self) -> tuple[list[Bucket], np.ndarray, int, int, int]:
        """``(buckets, probabilities, min items, max items, image limit)`` after vLLM's checks, in its order, with
        vLLM's messages, plus llmload's two refusals (probabilities must add up to 1; no videos yet)."""
        r = self.items_range_ratio
        if not 0.0 <= r <= 1.0:
            raise DatasetError("--random-mm-num-mm-items-range-ratio: num_mm_items_range_ratio must be in [0, 1].")
        if self.base_items < 0:
            raise DatasetError(f"--random-mm-base-items-per-request must be >= 0, got {self.base_items}")
        for (h, w, t), p in self.buckets.items():
            modality = "image" if t == 1 else "video"
            if t < 1 or h < 1 or w < 1:
                raise DatasetError(f"--random-mm-bucket-config: Invalid multimodal item configuration: {(h, w, t)}")
            if modality not in self.limits:
                raise DatasetError(f"--random-mm-bucket-config: Modality {modality} is not in "
                                   f"limit_mm_per_prompt: {list(self.limits)}")
            if p < 0:
                raise DatasetError("--random-mm-bucket-config: Bucket config values must be non-negative.")
        total = sum(self.buckets.values())
        if not math.isclose(total, 1.0, abs_tol=1e-6):
            raise DatasetError(f"--random-mm-bucket-config: the probabilities add up to {total:g}, not 1 (vLLM "
                               "rescales them; llmload asks for the mix you mean)")
        live = {b: p for b, p in self.buckets.items() if p > 0}
        if not live:
            raise DatasetError("--random-mm-bucket-config: Bucket config values must be non-zero.")
        videos = [b for b in live if b[2] > 1]
        if videos:
            raise DatasetError(f"--random-mm-bucket-config: {videos[0]} is a video ({videos[0][2]} frames): llmload "
                               "sends images only for now; give videos probability 0")
        limit = self.limits.get("image", 0)
        max_items = min(limit, math.ceil(self.base_items * (1 + r)))
        min_items = max(0, math.floor(self.base_items * (1 - r)))
        if min_items > max_items:
            raise DatasetError(f"--random-mm-*: Min num mm items is greater than max mm items: "
                               f"{min_items} > {max_items}")
        buckets = list(live)
        probs = np.array([live[b] for b in buckets], dtype=float)
        return buckets, probs / probs.sum(), min_items, max_items, limit


def sample_random_mm(tokenizer: Tokenizer, num_prompts: int, seed: int = 0, *, mm: MultiModalSpec | None = None,
                     **text_options: Any) -> RandomMMSamples:
    """``num_prompts`` requests of random text (``text_options``: :func:`sample_random`'s) and random images."""
    mm = mm or MultiModalSpec()
    buckets, probs, min_items, max_items, limit = mm.checked()
    text = sample_random(tokenizer, num_prompts, seed, **text_options)
    rng = np.random.default_rng(seed)
    counts = rng.integers(min_items, max_items + 1, size=num_prompts)
    # every draw is an image (videos are refused), and a request never draws past its limit: max_items <= limit,
    # so vLLM's discard-and-drop rule never fires here and each image is one draw
    assert int(counts.max(initial=0)) <= limit
    picks = rng.choice(len(buckets), size=int(counts.sum()), p=probs) if counts.sum() else np.zeros(0, dtype=int)
    samples = RandomMMSamples(text, seed, buckets, counts.astype(np.int32), picks.astype(np.int16))
    if samples.url_bytes_estimate() <= MADE_AHEAD_BYTES:
        samples.make_all()
    return samples


class RandomMMSamples(SamplesOnRead):
    """The requests of :func:`sample_random_mm`: the text's draws, each request's image count and each image's bucket
    are kept; the images are made when a request is read (or all at once, :meth:`make_all`)."""

    def __init__(self, text: RandomSamples, seed: int, buckets: list[Bucket], counts: np.ndarray,
                 picks: np.ndarray) -> None:
        self._text = text
        self._seed = int(seed)
        self._buckets = buckets
        self._counts = counts
        self._starts = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        self._picks = picks
        self._whole: list[SampleRequest] | None = None

    def make_all(self) -> None:
        """Make every request's images now and keep them (nothing is encoded while the run sends)."""
        self._whole = [self._made(i) for i in range(len(self))]

    def url_bytes_estimate(self) -> float:
        """About how many bytes the images' ``data:`` URLs take in all."""
        pixels = np.array([h * w for h, w, _ in self._buckets], dtype=float)
        return float(pixels[self._picks].sum() * _URL_BYTES_PER_PIXEL) if self._picks.size else 0.0

    def image_sizes(self, i: int) -> list[tuple[int, int]]:
        """Request ``i``'s images as ``(height, width)``, in the order they are sent."""
        picks = self._picks[self._starts[i]:self._starts[i + 1]]
        return [self._buckets[int(k)][:2] for k in picks]

    def __len__(self) -> int:
        return len(self._text)

    def request_id(self, i: int) -> str:
        return f"random-mm-{i}"

    def _made(self, i: int) -> SampleRequest:
        if self._whole is not None:
            return self._whole[i]
        text = self._text[i]
        images = [data_url(random_jpeg((self._seed, i, k), h, w), "image/jpeg")
                  for k, (h, w) in enumerate(self.image_sizes(i))]
        return SampleRequest(prompt=text.prompt, prompt_len=text.prompt_len,
                             expected_output_len=text.expected_output_len, request_id=self.request_id(i),
                             images=images)
