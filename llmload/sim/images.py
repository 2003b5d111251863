"""Images in chat-style requests: their size from the image header, and the prompt tokens they cost.

A vision model turns an image into a number of prompt tokens that depends only on its size. The simulator
counts them as Qwen2-VL does in vLLM (``smart_resize`` in transformers' Qwen2-VL image processor): each side is
rounded to a multiple of 28 pixels (14-pixel patches merged 2×2), the area is then brought within
``[MIN_PIXELS, MAX_PIXELS]`` keeping the aspect ratio, and each 28×28 square is one token. The bounds are the
image processor class's defaults (56·56 and 28·28·1280 pixels: 4 to 1280 tokens an image).

Reading an image costs a base64 decode and a header read: :func:`load_image` opens the bytes with Pillow, which
reads only the header to learn the size; the pixels are never decoded, so a large image stays cheap and an image
whose pixel data is corrupt after a valid header still counts. What vLLM answers for bad data (400, or 501 for a
data URL that is not base64) is reproduced with its messages; URLs other than ``data:`` are refused, because the
simulator does not reach the network.

:class:`ImageCache` is the model of vLLM's multimodal processor cache behind ``vllm:mm_cache_queries`` and
``vllm:mm_cache_hits``: a bounded LRU of image hashes, one per simulator process.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import math
import re
from collections import OrderedDict
from dataclasses import dataclass
from io import BytesIO

from llmload.sim.errors import bad_request, not_implemented

#: pixels per token side: 14-pixel patches, merged 2×2 (Qwen2-VL's ``patch_size * merge_size``)
FACTOR = 28
#: transformers' Qwen2-VL image processor class defaults (``size.shortest_edge`` / ``size.longest_edge``)
MIN_PIXELS = 56 * 56
MAX_PIXELS = 28 * 28 * 1280
#: ``smart_resize`` refuses images longer than this many times their width (or the other way round)
MAX_ASPECT_RATIO = 200
#: vLLM's ``sanitize_message`` drops object addresses from error messages
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+>")
#: a character base64 does not use (strict decoding refuses it)
_NOT_BASE64 = re.compile(r"[^A-Za-z0-9+/=]")


def smart_resize(height: int, width: int, min_pixels: int = MIN_PIXELS,
                 max_pixels: int = MAX_PIXELS) -> tuple[int, int]:
    """The size (height, width) the image is resized to: multiples of 28 with an area within the bounds.

    Rounding is Python's ``round`` (half to even: a side of 70 pixels, 2.5 squares, rounds to 56), as
    transformers does it. Raises ``ValueError`` for an aspect ratio over 200, with transformers' message.
    """
    if height < 1 or width < 1:
        raise ValueError(f"image size must be positive, got {width}x{height}")
    if max(height, width) / min(height, width) > MAX_ASPECT_RATIO:
        raise ValueError(f"absolute aspect ratio must be smaller than {MAX_ASPECT_RATIO}, "
                         f"got {max(height, width) / min(height, width)}")
    h_bar = round(height / FACTOR) * FACTOR
    w_bar = round(width / FACTOR) * FACTOR
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(FACTOR, math.floor(height / beta / FACTOR) * FACTOR)
        w_bar = max(FACTOR, math.floor(width / beta / FACTOR) * FACTOR)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / FACTOR) * FACTOR
        w_bar = math.ceil(width * beta / FACTOR) * FACTOR
    return h_bar, w_bar


def image_tokens(width: int, height: int) -> int:
    """Prompt tokens of a ``width`` × ``height`` image (Qwen2-VL's count): 224×224 → 64, 256×256 → 81."""
    h_bar, w_bar = smart_resize(height, width)
    return (h_bar // FACTOR) * (w_bar // FACTOR)


@dataclass(frozen=True, slots=True)
class LoadedImage:
    """What the simulator keeps of an image: its size and a hash of its bytes (the multimodal cache's key)."""

    width: int
    height: int
    key: str

    @property
    def tokens(self) -> int:
        """Prompt tokens it costs (:func:`image_tokens`); a 400 for an aspect ratio over 200."""
        try:
            return image_tokens(self.width, self.height)
        except ValueError as exc:
            raise bad_request(str(exc)) from None


def load_bytes(raw: bytes) -> LoadedImage:
    """Read the size from the image's header only (Pillow opens lazily; the pixels are never decoded). Pillow is
    imported here, with the first image: most simulators never see one, and the import is a tenth of their start."""
    from PIL import Image

    try:
        with Image.open(BytesIO(raw)) as img:
            width, height = img.size
    except (OSError, SyntaxError, RuntimeError, ValueError, Image.DecompressionBombError) as exc:
        # what Pillow raises for bytes it cannot read as an image (vLLM's ``ImageMediaIO.load_bytes`` catches these)
        raise bad_request(_ADDRESS.sub(">", f"Failed to load image: {exc}")) from None
    return LoadedImage(width, height, hashlib.blake2b(raw, digest_size=8).hexdigest())


def load_base64(data: object) -> LoadedImage:
    """An image sent as base64 text (a data URL's payload, Anthropic's ``source.data``); strict decoding."""
    if not isinstance(data, str):
        raise bad_request("image data must be a base64 string")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        # pybase64 (vLLM's decoder) and older Pythons name a stray character so; Python 3.11's words differ
        reason = "Non-base64 digit found" if _NOT_BASE64.search(data) else str(exc)
        raise bad_request(f"Failed to load image: {reason}") from None
    return load_bytes(raw)


def load_image(url: object) -> LoadedImage:
    """An image named by a URL: a base64 ``data:`` URL, read as vLLM's media connector reads it.

    The simulator never fetches: ``http``, ``https`` and ``file`` URLs get a 400 that says so.
    """
    if not isinstance(url, str) or not url:
        raise bad_request("an image part needs a URL (a string)")
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme in ("http", "https", "file"):
        raise bad_request(f"llmload sim cannot fetch image URLs ({scheme}); send data: URLs")
    if scheme != "data":
        raise bad_request("The URL must be either a HTTP, data or file URL.")
    spec, comma, payload = url[5:].partition(",")
    if not comma:
        raise bad_request(f"Invalid data URL '{url[:32]}': missing ',' separator.")
    if not spec.endswith(";base64"):
        raise not_implemented("Only base64 data URLs are supported for now.")
    return load_base64(payload)


def image_size(url: str) -> tuple[int, int]:
    """``(width, height)`` of the image at a data URL; raises the simulator's 400 (or 501) for bad data."""
    image = load_image(url)
    return image.width, image.height


class ImageCache:
    """The last ``capacity`` images seen (by hash), least recently used out, with vLLM's counters.

    ``queries`` counts images looked up and ``hits`` those seen before, one per image (vLLM counts
    multimodal items, not tokens).
    """

    def __init__(self, capacity: int = 256) -> None:
        self.capacity = max(1, capacity)
        self._keys: OrderedDict[str, None] = OrderedDict()
        self.queries = 0
        self.hits = 0

    def see(self, key: str) -> bool:
        """Look an image up (and remember it); whether it was a hit."""
        keys = self._keys
        self.queries += 1
        if key in keys:
            keys.move_to_end(key)
            self.hits += 1
            return True
        keys[key] = None
        if len(keys) > self.capacity:
            keys.popitem(last=False)
        return False

