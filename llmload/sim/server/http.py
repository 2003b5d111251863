"""HTTP/1.1 framing and routing: parse a request head, answer with a body or start a generation.

:class:`HttpFront` is one part of :class:`~llmload.sim.server.core.SimServer`; it relies on
:class:`~llmload.sim.server.conn.Connections` for I/O and on the generation part for ``_generate``.
"""

from __future__ import annotations

import time
from types import MappingProxyType
from typing import TYPE_CHECKING

import orjson

from llmload.sim.errors import openai_error
from llmload.sim.metrics.mm_cache import render_mm_cache
from llmload.sim.metrics.render import CONTENT_TYPE
from llmload.sim.pooling import POOLING_ROUTES
from llmload.sim.requests import ROUTES
from llmload.tokenizer import BUILTIN

if TYPE_CHECKING:
    from llmload.sim.config import SimConfig
    from llmload.sim.metrics import DcgmPage, Exposition
    from llmload.sim.server.conn import Conn

REASONS = MappingProxyType({
    200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 411: "Length Required",
    413: "Payload Too Large", 422: "Unprocessable Entity", 429: "Too Many Requests", 500: "Internal Server Error",
    501: "Not Implemented", 503: "Service Unavailable",
})
MAX_BODY = 64 * 1024 * 1024
MAX_HEAD = 65536
END_CHUNKED = b"0\r\n\r\n"
STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)


def frame(data: bytes) -> bytes:
    """One chunk of a chunked body (nothing for no data: an empty chunk would end the body)."""
    return b"%x\r\n" % len(data) + data + b"\r\n" if data else b""


def _parse_head(head: list[str]) -> tuple[str, str, str, dict[str, str]] | None:
    """Method, target, version and lower-cased headers of a request head; None for a bad request line."""
    try:
        method, target, version = head[0].split(" ", 2)
    except ValueError:
        return None
    headers: dict[str, str] = {}
    for line in head[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return method, target, version, headers


class HttpFront:
    """Request parsing, keep-alive and pipelining, plain responses and the non-generation routes."""

    config: SimConfig
    exposition: Exposition
    dcgm: DcgmPage

    def _next_request(self, conn: Conn) -> None:
        """Parse one complete request from the buffer, if there is one, and handle it."""
        buf = conn.rbuf
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > MAX_HEAD:
                self._respond(conn, 413, b'{"error":{"message":"headers too large","code":413}}', close=True)
            return
        parsed = _parse_head(bytes(buf[:end]).decode("latin-1").split("\r\n"))
        if parsed is None:
            self._respond(conn, 400, b'{"error":{"message":"malformed request line","code":400}}', close=True)
            return
        method, target, version, headers = parsed
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._respond(conn, 411, b'{"error":{"message":"send a Content-Length body","code":411}}', close=True)
            return
        try:
            length = int(headers.get("content-length", "0"))
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY:
            self._respond(conn, 400, b'{"error":{"message":"bad Content-Length","code":400}}', close=True)
            return
        if len(buf) < end + 4 + length:
            return
        body = bytes(buf[end + 4 : end + 4 + length])
        del buf[: end + 4 + length]
        connection = headers.get("connection", "").lower()
        conn.keep_alive = connection != "close" and (version != "HTTP/1.0" or connection == "keep-alive")
        conn.busy = True
        path = target.split("?", 1)[0]
        self._dispatch(conn, method, path, headers, body)

    def _respond(self, conn: Conn, status: int, body: bytes, *, extra: bytes = b"", close: bool = False,
                 content_type: bytes = b"application/json") -> None:
        if close:
            conn.keep_alive = False
        head = b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s%s\r\n" % (
            status, REASONS.get(status, "Error").encode(), content_type, len(body), extra,
            b"" if conn.keep_alive else b"Connection: close\r\n",
        )
        self._send(conn, head + body)
        self._done(conn)

    def _done(self, conn: Conn) -> None:
        """The response is complete: close, or serve the next pipelined request."""
        conn.busy = False
        conn.job = None
        if conn.closed:
            return
        if not conn.keep_alive:
            if not conn.wbuf:
                self._close(conn)
            return
        if conn.rbuf:
            self._next_request(conn)

    def _dispatch(self, conn: Conn, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        kind = ROUTES.get(path) or POOLING_ROUTES.get(path)
        if kind is not None:
            if method != "POST":
                self._respond(conn, 405, openai_error(405, f"use POST for {path}", "MethodNotAllowed").body)
                return
            self._generate(conn, kind, path, headers, body)
        elif path == "/health" and method in ("GET", "HEAD"):
            self._respond(conn, 200, b"")
        elif path == "/v1/models" and method == "GET":
            cards = [self._model_card(name) for name in (self.config.model, *self.config.extra_models)]
            cards += [self._model_card(name, parent=self.config.model) for name in self.config.lora_modules]
            self._respond(conn, 200, orjson.dumps({"object": "list", "data": cards}))
        elif path == "/sim/stats" and method == "GET":
            self._respond(conn, 200, orjson.dumps(self.stats()))
        elif path == "/sim/stats/reset" and method == "POST":
            # the stats so far, then a fresh lateness count: a benchmark leaves its warm-up out (one worker)
            self._respond(conn, 200, orjson.dumps(self.stats()))
            self.loop.reset_lateness()
        elif path == "/metrics" and method == "GET":
            page = (self.exposition.render() + self._lora_info() + self._spec_decode()
                    + render_mm_cache(self.exposition.shared, self.config.dialect, self.config.model))
            self._respond(conn, 200, page, content_type=CONTENT_TYPE)
        elif path == "/dcgm/metrics" and method == "GET":
            self._respond(conn, 200, self.dcgm.render(), content_type=CONTENT_TYPE)
        else:
            err = openai_error(404, f"no route for {method} {path}", "NotFoundError")
            self._respond(conn, 404, err.body)

    def _lora_info(self) -> bytes:
        """vLLM's ``vllm:lora_requests_info`` (an info gauge: the adapters in its labels, the time as its value):
        the adapters of this process's running and waiting requests (the answering worker's, with
        ``--workers``; in fixed-timing mode, the loaded ones as running); nothing without adapters."""
        if not self.config.lora_modules or self.config.dialect != "vllm":
            return b""
        engine = self.engine
        if engine is None:
            running, waiting = self.adapters.active, []
        else:
            running = sorted({s.adapter for s in engine.running if s.adapter})
            waiting = sorted({s.adapter for s in engine.waiting if s.adapter} - set(running))
        return (b"# HELP vllm:lora_requests_info Running stats on lora requests.\n"
                b"# TYPE vllm:lora_requests_info gauge\n"
                b'vllm:lora_requests_info{max_lora="%d",running_lora_adapters="%s",waiting_lora_adapters="%s"} %.3f\n'
                % (self.adapters.max_loras, ",".join(running).encode(), ",".join(waiting).encode(), time.time()))

    def _spec_decode(self) -> bytes:
        """vLLM's spec-decode counters, from every worker's generated tokens (vLLM dialect, with
        ``--num-speculative-tokens``)."""
        config = self.config
        if not config.num_speculative_tokens or config.dialect != "vllm":
            return b""
        from llmload.sim.metrics.spec_decode import render_spec_decode

        shared = self.exposition.shared
        generated = sum(shared.scalar(i, "generation_tokens") for i in range(shared.workers))
        return render_spec_decode(generated, config.num_speculative_tokens, config.spec_acceptance, config.model)

    def _model_card(self, name: str, parent: str | None = None) -> dict:
        # llmload_tokenizer: the tokenizer a client should count with (llmload.core.target.describe_server):
        # --tokenizer's value, else builtin, the one llmload bench uses against its own simulator; an adapter
        # names its base model as parent, as vLLM lists LoRA modules
        return {"id": name, "object": "model", "created": 0, "owned_by": "llmload", "parent": parent,
                "max_model_len": self.config.max_model_len,
                "llmload_tokenizer": self.config.tokenizer or BUILTIN, "llmload_profile": self.config.profile.name}
