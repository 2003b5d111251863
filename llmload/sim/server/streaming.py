"""Generation jobs: start a request, schedule its chunks, inject its fault, send each chunk on time.

Chunks come from the continuous-batching engine's step ends, or, in fixed-timing mode, from one timer per
job at ``received + ttft + k·itl`` (``ttft`` plus ``--prefill-ms-per-token`` for each prompt token the
prefix cache did not hold). :class:`Streaming` is one part of
:class:`~llmload.sim.server.core.SimServer`; it uses :class:`~llmload.sim.server.conn.Connections` for
I/O and :class:`~llmload.sim.server.http.HttpFront` for whole responses.
"""

from __future__ import annotations

import time
from heapq import heappush
from time import monotonic
from types import MappingProxyType
from typing import TYPE_CHECKING

import orjson

from llmload.sim.engine import Seq
from llmload.sim.errors import RequestError, extra_forbidden, openai_error
from llmload.sim.requests import GenRequest
from llmload.sim.server.conn import OUT, Conn, Job
from llmload.sim.server.http import END_CHUNKED, STREAM_HEAD, frame
from llmload.sim.server.tracefile import traced_request
from llmload.sim.text import TOKEN_COUNT, TOKENS
from llmload.sim.typed_wire import make_wire

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from llmload.sim.config import SimConfig
    from llmload.sim.engine import BatchEngine
    from llmload.sim.faults import Fault, FaultPicker
    from llmload.sim.loop import EventLoop
    from llmload.sim.metrics import GpuWriter, WorkerStats
    from llmload.sim.prefix_cache import PrefixCache
    from llmload.sim.requests import RequestParser
    from llmload.sim.server.tracefile import TraceFile


#: request kind -> the prefix of its response id, as vLLM names them (others: ``cmpl``)
ID_PREFIXES = MappingProxyType({"chat": "chatcmpl", "responses": "resp", "messages": "msg", "embeddings": "embd",
                                "pooling": "pool", "rerank": "rerank"})


class Streaming:
    """Request start (with its fault), the two chunk clocks, and sending, holding and releasing chunks."""

    config: SimConfig
    loop: EventLoop
    parser: RequestParser
    faults: FaultPicker
    engine: BatchEngine | None
    prefix_cache: PrefixCache | None
    trace: TraceFile
    wall_offset: float
    requests: int
    chunks_sent: int
    _ids: Iterator[int]
    _id_prefix: str
    _step_deadline: float | None
    _timers: list
    _timer_seq: Iterator[int]
    _lateness: list[int]
    _itl_s: float
    _session_header: str
    _send: Callable[[Conn, bytes], None]
    _close: Callable[[Conn], None]
    _close_abruptly: Callable[[Conn], None]
    _respond: Callable[..., None]
    _done: Callable[[Conn], None]
    _publish: Callable[..., None]
    _first_token: Callable[[Job, float], None]
    _finished: Callable[[Job, str], None]
    _fixed_running: int
    metrics: WorkerStats
    gpu: GpuWriter
    first_request_at: float | None

    def _slowness(self, now: float) -> float:
        """How many times as long every time is now (``--degrade-after``: 1 until then)."""
        after = self.config.degrade_after_s
        first = self.first_request_at
        if after is None or first is None or now - first < after:
            return 1.0
        return self.config.degrade_factor

    # -- starting ----------------------------------------------------------------------------------------

    def _generate(self, conn: Conn, kind: str, path: str, headers: dict[str, str], body: bytes) -> None:
        received = time.monotonic()
        try:
            req = self.parser.parse(kind, body)
        except RequestError as err:
            self._respond(conn, err.status, err.body)
            return
        self.requests += 1
        if self.first_request_at is None:
            self.first_request_at = received
        request_id = f"{ID_PREFIXES.get(kind, 'cmpl')}-{self._id_prefix}-{next(self._ids)}"
        wire = make_wire(req, self.config.dialect, request_id, int(self.wall_offset + received))
        job = Job(conn, req, wire, request_id, headers.get("x-request-id", ""), path)
        job.received = received
        job.session = headers.get(self._session_header)
        if self.config.trace_requests:
            job.traced_request = traced_request(headers, body)
        conn.job = job
        if req.images:
            self.metrics.set_mm_cache(self.parser.images.queries, self.parser.images.hits)
        fault = self.faults.pick()
        job.fault = fault
        if fault is not None:
            if fault.kind == "error":
                self._fail(job, fault.status, body)
                return
            if fault.kind == "slow_headers":
                self.loop.call_at(received + self.config.faults.slow_headers_s, self._start_later, job)
                return
            if fault.kind == "not_streamed":
                # a server (or proxy) that ignores "stream": one JSON body, as for a non-streaming request
                req.stream = False
                self._start(job)
                return
            # mid-stream faults strike halfway through the chunks (at least after the first)
            job.fault_at = max(1, self._chunk_count(req) // 2)
        self._start(job)

    def _chunk_count(self, req: GenRequest) -> int:
        tpc = self.config.tokens_per_chunk
        return 1 + -(-(req.output_tokens - 1) // tpc)

    def _fail(self, job: Job, status: int, body: bytes = b"") -> None:
        conn = job.conn
        message = f"simulated server error (HTTP {status})"
        self._finished(job, f"error_{status}")
        if status == 422:
            # what a strict (FastAPI/pydantic) server answers for a field it does not know: the request's last one
            data = orjson.loads(body) if body else {}
            name = next(reversed(data), "unknown_field")
            self._respond(conn, 422, extra_forbidden(name, data.get(name)).body)
            return
        if self.config.dialect == "transformers" and job.req.stream:
            # transformers serve reports errors inside a 200 stream and never sends [DONE]
            job.started = time.monotonic()
            self._send(conn, STREAM_HEAD + frame(job.wire.error_event(message)) + END_CHUNKED)
            self._done(conn)
            return
        extra = b"Retry-After: %d\r\n" % self.config.faults.retry_after_s if status in (429, 503) else b""
        err_type = {429: "RateLimitError", 503: "ServiceUnavailableError"}.get(status, "InternalServerError")
        self._respond(conn, status, openai_error(status, message, err_type).body, extra=extra)

    def _start_later(self, job: Job, _deadline: float) -> None:
        self._start(job)

    def _start(self, job: Job) -> None:
        conn = job.conn
        if conn.closed:
            return
        now = time.monotonic()
        job.started = now
        job.in_engine = True
        if job.req.stream:
            self._send(conn, STREAM_HEAD + frame(job.wire.head_events()))
        cfg = self.config
        if self.engine is None:
            job.lora_load = self.adapters.admit(job.req.adapter)  # a swap-in delays the prefill (sim/lora.py)
            req = job.req
            cache = self.prefix_cache
            if cache is not None:
                cache.begin_batch()
                req.cached_tokens = cache.lookup(req.block_hashes, req.prompt_tokens)
                cache.end_batch()
            ttft = ((cfg.ttft_ms or 0.0) + cfg.prefill_ms_per_token * (req.prompt_tokens - req.cached_tokens)) / 1000.0
            ttft *= self._slowness(now)
            self.loop.call_at(job.received + job.lora_load + ttft, self._fixed_tick, job)
            self._fixed_running += 1
            self._publish()
        else:
            self._to_engine(job, now)

    def _to_engine(self, job: Job, now: float) -> None:
        """The engine takes the request; it loads the request's adapter when it admits it (sim/engine.py)."""
        req = job.req
        job.seq = Seq(job, req.prompt_tokens, req.output_tokens, req.block_hashes, req.adapter,
                      prefill_only=req.pooled is not None)
        self.engine.add(job.seq)
        if self._step_deadline is None:
            self._begin_step(now)
        else:
            self._publish()  # it waits for the next step

    def _abandon(self, job: Job, status: str = "client_closed") -> None:
        """The client went away mid-request (or a fault dropped it): free its engine slot and record it."""
        if job.seq is not None and self.engine is not None:
            self.engine.cancel(job.seq)
            self._publish()
        self._finished(job, status)

    # -- the two clocks ----------------------------------------------------------------------------------

    def _fixed_tick(self, job: Job, deadline: float) -> None:
        if job.generated == 0 and self.prefix_cache is not None:
            self.prefix_cache.insert(job.req.block_hashes)  # the prefill is done (also if the client left)
        conn = job.conn
        if conn.job is not job:
            return
        now = monotonic()
        late = int((now - deadline) * 100_000)
        self._lateness[0 if late < 0 else (late if late < 10_000 else 10_000)] += 1
        req = job.req
        # the first chunk is one token (none for a pooling request: its answer goes out when the prefill is done)
        n = min(1, req.output_tokens) if job.generated == 0 else min(self.config.tokens_per_chunk,
                                                                      req.output_tokens - job.generated)
        self.metrics.add_generated(n)
        if self._emit(job, n, now):
            nxt = deadline + self._itl_s * self._slowness(deadline)
            if job.stalled_until > nxt:
                nxt = job.stalled_until
            heappush(self._timers, (nxt, next(self._timer_seq), self._fixed_tick, job))

    def _begin_step(self, now: float) -> None:
        engine = self.engine
        assert engine is not None
        duration = engine.plan_step(now) * self._slowness(now)
        if duration <= 0.0:
            if engine.idle:
                self._step_deadline = None
                self.gpu.idle()
                self._publish()
                return
            duration = 0.001
        self._step_deadline = now + duration
        self.loop.call_at(self._step_deadline, self._end_step)
        self.gpu.step(now, duration, engine.step_prefill_tokens, engine.step_decode_seqs)
        self._publish(duration)

    def _end_step(self, _arg: None, deadline: float) -> None:
        engine = self.engine
        assert engine is not None
        now = time.monotonic()
        self.loop.record_lateness(now - deadline)
        generated = 0
        for seq, n in engine.complete_step(deadline):
            job = seq.key
            if job.conn.job is job:  # type: ignore[attr-defined]
                generated += n
                self._emit(job, n, now)  # type: ignore[arg-type]
        self.metrics.add_generated(generated)
        # keep the model's clock unless we have fallen far behind it
        self._begin_step(deadline if now - deadline < 0.05 else now)

    # -- sending -----------------------------------------------------------------------------------------

    def _emit(self, job: Job, n: int, now: float) -> bool:
        """Send a chunk of ``n`` tokens; returns whether more chunks follow.

        The middle tokens of a healthy stream are sent right here, in one ``send``: this runs once per token
        and bounds the simulator's throughput. Every other chunk goes through :meth:`_emit_chunk`.
        """
        req = job.req
        conn = job.conn
        generated = job.generated + n
        if (
            n == 1 and generated < req.output_tokens and job.chunk_tokens and job.fault is None
            and req.stream and not conn.wbuf and not conn.closed
        ):
            pieces = req.pieces  # structured output's JSON, else the sim's words
            token = (TOKENS[(req.text_offset + job.generated * 7) % TOKEN_COUNT] if pieces is None
                     else pieces[job.generated])
            event = job.wire.token_event(token, generated, False)
            job.generated = generated
            data = b"%x\r\n%b\r\n" % (len(event), event)
            try:
                sent = conn.sock.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                self._close(conn)
                return False
            if sent < len(data):
                conn.wbuf += data[sent:]
                self.loop.modify(conn.fd, OUT)
            job.chunk_times.append(now)
            job.chunk_tokens.append(1)
            self.chunks_sent += 1
            return True
        return self._emit_chunk(job, n, now)

    def _emit_chunk(self, job: Job, n: int, now: float) -> bool:
        """A chunk off the hot path: the first or last, unstreamed, faulty, stalled, or behind unsent bytes."""
        req = job.req
        conn = job.conn
        index = len(job.chunk_tokens)
        if index == 0:
            if job.seq is not None:
                req.cached_tokens = job.seq.cached  # the engine looked the prompt up when it admitted it
            self._first_token(job, now)
        text = req.text(job.generated, n)
        job.generated += n
        last = job.generated >= req.output_tokens
        if not req.stream:
            return self._collect(job, text, n, now, last)
        event = job.wire.token_event(text, job.generated, last, n)
        if index == 0:
            event = job.wire.first_events() + event
        fault = job.fault
        if fault is not None and index == job.fault_at:
            struck = self._strike(job, fault, event, now)
            if struck is None:
                return False
            event = struck
        if job.stalled_until > now:
            return self._hold(job, event, n, last)
        if job.held:
            self._release(job, now)
            if job.conn.job is not job:
                return False
        data = frame(event)
        if last:
            data += frame(job.wire.tail_events()) + END_CHUNKED
        self._send(conn, data)
        job.chunk_times.append(now)
        job.chunk_tokens.append(n)
        self.chunks_sent += 1
        if last:
            self._finished(job, "ok" if fault is None else fault.kind)
            self._done(conn)
        return not last

    def _collect(self, job: Job, text: bytes, n: int, now: float, last: bool) -> bool:
        """A non-streaming request: keep the text, and answer with one JSON body after the last chunk."""
        job.text.append(text)
        job.chunk_times.append(now)
        job.chunk_tokens.append(n)
        if last:
            self._respond(job.conn, 200, job.wire.full_json(b"".join(job.text)))
            self._finished(job, "ok")
        return not last

    def _strike(self, job: Job, fault: Fault, event: bytes, now: float) -> bytes | None:
        """The mid-stream fault hits this chunk: the event to send instead, or None once disconnected."""
        if fault.kind == "disconnect":
            job.conn.job = None
            self._abandon(job, "disconnect")  # the engine drops it, as for a client that went away
            self._close_abruptly(job.conn)
            return None
        if fault.kind == "malformed":
            return job.wire.malformed_event()
        if fault.kind == "stall":
            job.stalled_until = now + self.config.faults.stall_s
        return event

    def _hold(self, job: Job, event: bytes, n: int, last: bool) -> bool:
        """During a stall: keep the chunk back (its time is filled in on release)."""
        job.held.append(event)
        job.chunk_tokens.append(n)
        job.chunk_times.append(0.0)
        if len(job.held) == 1:
            self.loop.call_at(job.stalled_until, self._release, job)
        return not last

    def _release(self, job: Job, _deadline: float) -> None:
        """End a stall: send what was held back (and finish the response if the last chunk was held)."""
        if job.conn.job is not job or not job.held:
            return
        now = time.monotonic()
        data = b"".join(frame(e) for e in job.held)
        self.chunks_sent += len(job.held)
        job.held.clear()
        job.chunk_times = [t or now for t in job.chunk_times]
        last = job.generated >= job.req.output_tokens
        if last:
            data += frame(job.wire.tail_events()) + END_CHUNKED
        self._send(job.conn, data)
        if last:
            self._finished(job, "stall")
            self._done(job.conn)
