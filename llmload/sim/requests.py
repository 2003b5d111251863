"""Turn an HTTP request body into a :class:`GenRequest`, or an error response like real servers send."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import orjson

from llmload.sim.chat import Rendered, render_messages
from llmload.sim.chat import render_chat as render_chat
from llmload.sim.config import SimConfig
from llmload.sim.errors import RequestError as RequestError
from llmload.sim.errors import bad_request, extra_forbidden, openai_error
from llmload.sim.images import ImageCache
from llmload.sim.pooling import POOLING_KINDS, PoolSpec, parse_pooling
from llmload.sim.prefix_cache import id_block_hashes, text_block_hashes
from llmload.sim.text import estimate_tokens, text_of, text_offset
from llmload.sim.tools import Output, ToolsError, output_of, render_tools

#: text -> token ids (``--tokenizer``)
Tokenize = Callable[[str], Sequence[int]]

#: the request kinds whose first ``--reasoning-tokens`` output tokens are reasoning (the chat-style routes)
REASONING_KINDS = ("chat", "responses", "messages")
#: path -> request kind
ROUTES: dict[str, str] = {
    "/v1/completions": "completions",
    "/v1/chat/completions": "chat",
    "/v1/responses": "responses",
    "/v1/messages": "messages",
    "/generate": "sglang",
    "/generate_stream": "tgi",
    "/v2/models/ensemble/generate_stream": "trt",
}


@dataclass(slots=True)
class GenRequest:
    """A validated generation request."""

    kind: str
    stream: bool
    model: str
    prompt_tokens: int
    max_tokens: int
    #: tokens the engine will generate (max_tokens, or fewer on an early EOS)
    output_tokens: int
    include_usage: bool
    text_offset: int
    ignore_eos: bool
    #: chained keys of the prompt's full blocks (empty when the prefix cache is off)
    block_hashes: list[int] = field(default_factory=list)
    #: the prefix cache is on: usage reports ``prompt_tokens_details``
    prefix_cache: bool = False
    #: prompt tokens found in the prefix cache, set when the engine admits the request
    cached_tokens: int = 0
    #: chat, responses, messages: how many of the output tokens are reasoning (sent first)
    reasoning_tokens: int = 0
    #: ``--trace-prompts``: the chat messages (role and content) or the prompt, as received
    trace_prompt: object = None
    #: the LoRA adapter the request named as its model ('' for a base model)
    adapter: str = ""
    #: structured output (``response_format``, :mod:`llmload.sim.structured`): the output, one piece of JSON string
    #: body per token (reasoning words first); None: the sim's words (:func:`~llmload.sim.text.text_of`)
    pieces: tuple[bytes, ...] | None = None
    #: with a response format: "valid", or "broken" (``--invalid-json-rate``); '' without one
    structured: str = ""
    #: chat with ``tools``: the function this answer calls, its arguments the pieces (:mod:`llmload.sim.tools`)
    tool: str = ""
    #: images in the prompt and the prompt tokens they cost (part of ``prompt_tokens``; :mod:`llmload.sim.images`)
    images: int = 0
    image_tokens: int = 0
    #: a pooling request (:mod:`llmload.sim.pooling`): no output, its answer one JSON body when the prefill is done
    pooled: PoolSpec | None = None

    def text(self, start: int, count: int) -> bytes:
        """The output's tokens ``start`` to ``start + count``, concatenated (JSON string body)."""
        if self.pieces is None:
            return text_of(self.text_offset, start, count)
        return b"".join(self.pieces[start:start + count])


def _int_field(body: dict, name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_request(f"'{name}' must be an integer, got {value!r}", name)
    if value < 1:
        raise bad_request(f"'{name}' must be at least 1, got {value}", name)
    return value


def _is_ids(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in value)


def _prompt_text(prompt: object) -> tuple[str, list[int] | None]:
    """Completions accept a string, a list with one string, or token ids."""
    if isinstance(prompt, str):
        return prompt, None
    if isinstance(prompt, list) and prompt:
        if _is_ids(prompt):
            return "", prompt  # type: ignore[return-value]
        if len(prompt) == 1 and isinstance(prompt[0], str):
            return prompt[0], None
        if len(prompt) == 1 and _is_ids(prompt[0]):
            return "", prompt[0]
        raise bad_request("llmload sim serves one prompt per request (batched prompts are not supported)", "prompt")
    raise bad_request("'prompt' must be a non-empty string or a list of token ids", "prompt")


class RequestParser:
    """Validates bodies for every route; counts prompt tokens and decides each request's output length.

    ``tokenize`` (``--tokenizer``) turns text into token ids; without it a prompt is ~4 characters a token.
    """

    def __init__(self, config: SimConfig, tokenize: Tokenize | None = None) -> None:
        self.config = config
        self.tokenize = tokenize
        #: the images this process has seen, for vLLM's multimodal cache counters
        self.images = ImageCache()

    def count(self, text: str) -> int:
        """Prompt tokens of a text: the tokenizer's ids, else ~4 characters a token."""
        return len(self.tokenize(text)) if self.tokenize is not None else estimate_tokens(text)

    def parse(self, kind: str, raw: bytes) -> GenRequest:
        """The request on route ``kind`` (a value of :data:`ROUTES` or of the pooling routes), or a RequestError."""
        cfg = self.config
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise bad_request(f"request body is not valid JSON: {exc}") from None
        if not isinstance(body, dict):
            raise bad_request("request body must be a JSON object")
        if cfg.dialect == "transformers" and "ignore_eos" in body:
            raise extra_forbidden("ignore_eos", body["ignore_eos"])
        model = body.get("model") or cfg.model
        if kind in POOLING_KINDS:
            return self._pooling(kind, body, model)
        if kind in ("completions", "chat"):
            fields = _openai_fields(kind, body, model, cfg, self.images)
        elif kind == "responses":
            fields = _responses_fields(body, model, cfg, self.images)
        elif kind == "messages":
            fields = _messages_fields(body, model, cfg, self.images)
        elif kind == "sglang":
            fields = _sglang_fields(body)
        elif kind == "tgi":
            fields = _tgi_fields(body)
        else:
            fields = _trt_fields(body)
        return self._generation(kind, body, raw, model, fields)

    def _generation(self, kind: str, body: dict, raw: bytes, model: str, fields: _Fields) -> GenRequest:
        """Count the prompt (text and images), check the context, and decide the output."""
        cfg = self.config
        text, ids, media = fields.text, fields.ids, fields.media or _TEXT_ONLY
        if ids is None and self.tokenize is not None:
            ids = self.tokenize(text)
        prompt_tokens = (len(ids) if ids is not None else estimate_tokens(text)) + media.image_tokens
        max_tokens = fields.max_tokens
        if fields.default_max:
            # no max_tokens in a chat request: what is left of the context, at most the default (as vLLM)
            max_tokens = max(1, min(max_tokens, cfg.max_model_len - prompt_tokens))
        if prompt_tokens + max_tokens > cfg.max_model_len:
            raise bad_request(
                f"This model's maximum context length is {cfg.max_model_len} tokens. However, you requested "
                f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, {max_tokens} in the completion).",
            )
        offset = text_offset(cfg.seed, text) if text else (cfg.seed + prompt_tokens) % 1000
        output_tokens = _output_tokens(cfg, offset, max_tokens, fields.ignore_eos)
        reasoning = min(cfg.reasoning_tokens, output_tokens) if kind in REASONING_KINDS else 0
        out = _output(cfg, kind, body, raw, offset, output_tokens, reasoning)
        hashed = media.hash_text  # with images: the text with their markers, hashed as text (chat.py)
        return GenRequest(
            kind=kind, stream=fields.stream, model=model, adapter=model if model in cfg.lora_modules else "",
            prompt_tokens=prompt_tokens, max_tokens=max_tokens, output_tokens=output_tokens,
            include_usage=fields.include_usage, text_offset=offset, ignore_eos=fields.ignore_eos,
            block_hashes=_block_hashes(cfg, hashed or text, None if hashed else ids, prompt_tokens),
            prefix_cache=cfg.prefix_cache, reasoning_tokens=out.reasoning,
            trace_prompt=_trace_prompt(kind, body, fields) if cfg.trace_prompts else None,
            pieces=out.pieces, structured=out.structured, tool=out.tool,
            images=media.images, image_tokens=media.image_tokens,
        )

    def _pooling(self, kind: str, body: dict, model: str) -> GenRequest:
        """A pooling request: its prompt tokens are the prefill the engine does; it generates nothing."""
        cfg = self.config
        _check_model(model, cfg)
        pooled = parse_pooling(kind, body, cfg, self.count, self.images)
        spec = pooled.spec
        prompt_tokens = spec.prompt_tokens
        text = pooled.hash_text or pooled.text
        return GenRequest(
            kind=kind, stream=False, model=model, adapter=model if model in cfg.lora_modules else "",
            prompt_tokens=prompt_tokens, max_tokens=0, output_tokens=0, include_usage=False,
            text_offset=text_offset(cfg.seed, text), ignore_eos=False,
            block_hashes=_block_hashes(cfg, text, pooled.ids, prompt_tokens), prefix_cache=cfg.prefix_cache,
            trace_prompt=([spec.query, *spec.texts] if spec.query else list(spec.texts)) if cfg.trace_prompts else None,
            images=pooled.images, image_tokens=pooled.image_tokens, pooled=spec,
        )


def _output(cfg: SimConfig, kind: str, body: dict, raw: bytes, offset: int, output_tokens: int,
            reasoning: int) -> Output:
    """What the output's tokens are (:func:`llmload.sim.tools.output_of`); a 400 for a ``response_format`` or
    ``tools`` the simulator cannot answer."""
    try:
        return output_of(cfg, kind, body, raw, offset, output_tokens, reasoning)
    except ToolsError as exc:
        raise bad_request(str(exc), exc.param) from None


def _block_hashes(cfg: SimConfig, text: str, ids: Sequence[int] | None, prompt_tokens: int) -> list[int]:
    """The prompt's block keys, hashed once per request and only when the prefix cache is on."""
    if not cfg.prefix_cache:
        return []
    if ids is not None:
        return id_block_hashes(ids, cfg.prefix_cache_block)
    return text_block_hashes(text, cfg.prefix_cache_block, prompt_tokens)


def _trace_prompt(kind: str, body: dict, fields: _Fields) -> object:
    """What ``--trace-prompts`` records: a chat's messages (role and content), else the prompt."""
    if kind in ("chat", "messages"):
        return [{"role": m.get("role"), "content": m.get("content")} for m in body["messages"]]
    if kind == "responses":
        given = body["input"]
        return given if isinstance(given, str) else [{"role": m.get("role"), "content": m.get("content")}
                                                      for m in given if isinstance(m, dict)]
    if fields.ids is not None:
        return list(fields.ids)
    return fields.text


#: what a prompt without images adds: nothing
_TEXT_ONLY = Rendered("")


@dataclass(slots=True)
class _Fields:
    """What one route's body says about the generation, before the prompt is counted."""

    text: str
    #: the prompt when it came as token ids
    ids: list[int] | None
    max_tokens: int
    ignore_eos: bool
    stream: bool
    include_usage: bool = False
    #: the request gave no max_tokens: ``max_tokens`` is the default, capped by the context left
    default_max: bool = False
    #: a chat prompt's rendering, with its images (:mod:`llmload.sim.chat`); text-only for the other routes
    media: Rendered | None = None


def _render(messages: object, images: ImageCache, prefix: str = "") -> Rendered:
    """A chat prompt's rendering with its images read; ``prefix`` (the tools) goes before the messages."""
    media = render_messages(messages, images)
    if not prefix:
        return media
    hashed = None if media.hash_text is None else prefix + media.hash_text
    return Rendered(prefix + media.text, media.image_tokens, media.images, hashed)


def _openai_fields(kind: str, body: dict, model: object, cfg: SimConfig, images: ImageCache) -> _Fields:
    """``/v1/completions`` and ``/v1/chat/completions``: vLLM's defaults and its 400/404 answers."""
    if model not in cfg.served_names:
        raise openai_error(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
    n = body.get("n", 1)
    if n != 1:
        raise bad_request("llmload sim supports n=1 only", "n")
    stream = bool(body.get("stream", False))
    options = body.get("stream_options") or {}
    include_usage = stream and isinstance(options, dict) and bool(options.get("include_usage"))
    ignore_eos = bool(body.get("ignore_eos", False))
    if kind == "completions":
        if "prompt" not in body:
            raise bad_request("'prompt' is required", "prompt")
        text, ids = _prompt_text(body["prompt"])
        return _Fields(text, ids, _int_field(body, "max_tokens") or 16, ignore_eos, stream, include_usage)
    if "messages" not in body:
        raise bad_request("'messages' is required", "messages")
    media = _render(body["messages"], images, render_tools(body.get("tools")))
    max_tokens = _int_field(body, "max_completion_tokens") or _int_field(body, "max_tokens")
    return _Fields(media.text, None, max_tokens or cfg.default_max_tokens, ignore_eos, stream, include_usage,
                   default_max=max_tokens is None, media=media)


def _check_model(model: object, cfg: SimConfig) -> None:
    if model not in cfg.served_names:
        raise openai_error(404, f"The model `{model}` does not exist.", "NotFoundError", "model")


def _responses_fields(body: dict, model: object, cfg: SimConfig, images: ImageCache) -> _Fields:
    """``/v1/responses``: ``input`` is a string or a list of messages, ``instructions`` the system prompt,
    ``max_output_tokens`` the length; usage always comes on ``response.completed``."""
    _check_model(model, cfg)
    if "input" not in body:
        raise bad_request("'input' is required", "input")
    given = body["input"]
    messages = [{"role": "user", "content": given}] if isinstance(given, str) else given
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages = [{"role": "system", "content": instructions}, *messages]
    max_tokens = _int_field(body, "max_output_tokens")
    stream = bool(body.get("stream", False))
    media = _render(messages, images)
    return _Fields(media.text, None, max_tokens or cfg.default_max_tokens,
                   bool(body.get("ignore_eos", False)), stream, stream, default_max=max_tokens is None, media=media)


def _messages_fields(body: dict, model: object, cfg: SimConfig, images: ImageCache) -> _Fields:
    """``/v1/messages`` (Anthropic): ``messages`` and ``max_tokens`` are required, ``system`` is apart."""
    _check_model(model, cfg)
    if "messages" not in body:
        raise bad_request("'messages' is required", "messages")
    max_tokens = _int_field(body, "max_tokens")
    if max_tokens is None:
        raise bad_request("'max_tokens' is required", "max_tokens")
    messages = body["messages"]
    system = body.get("system")
    if isinstance(system, list):
        system = "".join(p.get("text", "") for p in system if isinstance(p, dict))
    if isinstance(system, str) and system and isinstance(messages, list):
        messages = [{"role": "system", "content": system}, *messages]
    stream = bool(body.get("stream", False))
    media = _render(messages, images)
    return _Fields(media.text, None, max_tokens, bool(body.get("ignore_eos", False)), stream, stream, media=media)


def _sglang_fields(body: dict) -> _Fields:
    text = body.get("text")
    ids = body.get("input_ids")
    if not isinstance(text, str) and not isinstance(ids, list):
        raise bad_request("'text' (a string) or 'input_ids' is required", "text")
    if ids is not None and not _is_ids(ids):
        raise bad_request("'input_ids' must be a list of token ids", "input_ids")
    params = body.get("sampling_params") or {}
    if not isinstance(params, dict):
        raise bad_request("'sampling_params' must be an object", "sampling_params")
    return _Fields(
        text=text if isinstance(text, str) else "",
        ids=ids if isinstance(ids, list) else None,
        max_tokens=_int_field(params, "max_new_tokens") or 128,
        ignore_eos=bool(params.get("ignore_eos", False)),
        stream=bool(body.get("stream", False)),
    )


def _tgi_fields(body: dict) -> _Fields:
    text = body.get("inputs")
    if not isinstance(text, str):
        raise bad_request("'inputs' (a string) is required", "inputs")
    params = body.get("parameters") or {}
    if not isinstance(params, dict):
        raise bad_request("'parameters' must be an object", "parameters")
    return _Fields(
        text=text,
        ids=None,
        max_tokens=_int_field(params, "max_new_tokens") or 100,
        ignore_eos=bool(params.get("ignore_eos", False)),
        stream=True,
    )


def _trt_fields(body: dict) -> _Fields:
    text = body.get("text_input")
    if not isinstance(text, str):
        raise bad_request("'text_input' (a string) is required", "text_input")
    return _Fields(
        text=text,
        ids=None,
        max_tokens=_int_field(body, "max_tokens") or 16,
        ignore_eos=bool(body.get("ignore_eos", False)) or ("min_length" in body),
        stream=bool(body.get("stream", True)),
    )


def _output_tokens(cfg: SimConfig, offset: int, max_tokens: int, ignore_eos: bool) -> int:
    """Tokens to generate: ``max_tokens``, or fewer when a seeded early EOS strikes (``--eos-prob``)."""
    if not ignore_eos and cfg.eos_prob > 0:
        rng = random.Random(offset * 1_000_003 + cfg.seed)
        for i in range(1, max_tokens):
            if rng.random() < cfg.eos_prob:
                return i
    return max_tokens
