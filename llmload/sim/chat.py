"""The chat prompt as the engine sees it: ``role: content`` lines, one per message, plus the images' tokens.

A stand-in for a chat template: re-sending a conversation's history plus new messages gives a text that starts
with the previous turn's text, so the prefix cache sees the shared history. Content given as a list of parts
contributes its text parts (``text``, the Responses API's ``input_text``) and its images: OpenAI chat's
``image_url``, the Responses API's ``input_image`` and Anthropic's ``image`` (:mod:`llmload.sim.images` reads
them and counts their tokens). Videos are refused; other parts count by their ``text``, if any, as before.

Images do not change the text (so a request's text tokens are those of the same request without its images);
they add their tokens to the prompt count, and a marker per image (its hash, padded to the image's tokens at
4 characters a token) goes into the text the prefix cache hashes, at the image's place.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llmload.sim.errors import bad_request
from llmload.sim.images import ImageCache, LoadedImage, load_base64, load_image
from llmload.sim.prefix_cache import CHARS_PER_TOKEN
from llmload.sim.tools import render_calls

#: part types that carry an image (OpenAI chat, OpenAI Responses, Anthropic Messages)
IMAGE_PARTS = frozenset({"image_url", "input_image", "image"})
#: part types that carry a video
VIDEO_PARTS = frozenset({"video_url", "input_video", "video"})


@dataclass(frozen=True, slots=True)
class Rendered:
    """A rendered prompt: its text, and what its images add."""

    text: str
    #: prompt tokens of the images (added to the text's)
    image_tokens: int = 0
    images: int = 0
    #: the text with each image's marker in place, for the prefix cache; None without images
    hash_text: str | None = None


@dataclass(slots=True)
class _Parts:
    """The text as it is built, piece by piece, and each image's marker with its place among the pieces."""

    text: list[str] = field(default_factory=list)
    marks: list[tuple[int, str]] = field(default_factory=list)
    image_tokens: int = 0

    def image(self, image: LoadedImage, cache: ImageCache) -> None:
        tokens = image.tokens
        cache.see(image.key)
        self.image_tokens += tokens
        self.marks.append((len(self.text), f"\x00image {image.key}".ljust(tokens * CHARS_PER_TOKEN, "\x00")))

    def rendered(self) -> Rendered:
        text = "".join(self.text)
        if not self.marks:
            return Rendered(text)
        hashed = list(self.text)
        for at, mark in reversed(self.marks):
            hashed.insert(at, mark)
        return Rendered(text, self.image_tokens, len(self.marks), "".join(hashed))


def render_chat(messages: object) -> str:
    """The chat prompt's text (images left out, never read): what the engine counts as the text tokens."""
    return render_messages(messages, None).text


def render_messages(messages: object, images: ImageCache | None) -> Rendered:
    """Render ``messages``; with ``images`` (the process's :class:`ImageCache`), read and count their images."""
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' must be a non-empty list", "messages")
    out = _Parts()
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or "role" not in message:
            raise bad_request(f"messages[{i}] must be an object with a 'role'", "messages")
        content = message.get("content")
        if isinstance(content, str) or content is None:  # the common case: one piece a message
            out.text.append(f"{message['role']}: {content or ''}{render_calls(message)}\n")
            continue
        if not isinstance(content, list):
            raise bad_request(f"messages[{i}].content must be a string or a list of parts", "messages")
        out.text.append(f"{message['role']}: ")
        for part in content:
            if isinstance(part, dict):
                _part(part, out, images)
        out.text.append(f"{render_calls(message)}\n")
    return out.rendered()


def _part(part: dict, out: _Parts, images: ImageCache | None) -> None:
    """One content part: its text, or its image (read only when ``images`` is given)."""
    kind = part.get("type")
    if kind in IMAGE_PARTS:
        if images is not None:
            out.image(_image_of(kind, part), images)
    elif kind in VIDEO_PARTS:
        if images is not None:
            raise bad_request("llmload sim serves images only, not video", "messages")
    else:
        text = part.get("text", "")
        if isinstance(text, str):
            out.text.append(text)


def _image_of(kind: str, part: dict) -> LoadedImage:
    """The image of an ``image_url`` (OpenAI chat), ``input_image`` (Responses) or ``image`` (Anthropic) part."""
    if kind == "image_url":
        given = part.get("image_url")
        return load_image(given.get("url") if isinstance(given, dict) else given)
    if kind == "input_image":
        if part.get("image_url") is None and part.get("file_id") is not None:
            raise bad_request("llmload sim cannot read uploaded files (file_id); send data: URLs")
        return load_image(part.get("image_url"))
    source = part.get("source")
    if not isinstance(source, dict):
        raise bad_request("an image part needs a 'source' object")
    if source.get("type") == "base64":
        return load_base64(source.get("data"))
    if source.get("type") == "url":
        return load_image(source.get("url"))
    raise bad_request(f"llmload sim reads base64 and url image sources, not {source.get('type')!r}")
