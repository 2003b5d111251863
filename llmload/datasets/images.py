"""Images as a request carries them: ``data:`` URLs made from pixels or read from files, remote URLs as given.

vLLM's benchmark sends images inline, base64 in a ``data:`` URL inside an ``image_url`` chat part, and so does
llmload: the server then spends no time fetching them, and the request's bytes on the wire are what it would be
in production for uploaded images. Synthetic images are random pixels saved as JPEG at Pillow's default quality
(vLLM's ``process_image``): noise does not compress, so a 256×256 image is ~40 KB and a 720×1280 one ~550 KB.
"""

from __future__ import annotations

import base64
import io
from pathlib import Path

import numpy as np

from llmload.common.errors import DatasetError
from llmload.datasets.base import reading

#: schemes sent as they are (the server fetches them)
REMOTE_SCHEMES = ("http://", "https://")
#: the image formats a file may hold, by Pillow's format name, and the MIME type of their data URL
_MIME = {"JPEG": "image/jpeg", "PNG": "image/png", "GIF": "image/gif", "WEBP": "image/webp", "BMP": "image/bmp"}


def data_url(raw: bytes, mime: str) -> str:
    """``data:<mime>;base64,<raw in base64>``."""
    return f"data:{mime};base64,{base64.b64encode(raw).decode('ascii')}"


def random_jpeg(seed: tuple[int, ...], height: int, width: int) -> bytes:
    """A ``height``×``width`` JPEG of uniform random RGB pixels drawn from ``numpy.random.default_rng(seed)``: the
    same seed gives the same bytes (Pillow's encoder is deterministic)."""
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(out, format="JPEG")
    return out.getvalue()


def image_url(source: str, base: Path) -> str:
    """What a dataset row's image becomes in the request: a remote or ``data:`` URL as given, a local file (absolute,
    or relative to ``base``, the dataset's folder) read and sent as a ``data:`` URL. A file that is missing, unreadable
    or not an image Pillow knows is a :class:`DatasetError` naming it."""
    if source.startswith(REMOTE_SCHEMES) or source.startswith("data:"):
        return source
    path = Path(source.removeprefix("file://"))
    if not path.is_absolute():
        path = base / path
    with reading(path, "image"):
        raw = path.read_bytes()
    return data_url(raw, image_mime(raw, path))


def image_mime(raw: bytes, path: Path | str) -> str:
    """The MIME type of an image file's bytes, from its header (Pillow reads only that); a DatasetError when Pillow
    does not know it as an image."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(raw)) as image:
            kind = image.format or ""
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise DatasetError(f"{path}: not an image file ({type(exc).__name__}: {exc})") from None
    mime = _MIME.get(kind)
    if mime is None:
        raise DatasetError(f"{path}: image format {kind or 'unknown'} is not one servers take (use "
                           f"{', '.join(sorted(_MIME))})")
    return mime
