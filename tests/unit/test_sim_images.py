"""Images in the simulator's chat requests: Qwen2-VL's token count, a header-only size read, vLLM's error answers,
and how the parser adds image tokens to a prompt (text tokens unchanged, the prefix cache keyed by the image)."""

from __future__ import annotations

import base64
import io
import json
import struct
import zlib

import pytest
from PIL import Image

from llmload.sim.chat import render_chat, render_messages
from llmload.sim.config import SimConfig
from llmload.sim.errors import RequestError
from llmload.sim.images import ImageCache, image_size, image_tokens, load_base64, load_bytes, smart_resize
from llmload.sim.requests import RequestParser


def png(width: int, height: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), (10, 20, 30)).save(buf, format="PNG")
    return buf.getvalue()


def data_url(raw: bytes, media: str = "image/png") -> str:
    return f"data:{media};base64,{base64.b64encode(raw).decode()}"


def error_of(call, *args) -> tuple[int, dict]:
    with pytest.raises(RequestError) as info:
        call(*args)
    return info.value.status, json.loads(info.value.body)["error"]


# -- the token count -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("width", "height", "tokens"), [
    (224, 224, 64),      # 8 x 8 squares of 28 pixels
    (256, 256, 81),      # 256 / 28 = 9.14 -> 9: 252 x 252
    (512, 512, 324),     # 504 x 504
    (1280, 720, 1196),   # 728 x 1288 = 937,664 pixels: under the 1,003,520 bound, not scaled
    (28, 28, 4),         # 784 pixels, under MIN_PIXELS: scaled up to 56 x 56
    (1, 1, 4),           # rounds to 0 x 0, scaled up to the minimum
    (1024, 1024, 1225),  # 1036 x 1036 is over the bound: scaled down to 980 x 980
    (4000, 4000, 1225),  # scaled down to 980 x 980 (35 x 35 squares)
    (4000, 3000, 1230),  # scaled down keeping its aspect ratio: 840 x 1148 (30 x 41 squares)
    (224, 70, 16),       # 70 / 28 = 2.5 rounds half to even: 2 (56 pixels), not 3
    (224, 98, 32),       # 98 / 28 = 3.5 rounds half to even: 4 (112 pixels)
])
def test_image_tokens_table(width, height, tokens):
    assert image_tokens(width, height) == tokens


def test_huge_image_stays_within_max_pixels():
    h, w = smart_resize(8000, 6000)
    assert h * w <= 28 * 28 * 1280 and h % 28 == 0 and w % 28 == 0
    assert image_tokens(6000, 8000) == (h // 28) * (w // 28) <= 1280


def test_extreme_aspect_ratio_is_refused():
    with pytest.raises(ValueError, match="absolute aspect ratio must be smaller than 200"):
        image_tokens(201 * 28, 28)


# -- reading the size from the header ----------------------------------------------------------------------


def test_size_of_a_data_url():
    assert image_size(data_url(png(300, 200))) == (300, 200)
    jpeg = io.BytesIO()
    Image.new("RGB", (64, 48)).save(jpeg, format="JPEG")
    assert image_size(data_url(jpeg.getvalue(), "image/jpeg")) == (64, 48)


def test_only_the_header_is_read():
    """A PNG whose pixel data is cut off and garbled after the header still gives its size (nothing decodes it)."""
    raw = png(640, 480)
    header = raw[:33]  # signature (8) + the IHDR chunk (25): the size is there
    assert struct.unpack(">II", header[16:24]) == (640, 480)
    broken = header + b"\x00\x00\x00\x10IDAT" + b"not deflate data" + b"\x00" * 4
    with pytest.raises(zlib.error):
        zlib.decompress(b"not deflate data")
    assert load_bytes(broken).width == 640 and load_bytes(broken).height == 480
    with pytest.raises(OSError):
        Image.open(io.BytesIO(broken)).load()  # decoding the pixels would have failed


def test_same_bytes_same_key():
    a, b = load_bytes(png(10, 10)), load_bytes(png(10, 10))
    assert a.key == b.key and a.key != load_bytes(png(11, 10)).key


# -- vLLM's answers to bad image data ------------------------------------------------------------------------


def test_bytes_that_are_not_an_image():
    status, err = error_of(image_size, data_url(b"hello, not an image"))
    assert status == 400
    assert err == {"message": "Failed to load image: cannot identify image file <_io.BytesIO object>",
                   "type": "BadRequestError", "param": None, "code": 400}


def test_invalid_base64():
    status, err = error_of(image_size, "data:image/png;base64,iVBOR$$w0KGgo=")
    assert (status, err["message"], err["type"]) == (400, "Failed to load image: Non-base64 digit found",
                                                     "BadRequestError")
    status, err = error_of(load_base64, "abc")
    assert status == 400 and err["message"].startswith("Failed to load image: ")


def test_data_url_without_comma():
    url = "data:image/png;base64" + "A" * 40
    status, err = error_of(image_size, url)
    assert status == 400 and err["message"] == f"Invalid data URL '{url[:32]}': missing ',' separator."


def test_data_url_not_base64():
    status, err = error_of(image_size, "data:image/png,rawbytes")
    assert status == 501
    assert err == {"message": "Only base64 data URLs are supported for now.", "type": "NotImplementedError",
                   "param": None, "code": 501}


@pytest.mark.parametrize("scheme", ["http", "https", "file"])
def test_urls_are_not_fetched(scheme):
    status, err = error_of(image_size, f"{scheme}://example.com/cat.png")
    assert status == 400 and err["message"] == f"llmload sim cannot fetch image URLs ({scheme}); send data: URLs"


# -- the multimodal cache ----------------------------------------------------------------------------------


def test_image_cache_counts_items_and_forgets_the_oldest():
    cache = ImageCache(capacity=2)
    assert [cache.see(k) for k in ("a", "b", "a", "c", "b", "a")] == [False, False, True, False, False, False]
    assert (cache.queries, cache.hits) == (6, 1)


# -- image parts in the three chat shapes -------------------------------------------------------------------


IMG = data_url(png(224, 224))
RAW_B64 = IMG.split(",", 1)[1]


@pytest.mark.parametrize("part", [
    {"type": "image_url", "image_url": {"url": IMG}},
    {"type": "image_url", "image_url": IMG},
    {"type": "input_image", "image_url": IMG},
    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": RAW_B64}},
    {"type": "image", "source": {"type": "url", "url": IMG}},
])
def test_every_image_shape_costs_its_tokens(part):
    text_part = {"type": "input_text" if part["type"] == "input_image" else "text", "text": "what is this?"}
    plain = render_messages([{"role": "user", "content": [text_part]}], ImageCache())
    cache = ImageCache()
    rendered = render_messages([{"role": "user", "content": [text_part, part, part]}], cache)
    assert rendered.text == plain.text == "user: what is this?\n"
    assert (rendered.images, rendered.image_tokens) == (2, 128)
    assert (cache.queries, cache.hits) == (2, 1)
    assert rendered.hash_text is not None and len(rendered.hash_text) == len(plain.text) + 2 * 64 * 4


def test_video_is_refused_and_render_chat_ignores_media():
    messages = [{"role": "user", "content": [{"type": "text", "text": "hi"},
                                             {"type": "video_url", "video_url": {"url": "data:video/mp4;base64,AA=="}}]}]
    status, err = error_of(render_messages, messages, ImageCache())
    assert status == 400 and err["message"] == "llmload sim serves images only, not video"
    assert render_chat(messages) == "user: hi\n"


def _chat(content: list, prefix_cache: int = 0) -> dict:
    cfg = SimConfig(model="m", prefix_cache_tokens=prefix_cache)
    return RequestParser(cfg).parse("chat", json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": content}], "max_tokens": 4}).encode())


def test_parser_adds_image_tokens_to_the_prompt():
    text = {"type": "text", "text": "describe the picture in detail " * 10}
    image = {"type": "image_url", "image_url": {"url": IMG}}
    without, with_two = _chat([text]), _chat([text, image, image])
    assert with_two.prompt_tokens == without.prompt_tokens + 128
    assert (with_two.images, with_two.image_tokens) == (2, 128)
    assert with_two.text_offset == without.text_offset  # the text (and so the answer's words) is the same


def test_prefix_cache_keys_depend_on_the_image():
    text = {"type": "text", "text": "x" * 400}
    other = data_url(png(224, 225))
    first = _chat([text, {"type": "image_url", "image_url": {"url": IMG}}, text], prefix_cache=10_000)
    again = _chat([text, {"type": "image_url", "image_url": {"url": IMG}}, text], prefix_cache=10_000)
    changed = _chat([text, {"type": "image_url", "image_url": {"url": other}}, text], prefix_cache=10_000)
    assert first.block_hashes == again.block_hashes
    assert len(first.block_hashes) == first.prompt_tokens // 16
    shared = 400 // 4 // 16  # the blocks of the text before the image
    assert first.block_hashes[:shared] == changed.block_hashes[:shared]
    assert first.block_hashes[shared:] != changed.block_hashes[shared:]
