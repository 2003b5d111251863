"""Locust users that send one streaming completion per task and time every token.

The stream is read line by line with geventhttpclient's ``readline`` (DESIGN §8: ``iter_lines`` batches
1 KB and must not be used); each line is timestamped with ``perf_counter`` the moment it is returned,
before any parsing. Locust's stats table gets three rows per request, ``LLM E2E`` (with failures),
``LLM TTFT`` and ``LLM TPOT``, for the live view; reported numbers come from :class:`RequestRecord`.
"""

from __future__ import annotations

import itertools
import os
from time import perf_counter
from typing import Any, ClassVar

import orjson
from locust import FastHttpUser, constant, task

from llmload.backends import Backend, get_backend
from llmload.backends.base import one_line
from llmload.datasets.base import SampleRequest
from llmload.events import llm_events
from llmload.records import RequestRecord
from llmload.sse import DONE, parse_line

TTFT_RULES = ("content", "vllm")
_ids = itertools.count(1)


class LLMUser(FastHttpUser):
    """Base class: set ``backend`` (a ``--backend`` name) and give it a workload of :class:`SampleRequest`."""

    abstract = True
    wait_time = constant(0)

    #: wire dialect, a name from :data:`llmload.backends.BACKENDS`
    backend: str = "vllm"
    #: request path; defaults to the backend's
    endpoint: str | None = None
    model: str = ""
    #: ask the server to ignore EOS so outputs reach ``max_tokens``
    ignore_eos: bool = False
    #: "content" (first event with text, reasoning or a tool call) or "vllm" (first event with choices)
    ttft_rule: str = "content"
    #: extra fields merged into every request body
    extra_body: ClassVar[dict[str, Any]] = {}
    #: ``Authorization: Bearer`` value; never printed
    api_key: str | None = None
    #: queueing before the first token can exceed Locust's 60 s default
    network_timeout = 600.0
    connection_timeout = 30.0
    #: a user streams one request at a time; dispatchers that need more raise it
    concurrency = 1
    #: where :meth:`generate` takes its next sample; set by the locustfile or llmload's options
    workload: ClassVar[Any] = None

    def __init__(self, environment: Any) -> None:
        super().__init__(environment)
        self._backend: Backend = get_backend(self.backend)
        self._path = self.endpoint or self._backend.default_path
        self._worker = f"{os.getpid()}"
        headers = {"Accept-Encoding": "identity", "Content-Type": "application/json", "Accept": "text/event-stream"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        self._headers = headers

    @task
    def generate(self) -> None:
        if self.workload is None:
            raise RuntimeError(f"{type(self).__name__}.workload is not set: give it a workload of samples")
        self.send(self.workload.next())

    def new_record(self, sample: SampleRequest, intended_send: float | None = None) -> RequestRecord:
        return RequestRecord(
            request_id=sample.request_id or f"{self._worker}-{next(_ids)}",
            backend=self._backend.name,
            prompt_len=sample.prompt_len,
            expected_output_len=sample.expected_output_len,
            intended_send=intended_send,
            worker=self._worker,
        )

    def send(
        self, sample: SampleRequest, intended_send: float | None = None, record: RequestRecord | None = None
    ) -> RequestRecord:
        """Stream one request and return its record (also fired as ``llm_events.request_complete``).

        Pass ``record`` (from :meth:`new_record`) to keep a handle on a request that may be cut off.
        """
        backend = self._backend
        body = backend.build_body(
            sample.prompt,
            sample.expected_output_len,
            model=self.model,
            ignore_eos=self.ignore_eos,
            extra=self.extra_body or None,
            messages=getattr(sample, "messages", None),
        )
        if record is None:
            record = self.new_record(sample, intended_send)
        headers = dict(self._headers)
        headers["X-Request-Id"] = record.request_id
        payload = orjson.dumps(body)
        streaming = bool(body.get("stream", True))
        record.start = perf_counter()
        try:
            with self.client.post(
                self._path, data=payload, headers=headers, stream=True, catch_response=True, name="E2E"
            ) as resp:
                resp.request_meta["request_type"] = "LLM"
                self._read(resp, record, streaming)
                if record.success:
                    e2el = record.e2el or 0.0
                    resp.request_meta["response_time"] = e2el * 1000.0
                    resp.request_meta["response_length"] = len(record.generated_text)
                    resp.success()
                else:
                    resp.failure(record.error or "request failed")
        except Exception as exc:  # a bug in a listener or the client must not kill the user
            if not record.error:
                record.error = one_line(f"{type(exc).__name__}: {exc}")
            record.success = False
        if record.success:
            self._fire_live_rows(record)
        llm_events.request_complete.fire(record=record, user=self)
        return record

    def _read(self, resp: Any, record: RequestRecord, streaming: bool) -> None:
        status = resp.status_code or 0
        record.status_code = status
        if status == 0:
            error = getattr(resp, "error", None)
            record.error = one_line(f"connection failed: {type(error).__name__}: {error}" if error else "no response")
            return
        raw = resp._response
        if status != 200:
            try:
                text = resp.content.decode("utf-8", "replace") if resp.content else ""
            except Exception as exc:
                text = f"({type(exc).__name__} reading the error body)"
            record.error = one_line(f"HTTP {status}: {text}")
            return
        try:
            if streaming:
                self._read_stream(raw, record)
            else:
                self._read_whole(resp, record)
        except Exception as exc:
            record.error = one_line(f"stream broken after {len(record.chunk_times)} events: {type(exc).__name__}: {exc}")
        finally:
            try:
                raw.release()
            except Exception:
                pass
        if not record.error:
            if not record.chunk_times:
                record.error = "stream ended without any content"
            else:
                record.success = True

    def _read_stream(self, raw: Any, record: RequestRecord) -> None:
        backend = self._backend
        parse_event = backend.parse_event
        state = backend.new_state()
        readline = raw.readline
        content_rule = self.ttft_rule != "vllm"
        times = record.chunk_times
        tokens = record.chunk_tokens
        texts: list[str] = []
        first_token = llm_events.first_token
        token_hook = llm_events.token
        completion_tokens = None
        while True:
            line = readline(b"\n")
            t = perf_counter()
            if not line:
                break  # EOF: servers such as transformers serve send no [DONE]
            payload = parse_line(line)
            if payload is None:
                continue
            if payload == DONE:
                continue  # read on to the end of the HTTP message so the connection can be reused
            ev = parse_event(payload, state)
            if ev.error is not None:
                record.error = ev.error
                break
            if ev.completion_tokens is not None:
                completion_tokens = ev.completion_tokens
            if ev.prompt_tokens is not None:
                record.server_prompt_tokens = ev.prompt_tokens
            if ev.content if content_rule else (ev.has_choices or ev.content):
                n = ev.tokens or 1
                if times:
                    itl = t - times[-1]
                    times.append(t)
                    tokens.append(n)
                    texts.append(ev.text)
                    if token_hook._handlers:
                        token_hook.fire(record=record, itl=itl, tokens=n, text=ev.text, user=self)
                else:
                    record.first_token = t
                    times.append(t)
                    tokens.append(n)
                    texts.append(ev.text)
                    if first_token._handlers:
                        first_token.fire(record=record, text=ev.text, user=self)
            elif ev.text:
                texts.append(ev.text)
        record.generated_text = "".join(texts)
        if completion_tokens is not None:
            record.output_tokens = completion_tokens
            record.output_tokens_source = "usage"
        elif backend.tokens_per_event_known:
            record.output_tokens = sum(tokens)
            record.output_tokens_source = "chunks"
        else:
            # counted after the run by re-tokenizing the text (never in the stream loop)
            record.output_tokens = len(tokens)
            record.output_tokens_source = "pending"

    def _read_whole(self, resp: Any, record: RequestRecord) -> None:
        body = resp.content or b""
        t = perf_counter()
        text, completion_tokens, prompt_tokens = self._backend.parse_response(body)
        record.first_token = t
        record.chunk_times.append(t)
        record.chunk_tokens.append(completion_tokens or 1)
        record.generated_text = text
        record.server_prompt_tokens = prompt_tokens
        if completion_tokens is not None:
            record.output_tokens = completion_tokens
            record.output_tokens_source = "usage"
        else:
            record.output_tokens_source = "pending"

    def _fire_live_rows(self, record: RequestRecord) -> None:
        fire = self.environment.events.request.fire
        ttft = record.ttft
        if ttft is not None:
            fire(request_type="LLM", name="TTFT", response_time=ttft * 1000.0, response_length=0, exception=None,
                 context={})
        if record.output_tokens > 1 and ttft is not None and record.e2el is not None:
            tpot = (record.e2el - ttft) / (record.output_tokens - 1)
            fire(request_type="LLM", name="TPOT", response_time=tpot * 1000.0, response_length=0, exception=None,
                 context={})


class CompletionsUser(LLMUser):
    """Streams ``/v1/completions`` (vLLM's ``--backend vllm``)."""

    abstract = True
    backend = "vllm"


class ChatUser(LLMUser):
    """Streams ``/v1/chat/completions``."""

    abstract = True
    backend = "openai-chat"
