"""What every wire dialect provides, and the one event shape the Locust users read.

A backend turns (prompt, output length) into a request body and turns each stream payload into a
:class:`StreamEvent`. Parsing never raises: a malformed or error payload becomes an event with
``error`` set, so a bad server byte fails one request instead of crashing a greenlet.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import orjson

from llmload.client.sse import DONE
from llmload.common.errors import EndpointError

#: longest error message kept from the wire (they end up in records and summaries)
MAX_ERROR_CHARS = 300


class StreamEvent(NamedTuple):
    """One parsed stream event. A NamedTuple: cheap to build once per event."""

    #: this event's new text (a delta, even where the wire sends cumulative text)
    text: str = ""
    #: the event carries content: non-empty text, reasoning or a tool-call delta (docs/design.md "Metric definitions", TTFT rule)
    content: bool = False
    #: counts under vLLM's TTFT rule: OpenAI events with a non-empty ``choices``; native dialects'
    #: events that carry a generation step
    has_choices: bool = False
    #: tokens this event carries when the wire says so (SGLang's count delta, TGI's one per event)
    tokens: int | None = None
    #: ``usage.completion_tokens`` (or the dialect's equivalent) wherever it appears
    completion_tokens: int | None = None
    #: ``usage.prompt_tokens`` (or the dialect's equivalent) wherever it appears
    prompt_tokens: int | None = None
    finish_reason: str | None = None
    #: one-line message: an error object inside a 200 stream, or an unparseable payload
    error: str | None = None
    #: reasoning text delta (``reasoning_content`` / ``reasoning``), kept apart from ``text``
    reasoning: str = ""
    #: prompt tokens the server served from its prefix cache (``usage.prompt_tokens_details.cached_tokens``,
    #: SGLang's ``meta_info.cached_tokens``) wherever it appears
    cached_tokens: int | None = None


#: returned for payloads that carry nothing (``[DONE]`` passed in by mistake)
EMPTY = StreamEvent()


def one_line(message: object) -> str:
    """Collapse a wire message to one bounded line, as records and summaries need."""
    text = " ".join(str(message).split())
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."


def error_message(data: dict) -> str | None:
    """The message of an error object in a decoded event, or ``None`` when it is not an error.

    Covers ``{"error": "..."}`` (transformers serve, TGI, Triton), ``{"error": {"message": ...}}``
    (OpenAI, newer vLLM) and ``{"object": "error", "message": ...}`` (older vLLM).
    """
    err = data.get("error")
    if err is None:
        if data.get("object") == "error":
            return one_line(data.get("message") or "error")
        return None
    if isinstance(err, dict):
        err = err.get("message") or err
    return one_line(err)


def decode(payload: bytes) -> dict | StreamEvent:
    """Decode one payload to a dict, or an error event when it is not a JSON object."""
    try:
        data = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        return StreamEvent(error=one_line(f"malformed stream event: {exc}: {payload[:80]!r}"))
    if not isinstance(data, dict):
        return StreamEvent(error=one_line(f"malformed stream event: not a JSON object: {payload[:80]!r}"))
    return data


def as_int(value: Any) -> int | None:
    """An int from the wire, or None: servers send null, floats or junk in count fields."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def as_str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def decode_response(body: bytes) -> Any:
    """Decode a non-streaming response body, raising :class:`EndpointError` on junk or an error."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise EndpointError(one_line(f"malformed response body: {exc}: {body[:80]!r}")) from None
    if isinstance(data, dict) and (msg := error_message(data)) is not None:
        raise EndpointError(f"server error: {msg}")
    return data


class Backend:
    """One wire dialect. Stateless and shared; per-request state comes from :meth:`new_state`."""

    #: registry name (``--backend``)
    name: str = ""
    #: request path appended to the base URL
    default_path: str = ""
    #: whether each event's token count is on the wire (else 1 per event or re-tokenize)
    tokens_per_event_known: bool = False
    #: chat dialects accept ``messages`` (multi-turn replay)
    chat: bool = False
    #: a pooling dialect (embeddings, pooling, rerank): one JSON answer, no tokens generated, no TTFT
    pooling: bool = False
    #: requests stream unless the body says otherwise
    streams: bool = True
    #: what ``--endpoint`` must end with for this dialect (vLLM's check for the pooling backends); '' any path
    endpoint_suffix: str = ""

    def build_body(
        self,
        prompt: str,
        output_len: int,
        *,
        model: str,
        ignore_eos: bool,
        extra: dict | None = None,
        messages: list[dict] | None = None,
        images: list[str] | None = None,
        inputs: list[str] | None = None,
    ) -> dict:
        """The JSON request body; ``images`` (URLs) go after the text of the last user message, in the dialect's
        part shapes; ``inputs``: a pooling request's texts; ``extra`` is merged last so users can override any
        field."""
        if self.pooling:
            body = self._pooling_body(prompt, inputs, model=model)
        else:
            body = self._body(prompt, output_len, model=model, ignore_eos=ignore_eos, messages=messages)
        if images:
            self.add_images(body, images)
        if extra:
            body.update(extra)
        return body

    def _pooling_body(self, prompt: str, inputs: list[str] | None, *, model: str) -> dict:
        raise NotImplementedError

    @property
    def sends_images(self) -> bool:
        """Whether this dialect puts images into its requests (:meth:`add_images`)."""
        return type(self).add_images is not Backend.add_images

    def add_images(self, body: dict, images: list[str]) -> None:
        """Put ``images`` (``data:`` or remote URLs) into ``body`` after the prompt's text; dialects that take
        images override this (the run refuses images on the others before the first request)."""
        raise EndpointError(f"--backend {self.name} sends no images")

    def _body(
        self, prompt: str, output_len: int, *, model: str, ignore_eos: bool, messages: list[dict] | None
    ) -> dict:
        raise NotImplementedError

    def auth_headers(self, api_key: str) -> dict[str, str]:
        """The headers that carry ``api_key`` (never printed): ``Authorization: Bearer`` for OpenAI's wire."""
        return {"Authorization": f"Bearer {api_key}"}

    def extra_headers(self) -> dict[str, str]:
        """Headers every request of this dialect sends (an API version)."""
        return {}

    @property
    def openai_wire(self) -> bool:
        """Its events are OpenAI's completion/chat chunks, read exactly as ``OpenAICompletions`` reads them: the
        compiled reader then picks their fields itself (llmload/client/transport/_cread.c)."""
        return False

    def new_state(self) -> Any:
        """Mutable per-request parsing state (None for dialects whose events are self-contained)."""
        return None

    def parse_event(self, payload: bytes, state: Any) -> StreamEvent:
        """Parse one stream payload (from :func:`llmload.client.sse.parse_line`); never raises.

        Decoding, in-stream error objects and odd shapes (``choices`` that is not a list...) are
        handled here once; :meth:`_event` reads a well-formed dict.
        """
        if payload == DONE:
            return EMPTY
        data = decode(payload)
        if isinstance(data, StreamEvent):
            return data
        msg = error_message(data)
        if msg is not None:
            return StreamEvent(error=msg)
        try:
            return self._event(data, state)
        except (AttributeError, TypeError, KeyError, IndexError, ValueError) as exc:
            return StreamEvent(error=one_line(f"malformed stream event: {exc!r}: {payload[:80]!r}"))

    def _event(self, data: dict, state: Any) -> StreamEvent:
        raise NotImplementedError

    def response_cached_tokens(self, body: bytes) -> int | None:
        """The prefix-cache hits a non-streaming response reports (None: not reported, or not in this dialect)."""
        return None

    def parse_response(self, body: bytes) -> tuple[str, int | None, int | None]:
        """``(text, completion_tokens, prompt_tokens)`` of a non-streaming response.

        Raises :class:`EndpointError` when the body is not what this dialect returns.
        """
        raise NotImplementedError

    def parse_pooling(self, body: bytes) -> int | None:
        """A pooling answer's ``usage.prompt_tokens`` (None when it reports none); raises :class:`EndpointError`
        when the body is not this dialect's answer."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} {self.default_path}>"


def with_parts(messages: list[dict], text_type: str, parts: list[dict]) -> list[dict]:
    """``messages`` with the last user message's content made ``[{"type": text_type, "text": ...}, *parts]`` (text
    first, as vLLM's benchmark sends images; a content that is already parts gets ``parts`` appended). A new list:
    the sample's own messages stay as they are."""
    out = list(messages)
    for i in range(len(out) - 1, -1, -1):
        message = out[i]
        if message.get("role") == "user":
            content = message.get("content")
            head = content if isinstance(content, list) else [{"type": text_type, "text": content or ""}]
            out[i] = {**message, "content": [*head, *parts]}
            return out
    return [*out, {"role": "user", "content": parts}]
