"""The ground-truth trace (``--trace-file``): one JSON line per request, as the server saw it.

Every worker process appends to the same file with ``O_APPEND``; each line is one ``write``, so lines from
different workers never interleave. Times are ``time.monotonic()`` seconds; ``wall_offset`` turns them into
wall-clock time. ``cached_tokens`` are the prompt tokens the prefix cache held, ``prefill_tokens`` the rest
(the prompt tokens the engine computed); ``session`` is the ``--session-header`` value; ``ended`` when the
request ended (for ``client_closed``: when the server saw the client close the connection). Only with
``--trace-prompts`` does a line carry the request's ``messages`` (chat) or ``prompt``: traces stay small.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

import orjson

if TYPE_CHECKING:
    from llmload.sim.server.conn import Job


def trace_entry(job: Job, status: str, wall_offset: float) -> dict:
    """The trace line for a finished (or abandoned) job; ``status`` says how it ended."""
    req = job.req
    cached = job.cached_tokens
    entry = {
        "id": job.request_id,
        "client_id": job.client_id,
        "path": job.path,
        "status": status,
        # the fault this request drew (a name of faults.FAULT_KINDS), or None
        "fault": job.fault.kind if job.fault is not None else None,
        "stream": job.req.stream,
        "received": job.received,
        "headers_sent": job.started,
        # when the batching engine admitted it into the running batch (None: fixed timing, or never admitted)
        "admitted": job.seq.admitted if job.seq is not None else None,
        "chunks": job.chunk_times,
        # when it ended: the last chunk, or when the server saw the client go (status client_closed)
        "ended": time.monotonic(),
        "tokens": job.chunk_tokens,
        "prompt_tokens": job.req.prompt_tokens,
        "completion_tokens": sum(job.chunk_tokens),
        "max_tokens": job.req.max_tokens,
        "clock": "monotonic",
        "wall_offset": wall_offset,
        "pid": os.getpid(),
        "cached_tokens": cached,
        "prefill_tokens": req.prompt_tokens - cached,
        "reasoning_tokens": min(req.reasoning_tokens, sum(job.chunk_tokens)),
        "session": job.session,
        "model": req.model,
        # seconds its LoRA adapter took to load first (0: loaded, or a base model)
        "lora_load_s": job.lora_load if job.seq is None else max(0.0, job.seq.ready_at - (job.seq.admitted or 0.0)),
    }
    if job.traced_request is not None:
        entry["request"] = job.traced_request
    if req.structured:  # a response_format: its answer was "valid" JSON for it, or "broken" (--invalid-json-rate)
        entry["structured"] = req.structured
    if req.tool:  # a chat answer that called this function (tools.py)
        entry["tool_call"] = req.tool
    if req.images:  # the prompt's images, and the prompt tokens (of prompt_tokens) they cost (images.py)
        entry["images"] = req.images
        entry["image_tokens"] = req.image_tokens
    if req.pooled is not None:  # a pooling request: how many inputs (rerank: documents) it pooled
        entry["inputs"] = len(req.pooled.texts)
    if req.trace_prompt is not None:
        as_messages = req.kind in ("chat", "messages") or (req.kind == "responses"
                                                          and isinstance(req.trace_prompt, list))
        entry["messages" if as_messages else "prompt"] = req.trace_prompt
    return entry


class TraceFile:
    """The open trace file of one worker, or nothing to write when ``path`` is empty."""

    def __init__(self, path: str | None, wall_offset: float) -> None:
        self.wall_offset = wall_offset
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if path else None

    def write(self, job: Job, status: str) -> None:
        if self.fd is None:
            return
        os.write(self.fd, orjson.dumps(trace_entry(job, status, self.wall_offset)) + b"\n")

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


#: request headers a trace never holds: credentials
_SECRET_HEADERS = ("authorization", "x-api-key", "proxy-authorization", "cookie")


def traced_request(headers: dict[str, str], body: bytes) -> dict:
    """``--trace-requests``: what the trace keeps of a request (headers lower-cased, credentials left out; the
    JSON body as sent)."""
    import orjson

    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        data = None
    return {"headers": {k: v for k, v in headers.items() if k not in _SECRET_HEADERS}, "body": data}
