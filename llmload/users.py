"""Locust users that send one streaming completion per task and time every token.

The stream is read by :mod:`llmload.transport`: every ``recv`` is timestamped the moment it returns and the
lines it completed carry that time; JSON is parsed after the stream, or live when someone listens to the
``first_token``/``token`` hooks (DESIGN §8: per-event work in the read loop delays later timestamps).
Locust's stats table gets three rows per request, ``LLM E2E`` (with failures), ``LLM TTFT`` and
``LLM TPOT``, for the live view; reported numbers come from :class:`RequestRecord`.
"""

from __future__ import annotations

import itertools
import os
import random
from time import perf_counter
from typing import Any, ClassVar

import orjson
from gevent import GreenletExit
from gevent import Timeout as gevent_Timeout
from gevent import idle as gevent_idle
from locust import FastHttpUser, task

from llmload.backends import Backend, get_backend
from llmload.backends.base import error_message, one_line
from llmload.datasets.base import SampleRequest
from llmload.events import llm_events
from llmload.failures import (
    CLIENT_ERROR,
    CUT_OFF,
    EMPTY_STREAM,
    EMPTY_STREAM_MESSAGE,
    ERROR_EVENT,
    NOT_STREAMED,
    NOT_STREAMED_MESSAGE,
    event_failure,
    http_kind,
    is_json_answer,
    transport_kind,
)
from llmload.records import RequestRecord
from llmload.sse import DONE, parse_line
from llmload.transport import HTTPError, Pool, Response

TTFT_RULES = ("content", "vllm")
#: events parsed between two yields to the event loop
PARSE_SLICE = 16
_ids = itertools.count(1)


def _when_idle(max_wait_s: float = 1.0) -> None:
    """Wait until gevent's loop is idle (no pending reads), but no longer than ``max_wait_s``."""
    with gevent_Timeout(max_wait_s, False):
        gevent_idle()


class _InFlight:
    """Requests of this process currently between send and end (for live views)."""

    count = 0


in_flight = _InFlight


class LLMUser(FastHttpUser):
    """Base class: set ``backend`` (a ``--backend`` name) and give it a workload of :class:`SampleRequest`."""

    abstract = True

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
    #: whole-request limit in seconds, however steadily data arrives (None: no limit; ``network_timeout``
    #: bounds only a gap without data)
    request_timeout: float | None = None
    #: where :meth:`generate` takes its next sample; set by the locustfile or llmload's options
    workload: ClassVar[Any] = None

    #: "closed" (send, wait for the stream, think, repeat) or "open" (Poisson/gamma arrivals at ``request_rate``
    #: spread over all users, each request in its own greenlet, independent of responses)
    arrival: str = "closed"
    #: open loop: requests/s for the whole test (all users, all workers together); changes apply within 0.5 s
    request_rate: float = 1.0
    burstiness: float = 1.0
    #: open loop: most requests in flight per user (None: unbounded)
    max_concurrency: int | None = None
    #: closed loop: seconds between a response and the next request, e.g. ``arrivals.think_time("exp", 2)``
    think: Any = None

    def __init__(self, environment: Any) -> None:
        super().__init__(environment)
        self._backend: Backend = get_backend(self.backend)
        self._path = self.endpoint or self._backend.default_path
        self._worker = f"{os.getpid()}"
        headers = {"Accept-Encoding": "identity", "Content-Type": "application/json", "Accept": "text/event-stream"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        self._headers = headers
        self._pool = Pool(self.host or environment.host or "", connect_timeout=self.connection_timeout,
                          read_timeout=self.network_timeout, request_timeout=self.request_timeout)

    def wait_time(self) -> float:
        return float(self.think()) if self.think is not None else 0.0

    @task
    def generate(self) -> None:
        if self.workload is None:
            raise RuntimeError(f"{type(self).__name__}.workload is not set: give it a workload of samples")
        if self._setting("arrival", self.arrival) == "open":
            self.open_loop()
        else:
            self.send(self.workload.next())

    def _setting(self, name: str, default: Any) -> Any:
        """An option that may change mid-run (web UI, master): parsed options first, then the class attribute."""
        opts = self.environment.parsed_options
        value = getattr(opts, name, None) if opts is not None else None
        return default if value in (None, "") else value

    def _open_rate(self) -> float:
        users = self.environment.runner.target_user_count if self.environment.runner else 1
        opts = self.environment.parsed_options
        total_users = int(getattr(opts, "num_users", 0) or 0) or users or 1
        return float(self._setting("request_rate", self.request_rate)) / max(1, total_users)

    def open_loop(self) -> None:
        """Dispatch requests on an absolute clock until the user is stopped; in-flight ones are then cut off."""
        from gevent import sleep
        from gevent.lock import BoundedSemaphore
        from gevent.pool import Group

        limit = self._setting("max_concurrency", self.max_concurrency)
        slots = BoundedSemaphore(int(limit)) if limit else None
        group = Group()
        rng = random.Random(hash((self._worker, id(self))))

        def one(sample: SampleRequest, record: RequestRecord) -> None:
            if slots is not None:
                with slots:
                    self.send(sample, record.intended_send, record)
            else:
                self.send(sample, record.intended_send, record)

        next_send = perf_counter()
        try:
            while True:
                rate = self._open_rate()
                if rate <= 0:
                    sleep(0.5)
                    next_send = perf_counter()
                    continue
                b = float(self._setting("burstiness", self.burstiness))
                next_send += rng.gammavariate(b, 1.0 / (rate * b))
                while (delay := next_send - perf_counter()) > 0:
                    sleep(min(delay, 0.5))
                    if self._open_rate() != rate:  # steered mid-run: re-draw with the new rate
                        next_send = perf_counter()
                        break
                else:
                    sample = self.workload.next()
                    record = self.new_record(sample, next_send)
                    record.dispatched_at = perf_counter()
                    group.spawn(one, sample, record)
        finally:
            group.kill(block=True)

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
        reader = StreamReader(self, record, streaming)
        # live parsing only when someone listens to the token hooks; else parse once after the stream
        live = reader.on_lines if (llm_events.first_token._handlers or llm_events.token._handlers) else None
        exception: Exception | None = None
        record.start = perf_counter()  # replaced by the moment the bytes go out, once a connection is open

        def sending() -> None:
            record.start = perf_counter()

        in_flight.count += 1
        try:
            resp = self._pool.request("POST", self._path, headers, payload, live, sending)
        except (HTTPError, OSError) as exc:
            partial = getattr(exc, "response", None)
            if partial is not None and partial.status:
                record.status_code = partial.status
                if live is None and partial.status == 200 and streaming:
                    reader._consume(partial.lines, 0, live=False)  # keep the tokens that did arrive
            reader.fail_transport(exc)
            exception = exc
        except Exception as exc:
            record.error = one_line(f"{type(exc).__name__}: {exc}")
            record.failure_kind = CLIENT_ERROR
            exception = exc
        except GreenletExit:
            in_flight.count -= 1
            # the run ended while this request was in flight: count it as cut off, never drop it
            record.cut_off = True
            record.success = False
            record.failure_kind = CUT_OFF
            record.error = record.error or "cut off: the run ended while this request was in flight"
            llm_events.request_complete.fire(record=record, user=self)
            raise
        else:
            reader.finish(resp)
        in_flight.count -= 1
        fire = self.environment.events.request.fire
        if record.success:
            fire(request_type="LLM", name="E2E", response_time=(record.e2el or 0.0) * 1000.0,
                 response_length=len(record.generated_text), exception=None, context={})
            self._fire_live_rows(record)
        else:
            fire(request_type="LLM", name="E2E", response_time=(perf_counter() - record.start) * 1000.0,
                 response_length=0, exception=exception or LLMRequestFailed(record.error), context={})
        llm_events.request_complete.fire(record=record, user=self)
        return record

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


class LLMRequestFailed(Exception):
    """A request that got an answer, but not a usable one (HTTP error, error event, empty stream)."""


class StreamReader:
    """Turns a response's timestamped lines into a :class:`RequestRecord`, per the run's TTFT rule."""

    __slots__ = ("backend", "completion_tokens", "content_rule", "done", "record", "state", "streaming", "texts",
                 "user")

    def __init__(self, user: LLMUser, record: RequestRecord, streaming: bool) -> None:
        self.user = user
        self.record = record
        self.streaming = streaming
        self.backend = user._backend
        self.state = self.backend.new_state()
        self.content_rule = user.ttft_rule != "vllm"
        self.texts: list[str] = []
        self.completion_tokens: int | None = None
        self.done = 0

    def on_lines(self, resp: Response, first: int) -> None:
        """Live mode: parse the lines that just arrived and fire the token hooks."""
        if resp.status == 200 and self.streaming and not self.record.error:
            self._consume(resp.lines, first, live=True)

    def _consume(self, lines: list[tuple[float, bytes]], first: int, live: bool) -> None:
        record = self.record
        parse_event = self.backend.parse_event
        state = self.state
        times = record.chunk_times
        tokens = record.chunk_tokens
        texts = self.texts
        content_rule = self.content_rule
        user = self.user
        for i in range(max(first, self.done), len(lines)):
            if not live and not i % PARSE_SLICE:
                # After-the-stream parsing runs when the loop has nothing better to do, so it never delays
                # another stream's read (streams of a batch end together and their parsing would pile up).
                _when_idle()
            t, line = lines[i]
            payload = parse_line(line)
            if payload is None or payload == DONE:
                continue
            ev = parse_event(payload, state)
            if ev.error is not None:
                # malformed_event or error_event; the message holds no part of the payload, so failures group
                record.failure_kind, record.error = event_failure(payload, ev.error)
                self.done = len(lines)
                return
            if ev.completion_tokens is not None:
                self.completion_tokens = ev.completion_tokens
            if ev.prompt_tokens is not None:
                record.server_prompt_tokens = ev.prompt_tokens
            if ev.content if content_rule else (ev.has_choices or ev.content):
                n = ev.tokens or 1
                texts.append(ev.text)
                if times:
                    itl = t - times[-1]
                    times.append(t)
                    tokens.append(n)
                    if live:
                        llm_events.token.fire(record=record, itl=itl, tokens=n, text=ev.text, user=user)
                else:
                    record.first_token = t
                    times.append(t)
                    tokens.append(n)
                    if live:
                        llm_events.first_token.fire(record=record, text=ev.text, user=user)
            elif ev.text:
                texts.append(ev.text)
        self.done = len(lines)

    def finish(self, resp: Response) -> None:
        record = self.record
        record.status_code = resp.status
        if resp.status != 200:
            text = resp.body.decode("utf-8", "replace") if resp.body else ""
            record.error = one_line(f"HTTP {resp.status}: {text}")
            record.failure_kind = http_kind(resp.status)
            return
        if not self.streaming:
            self._finish_whole(resp)
            return
        if is_json_answer(resp.headers.get("content-type", "")):
            # One JSON body for a streaming request: its "TTFT" would be the whole answer's time and its ITLs
            # nothing, so counting it as a success would put fake numbers into every latency statistic.
            record.failure_kind, record.error = event_failure(resp.body, NOT_STREAMED_MESSAGE)
            if record.failure_kind == ERROR_EVENT:  # a JSON error object with status 200
                record.error = self._body_error(resp.body)
            else:
                record.failure_kind, record.error = NOT_STREAMED, NOT_STREAMED_MESSAGE
            return
        if not record.error:
            self._consume(resp.lines, self.done, live=False)
        record.generated_text = "".join(self.texts)
        if self.completion_tokens is not None:
            record.output_tokens = self.completion_tokens
            record.output_tokens_source = "usage"
        elif self.backend.tokens_per_event_known:
            record.output_tokens = sum(record.chunk_tokens)
            record.output_tokens_source = "chunks"
        else:
            # counted after the run by re-tokenizing the text (never in the stream loop)
            record.output_tokens = len(record.chunk_tokens)
            record.output_tokens_source = "pending"
        if not record.error:
            if record.chunk_times:
                record.success = True
            else:
                record.error = EMPTY_STREAM_MESSAGE
                record.failure_kind = EMPTY_STREAM

    @staticmethod
    def _body_error(body: bytes) -> str:
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            return "server error"
        return f"server error: {error_message(data) if isinstance(data, dict) else data}"

    def _finish_whole(self, resp: Response) -> None:
        record = self.record
        t = resp.lines[-1][0] if resp.lines else perf_counter()
        try:
            text, completion_tokens, prompt_tokens = self.backend.parse_response(resp.body)
        except Exception as exc:
            record.failure_kind, record.error = event_failure(resp.body, one_line(str(exc)))
            return
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
        record.success = True

    def fail_transport(self, exc: BaseException) -> None:
        """The connection failed or broke mid-stream: keep what arrived, count the request as failed."""
        record = self.record
        kind = transport_kind(exc)
        record.failure_kind = kind
        name = type(exc).__name__
        if kind == "connect":
            # the transport's message names the host and what failed; an older one raised the socket error
            pool = self.user._pool
            if isinstance(exc, ConnectionRefusedError):
                record.error = f"connection refused by {pool.host}:{pool.port}"
            else:
                record.error = one_line(str(exc) if isinstance(exc, HTTPError) else f"cannot connect: {name}: {exc}")
            return
        if kind == "read_timeout":
            what = f"timed out after {self.user.network_timeout:g} s without data"
        elif kind == "request_timeout":
            limit = self.user.request_timeout
            what = f"the whole request took longer than {limit:g} s" if limit else "the request took too long"
        else:
            what = f"{name}: {exc}"
        if record.chunk_times:
            record.error = one_line(f"stream broken after {len(record.chunk_times)} events: {what}")
        else:
            record.error = one_line(f"request failed: {what}")
