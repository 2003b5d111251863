"""Locust users that send one streaming completion per task and time every token.

The stream is read by :mod:`llmload.client.transport` and turned into a record by :mod:`llmload.client.reader`: every
``recv`` is timestamped the moment it returns and the lines it completed carry that time; JSON is parsed after
the stream, or live when someone listens to the ``first_token``/``token`` hooks (docs/design.md "Transport": per-event work in the read loop delays later timestamps).
Locust's stats table gets three rows per request, ``LLM E2E`` (with failures), ``LLM TTFT`` and
``LLM TPOT``, for the live view; reported numbers come from :class:`RequestRecord`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from time import perf_counter
from typing import Any, ClassVar

import orjson
from gevent import GreenletExit
from locust import User, task

from llmload.client.backends import Backend, get_backend
from llmload.client.backends.base import one_line
from llmload.client.backends.pooling import grounded_prompt, pooled_inputs
from llmload.client.events import llm_events
from llmload.client.failures import (
    CLIENT_ERROR,
    CUT_OFF,
)
from llmload.client.reader import StreamReader
from llmload.client.records import RequestRecord
from llmload.client.transport import Pool, TransportError
from llmload.common.choices import TTFT_RULES  # noqa: F401  (re-exported: llmload.client.users.TTFT_RULES)
from llmload.core.models import ModelMix
from llmload.core.schedule import Scheduled
from llmload.core.state import state_of
from llmload.core.structured import AnswerCheck, answer_check, checked_format
from llmload.datasets.base import SampleRequest


class LLMUser(User):
    """Base class: set ``backend`` (a ``--backend`` name); llmload's plugin gives it the run's requests.

    A plain Locust ``User``: requests go through llmload's own transport (:mod:`llmload.client.transport`), which
    timestamps every read; Locust's HTTP session would only sit unused.
    """

    abstract = True

    #: wire dialect, a name from :data:`llmload.client.backends.BACKENDS`
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
    #: headers sent with every request (``--header``)
    extra_headers: ClassVar[dict[str, str]] = {}
    verify_tls: ClassVar[bool] = True
    #: put before every ``X-Request-Id`` (``--request-id-prefix``)
    request_id_prefix: ClassVar[str] = ""
    #: ``Authorization: Bearer`` value; never printed
    api_key: str | None = None
    #: seconds without data before a request fails (queueing before the first token can be long)
    network_timeout = 600.0
    connection_timeout = 30.0
    #: whole-request limit in seconds, however steadily data arrives (None: no limit)
    request_timeout: float | None = None
    #: this class's goodput SLOs in ms (``{"ttft": 500, "e2el": 8000}``): they replace ``--goodput`` for its
    #: requests in a mixed workload
    goodput: ClassVar[dict[str, float] | None] = None
    #: closed loop: seconds between a response and the next request (``--think-time``)
    think: Any = None
    #: which requests the client cancels on purpose, and when (``--cancel-rate``/``--cancel-after``: a
    #: :class:`~llmload.core.cancel.CancelPlan`); None cancels nothing
    cancel: Any = None
    #: several models or LoRA adapters: a :class:`~llmload.core.models.ModelMix`, or a list of names taken in
    #: turn; None: every request names ``model``
    models: Any = None
    #: multi-turn replay: the header that carries each conversation's id, for session-affine routers
    #: (``--session-header``; '' sends none)
    session_header: str = "X-Session-ID"
    #: how conversations (samples with turns) replay: a :class:`~llmload.core.conversation.ConversationPolicy`
    #: (``--history``, ``--max-context-tokens``, ``--turn-think-time``...); None: the defaults
    conversation: Any = None
    #: how agentic sessions (samples with a session: ``--dataset-name weka_trace``) replay: a
    #: :class:`~llmload.core.session.SessionPolicy` (``--time-scale``, ``--max-idle``, ``--stream-all``)
    sessions: Any = None
    #: replay whole conversations whatever ``--multi-turn`` says (:class:`ConversationUser`)
    multi_turn: ClassVar[bool] = False
    #: ``locust -f``: the attributes the locustfile set on the class itself (the run's settings leave them)
    llmload_own: ClassVar[frozenset[str]]

    def __init__(self, environment: Any) -> None:
        super().__init__(environment)
        self.dialect: Backend = get_backend(self.backend)
        self._path = self.endpoint or self.dialect.default_path
        self._worker = f"{os.getpid()}"
        self._run = state_of(environment)
        mix = self.models
        self._mix = ModelMix(tuple(mix)) if isinstance(mix, list | tuple) and mix else mix
        # --response-format (or a response_format in the extra body): every answer is checked after it ended
        checked = checked_format(self.extra_body or {}, "extra_body")
        self._answer_check: AnswerCheck | None = answer_check(checked) if checked is not None else None
        headers = {"Accept-Encoding": "identity", "Content-Type": "application/json", "Accept": "text/event-stream",
                   **self.dialect.extra_headers()}
        if self.api_key:
            headers.update(self.dialect.auth_headers(self.api_key))
        headers.update(self.extra_headers)  # --header, as vLLM: over the defaults, under the request id
        self._headers = headers
        self.pool = Pool(self.host or environment.host or "", connect_timeout=self.connection_timeout,
                          read_timeout=self.network_timeout, request_timeout=self.request_timeout,
                          reactor=self._run.reactor, verify_tls=self.verify_tls)

    def wait_time(self) -> float:
        return float(self.think()) if self.think is not None else 0.0

    @task
    def generate(self) -> None:
        """Closed loop: stream the run's next request; open loop: the run's dispatcher sends, users idle."""
        run = getattr(self.environment, "llmload", None)
        step = getattr(run, "user_step", None)
        if step is None:
            raise RuntimeError(f"{type(self).__name__} has no run to take requests from: run it with "
                               "`locust -f` and a locustfile that imports llmload.locust")
        step(self)

    def new_record(self, request: Scheduled | SampleRequest, intended_send: float | None = None) -> RequestRecord:
        """The record of one request: a scheduled one keeps its run-wide id, a bare sample gets one."""
        if isinstance(request, Scheduled):
            sample, request_id, index = request.sample, request.request_id, request.index
        else:
            sample, request_id = request, request.request_id or f"{self._worker}-{self._run.next_id()}"
            index = None
        return RequestRecord(
            model=self._mix.pick(index, request_id) if self._mix is not None else self.model,
            request_id=request_id,
            backend=self.dialect.name,
            prompt_len=sample.prompt_len,
            trace_cached_tokens=getattr(sample, "trace_cached_tokens", None),
            expected_output_len=sample.expected_output_len,
            intended_send=intended_send,
            worker=self._worker,
            user_class=type(self).__name__,
            schedule_index=index,
        )

    def send(
        self, request: Scheduled | SampleRequest, intended_send: float | None = None,
        record: RequestRecord | None = None, on_response_end: Callable[[], None] | None = None,
    ) -> RequestRecord:
        """Stream one request and return its record (also fired as ``llm_events.request_complete``).

        Pass ``record`` (from :meth:`new_record`) to keep a handle on a request that may be cut off;
        ``on_response_end`` is called the moment the response has ended (or failed), before it is parsed: a
        concurrency slot freed then lets the next request go while this one's events are parsed.
        """
        sample = request.sample if isinstance(request, Scheduled) else request
        if record is None:
            record = self.new_record(request, intended_send)
        images, inputs = getattr(sample, "images", None), getattr(sample, "inputs", None)
        prompt = sample.prompt if not inputs or self.dialect.pooling else grounded_prompt(inputs)
        body = self.dialect.build_body(prompt, sample.expected_output_len, model=record.model or self.model,
                                        ignore_eos=self.ignore_eos, extra=self.extra_body or None,
                                        messages=getattr(sample, "messages", None), images=images, inputs=inputs)
        if images:
            record.images, record.image_bytes = len(images), sum(map(len, images))
        if self.dialect.pooling:
            record.input_sequences = pooled_inputs(self.dialect.name, inputs)
        if getattr(sample, "stream", None) is False:  # a trace's non-streamed call
            body["stream"] = False
            body.pop("stream_options", None)
        streaming = bool(body.get("stream", self.dialect.streams))
        reader = StreamReader(record, streaming, self.dialect, ttft_rule=self.ttft_rule, reactor=self.pool.reactor,
                              hooks=llm_events, user=self, network_timeout=self.network_timeout,
                              request_timeout=self.request_timeout)
        reader.tools = "tools" in body
        self._run.in_flight += 1
        try:
            exception = self._stream(record, reader, orjson.dumps(body), on_response_end)
        except GreenletExit:
            # the run ended while this request was in flight: count it as cut off, never drop it
            record.cut_off = True
            record.success = False
            record.failure_kind = CUT_OFF
            record.error = record.error or "cut off: the run ended while this request was in flight"
            llm_events.request_complete.fire(record=record, user=self)
            raise
        finally:
            self._run.in_flight -= 1
        self.pool.reactor.yield_to_reads()
        if self._answer_check is not None and record.success and not record.tool_calls:
            # an answer that called a tool has no text to check: neither valid nor invalid
            # after the response, off the per-token path: does it parse, does it match the schema
            record.structured_output_valid, record.structured_output_error = self._answer_check.verdict(
                record.text())
        self._fire_stats_row(record, exception)
        llm_events.request_complete.fire(record=record, user=self)
        self.pool.reactor.yield_to_reads()  # a batch of requests ending together must not hold back the reads
        return record

    def not_sent(self, record: RequestRecord) -> None:
        """A request of this user's that the run's end cut off before it was sent: hooks hear of it too."""
        llm_events.request_complete.fire(record=record, user=self)

    def _stream(self, record: RequestRecord, reader: StreamReader, payload: bytes,
                on_end: Callable[[], None] | None = None) -> Exception | None:
        """POST and read the stream into ``record``; returns the exception that failed it, if any. This is where
        a stream is parsed: live when someone listens to the token hooks, else once after the stream."""
        headers = dict(self._headers)
        headers["X-Request-Id"] = self.request_id_prefix + record.request_id
        if record.conversation_id and self.session_header:
            headers[self.session_header] = record.conversation_id
        live = reader.on_lines if (llm_events.first_token.listened or llm_events.token.listened) else None
        record.start = perf_counter()  # replaced by the moment the bytes go out, once a connection is open

        def sending() -> None:
            record.start = perf_counter()

        try:
            try:
                cancel_s, cancel_lines = self.cancel.draw(record.request_id) if self.cancel else (None, None)
                resp = self.pool.request("POST", self._path, headers, payload, live, sending,
                                         cancel_after_s=cancel_s, cancel_after_lines=cancel_lines)
            finally:
                if on_end is not None:
                    on_end()
        except TransportError as exc:
            partial = exc.response
            if partial is not None and partial.status:
                record.status_code = partial.status
                if live is None and partial.status == 200 and reader.streaming:
                    reader.consume(partial.lines, 0, live=False)  # keep the tokens that did arrive
            reader.fail_transport(exc)
            return exc
        except Exception as exc:
            record.error = one_line(f"{type(exc).__name__}: {exc}")
            record.failure_kind = CLIENT_ERROR
            return exc
        if record.images or record.input_sequences:
            record.send_s = resp.sent_at - record.start
        reader.finish(resp)
        return None

    def _fire_stats_row(self, record: RequestRecord, exception: Exception | None) -> None:
        """Locust's stats table: ``LLM E2E`` (with failures), and TTFT / TPOT rows for the live view."""
        fire = self.environment.events.request.fire
        if record.cancelled:
            # not a failure (Locust would exit 1 for one): a row of its own, as long as it ran
            fire(request_type="LLM", name="cancelled", response_time=(perf_counter() - record.start) * 1000.0,
                 response_length=0, exception=None, context={})
            return
        if record.success:
            fire(request_type="LLM", name="E2E", response_time=(record.e2el or 0.0) * 1000.0,
                 response_length=len(record.generated_text), exception=None, context={})
            self._fire_live_rows(record)
        else:
            fire(request_type="LLM", name="E2E", response_time=(perf_counter() - record.start) * 1000.0,
                 response_length=0, exception=exception or LLMRequestFailed(record.error), context={})

    def _fire_live_rows(self, record: RequestRecord) -> None:
        fire = self.environment.events.request.fire
        ttft = record.ttft
        if ttft is not None:
            fire(request_type="LLM", name="TTFT", response_time=ttft * 1000.0, response_length=0, exception=None,
                 context={})
        tpot = record.tpot  # the one definition (llmload.metrics.definitions.tpot_s)
        if tpot is not None:
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


class EmbeddingsUser(LLMUser):
    """Sends the run's prompts to ``/v1/embeddings`` (a batch of them with ``--random-batch-size``): one JSON answer
    a request, measured end to end (no TTFT)."""

    abstract = True
    backend = "openai-embeddings"


class RerankUser(LLMUser):
    """Sends a query and its documents to ``/v1/rerank`` (``--dataset-name random-rerank``)."""

    abstract = True
    backend = "vllm-rerank"


class PoolingUser(LLMUser):
    """Sends the run's prompts to vLLM's ``/pooling``."""

    abstract = True
    backend = "vllm-pooling"


class ConversationUser(ChatUser):
    """Replays whole conversations turn by turn against ``/v1/chat/completions``: each turn carries the
    conversation so far (docs/conversations.md). A locustfile with this class runs as ``--multi-turn``."""

    abstract = True
    multi_turn = True
