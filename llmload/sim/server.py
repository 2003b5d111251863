"""HTTP/1.1 handling, generation jobs and the trace file of the simulated engine.

One process runs one :class:`SimServer` on an :class:`~llmload.sim.loop.EventLoop`. Streams use chunked
transfer encoding with one SSE event per HTTP chunk, keep-alive is supported, and every chunk is sent at its
scheduled time: from the continuous-batching engine's step ends, or, in fixed-timing mode, at
``received + ttft + k·itl``. ``--workers N`` runs N such processes on one port with SO_REUSEPORT.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import sys
import time
from collections.abc import Callable
from heapq import heappush
from itertools import count
from time import monotonic

import orjson

from llmload.metrics.percentiles import rank_bucket
from llmload.sim.config import SimConfig
from llmload.sim.engine import BatchEngine, Seq
from llmload.sim.faults import Fault, FaultPicker
from llmload.sim.loop import EventLoop
from llmload.sim.requests import (
    ROUTES,
    GenRequest,
    RequestError,
    RequestParser,
    extra_forbidden,
    openai_error,
)
from llmload.sim.text import TOKEN_COUNT, TOKENS, text_of
from llmload.sim.wire import Wire, make_wire
from llmload.tokenizer import BUILTIN

_IN = select.EPOLLIN | select.EPOLLRDHUP
_OUT = select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLOUT
_REASONS = {
    200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 411: "Length Required",
    413: "Payload Too Large", 422: "Unprocessable Entity", 429: "Too Many Requests", 500: "Internal Server Error",
    503: "Service Unavailable",
}
_MAX_BODY = 64 * 1024 * 1024
_END_CHUNKED = b"0\r\n\r\n"


class Conn:
    """One client connection."""

    __slots__ = ("busy", "closed", "fd", "job", "keep_alive", "rbuf", "sock", "wbuf")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.rbuf = bytearray()
        self.wbuf = bytearray()
        self.busy = False
        self.closed = False
        self.keep_alive = True
        self.job: Job | None = None


class Job:
    """One generation request in flight."""

    __slots__ = (
        "chunk_times", "chunk_tokens", "client_id", "conn", "fault", "fault_at", "generated", "held", "path",
        "received", "req", "request_id", "seq", "stalled_until", "started", "text", "wire",
    )

    def __init__(self, conn: Conn, req: GenRequest, wire: Wire, request_id: str, client_id: str, path: str) -> None:
        self.conn = conn
        self.req = req
        self.wire = wire
        self.request_id = request_id
        self.client_id = client_id
        self.path = path
        self.received = 0.0
        self.started = 0.0
        self.generated = 0
        self.chunk_times: list[float] = []
        self.chunk_tokens: list[int] = []
        self.text: list[bytes] = []
        self.fault: Fault | None = None
        #: index of the chunk at which a mid-stream fault strikes
        self.fault_at = -1
        self.seq: Seq | None = None
        self.stalled_until = 0.0
        #: engine chunks produced during a stall, sent when it ends
        self.held: list[bytes] = []


class SimServer:
    """The simulated engine's HTTP front end and chunk scheduler."""

    def __init__(self, config: SimConfig, sock: socket.socket, worker_index: int = 0,
                 count_tokens: Callable[[str], int] | None = None) -> None:
        self.config = config
        self.sock = sock
        self.loop = EventLoop()
        self.parser = RequestParser(config, count_tokens)
        self.faults = FaultPicker(config.faults, config.seed * 7919 + worker_index)
        self.engine = None if config.fixed_timing else BatchEngine(config.profile, config.tokens_per_chunk)
        self._step_deadline: float | None = None
        self.conns: dict[int, Conn] = {}
        self._ids = count(1)
        self._id_prefix = f"{os.getpid():x}"
        self.wall_offset = time.time() - time.monotonic()
        self.trace_fd = (
            os.open(config.trace_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if config.trace_file else None
        )
        self.requests = 0
        self.chunks_sent = 0
        # hot-path shortcuts into the loop
        self._timers = self.loop.timers
        self._timer_seq = self.loop._seq
        self._lateness = self.loop.lateness
        self._itl_s = (config.itl_ms or 0.0) / 1000.0
        sock.setblocking(False)
        self.loop.register(sock.fileno(), select.EPOLLIN, self._on_accept)

    # -- connections -------------------------------------------------------------------------------------

    def serve_forever(self) -> None:
        try:
            self.loop.run()
        finally:
            self.close()

    def stop(self) -> None:
        self.loop.stop()

    def close(self) -> None:
        for conn in list(self.conns.values()):
            self._close(conn)
        self.loop.unregister(self.sock.fileno())
        self.loop.close()
        if self.trace_fd is not None:
            os.close(self.trace_fd)
            self.trace_fd = None

    def _on_accept(self, _events: int) -> None:
        while True:
            try:
                client, _addr = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            client.setblocking(False)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = Conn(client)
            self.conns[conn.fd] = conn
            self.loop.register(conn.fd, _IN, lambda ev, c=conn: self._on_conn(c, ev))

    def _on_conn(self, conn: Conn, events: int) -> None:
        if events & select.EPOLLOUT:
            self._flush(conn)
        if events & (select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLHUP | select.EPOLLERR):
            try:
                data = conn.sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if not data:
                self._close(conn)
                return
            conn.rbuf += data
            if not conn.busy:
                self._next_request(conn)

    def _close(self, conn: Conn) -> None:
        if conn.closed:
            return
        conn.closed = True
        job = conn.job
        if job is not None:
            conn.job = None
            if job.seq is not None and self.engine is not None:
                self.engine.cancel(job.seq)
            self._write_trace(job, "client_closed")
        self.loop.unregister(conn.fd)
        self.conns.pop(conn.fd, None)
        try:
            conn.sock.close()
        except OSError:
            pass

    def _send(self, conn: Conn, data: bytes) -> None:
        if conn.closed:
            return
        if conn.wbuf:
            conn.wbuf += data
            return
        try:
            sent = conn.sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self._close(conn)
            return
        if sent < len(data):
            conn.wbuf += data[sent:]
            self.loop.modify(conn.fd, _OUT)

    def _flush(self, conn: Conn) -> None:
        try:
            sent = conn.sock.send(conn.wbuf)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn)
            return
        del conn.wbuf[:sent]
        if not conn.wbuf and not conn.closed:
            self.loop.modify(conn.fd, _IN)
            if not conn.keep_alive and not conn.busy:
                self._close(conn)

    # -- HTTP --------------------------------------------------------------------------------------------

    def _next_request(self, conn: Conn) -> None:
        """Parse one complete request from the buffer, if there is one, and handle it."""
        buf = conn.rbuf
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > 65536:
                self._respond(conn, 413, b'{"error":{"message":"headers too large","code":413}}', close=True)
            return
        head = bytes(buf[:end]).decode("latin-1").split("\r\n")
        try:
            method, target, version = head[0].split(" ", 2)
        except ValueError:
            self._respond(conn, 400, b'{"error":{"message":"malformed request line","code":400}}', close=True)
            return
        headers: dict[str, str] = {}
        for line in head[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._respond(conn, 411, b'{"error":{"message":"send a Content-Length body","code":411}}', close=True)
            return
        try:
            length = int(headers.get("content-length", "0"))
        except ValueError:
            length = -1
        if length < 0 or length > _MAX_BODY:
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
            status, _REASONS.get(status, "Error").encode(), content_type, len(body), extra,
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
        kind = ROUTES.get(path)
        if kind is not None:
            if method != "POST":
                self._respond(conn, 405, openai_error(405, f"use POST for {path}", "MethodNotAllowed").body)
                return
            self._generate(conn, kind, path, headers, body)
        elif path == "/health" and method in ("GET", "HEAD"):
            self._respond(conn, 200, b"")
        elif path == "/v1/models" and method == "GET":
            # llmload_tokenizer: the tokenizer a client should count with (llmload.target.describe_server):
            # --tokenizer's value, else builtin, the one llmload bench uses against its own simulator
            model = {"id": self.config.model, "object": "model", "created": 0, "owned_by": "llmload",
                     "max_model_len": self.config.max_model_len,
                     "llmload_tokenizer": self.config.tokenizer or BUILTIN}
            self._respond(conn, 200, orjson.dumps({"object": "list", "data": [model]}))
        elif path == "/sim/stats" and method == "GET":
            self._respond(conn, 200, orjson.dumps(self.stats()))
        else:
            err = openai_error(404, f"no route for {method} {path}", "NotFoundError")
            self._respond(conn, 404, err.body)

    # -- generation --------------------------------------------------------------------------------------

    def _generate(self, conn: Conn, kind: str, path: str, headers: dict[str, str], body: bytes) -> None:
        received = time.monotonic()
        try:
            req = self.parser.parse(kind, body)
        except RequestError as err:
            self._respond(conn, err.status, err.body)
            return
        self.requests += 1
        prefix = "chatcmpl" if kind == "chat" else "cmpl"
        request_id = f"{prefix}-{self._id_prefix}-{next(self._ids)}"
        wire = make_wire(req, self.config.dialect, request_id, int(self.wall_offset + received))
        job = Job(conn, req, wire, request_id, headers.get("x-request-id", ""), path)
        job.received = received
        conn.job = job
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
        self._write_trace(job, f"error_{status}")
        if status == 422:
            # what a strict (FastAPI/pydantic) server answers for a field it does not know: the request's last one
            data = orjson.loads(body) if body else {}
            name = next(reversed(data), "unknown_field")
            self._respond(conn, 422, extra_forbidden(name, data.get(name)).body)
            return
        if self.config.dialect == "transformers" and job.req.stream:
            # transformers serve reports errors inside a 200 stream and never sends [DONE]
            job.started = time.monotonic()
            self._send(conn, self._stream_head() + self._frame(job.wire.error_event(message)) + _END_CHUNKED)
            self._done(conn)
            return
        extra = b"Retry-After: %d\r\n" % self.config.faults.retry_after_s if status in (429, 503) else b""
        err_type = {429: "RateLimitError", 503: "ServiceUnavailableError"}.get(status, "InternalServerError")
        self._respond(conn, status, openai_error(status, message, err_type).body, extra=extra)

    @staticmethod
    def _stream_head() -> bytes:
        return (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nCache-Control: no-cache\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )

    @staticmethod
    def _frame(data: bytes) -> bytes:
        return b"%x\r\n" % len(data) + data + b"\r\n" if data else b""

    def _start_later(self, job: Job, _deadline: float) -> None:
        self._start(job)

    def _start(self, job: Job) -> None:
        conn = job.conn
        if conn.closed:
            return
        now = time.monotonic()
        job.started = now
        if job.req.stream:
            self._send(conn, self._stream_head() + self._frame(job.wire.head_events()))
        cfg = self.config
        if self.engine is None:
            ttft = (cfg.ttft_ms or 0.0) / 1000.0
            self.loop.call_at(job.received + ttft, self._fixed_tick, job)
        else:
            job.seq = Seq(job, job.req.prompt_tokens, job.req.output_tokens)
            self.engine.add(job.seq)
            if self._step_deadline is None:
                self._begin_step(now)

    def _fixed_tick(self, job: Job, deadline: float) -> None:
        conn = job.conn
        if conn.job is not job:
            return
        now = monotonic()
        late = int((now - deadline) * 100_000)
        self._lateness[0 if late < 0 else (late if late < 10_000 else 10_000)] += 1
        req = job.req
        n = 1 if job.generated == 0 else min(self.config.tokens_per_chunk, req.output_tokens - job.generated)
        if self._emit(job, n, now):
            nxt = deadline + self._itl_s
            if job.stalled_until > nxt:
                nxt = job.stalled_until
            heappush(self._timers, (nxt, next(self._timer_seq), self._fixed_tick, job))

    def _begin_step(self, now: float) -> None:
        engine = self.engine
        assert engine is not None
        duration = engine.plan_step(now)
        if duration <= 0.0:
            if engine.idle:
                self._step_deadline = None
                return
            duration = 0.001
        self._step_deadline = now + duration
        self.loop.call_at(self._step_deadline, self._end_step)

    def _end_step(self, _arg: None, deadline: float) -> None:
        engine = self.engine
        assert engine is not None
        now = time.monotonic()
        self.loop.record_lateness(now - deadline)
        for seq, n in engine.complete_step(deadline):
            job = seq.key
            if job.conn.job is job:  # type: ignore[attr-defined]
                self._emit(job, n, now)  # type: ignore[arg-type]
        # keep the model's clock unless we have fallen far behind it
        self._begin_step(deadline if now - deadline < 0.05 else now)

    def _emit(self, job: Job, n: int, now: float) -> bool:
        """Send a chunk of ``n`` tokens; returns whether more chunks follow."""
        req = job.req
        conn = job.conn
        generated = job.generated + n
        if (
            n == 1 and generated < req.output_tokens and job.chunk_tokens and job.fault is None
            and req.stream and not conn.wbuf and not conn.closed
        ):
            # the hot path: a middle token of a healthy stream, one send
            event = job.wire.token_event(TOKENS[(req.text_offset + job.generated * 7) % TOKEN_COUNT], generated, False)
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
                self.loop.modify(conn.fd, _OUT)
            job.chunk_times.append(now)
            job.chunk_tokens.append(1)
            self.chunks_sent += 1
            return True
        index = len(job.chunk_tokens)
        text = text_of(req.text_offset, job.generated, n)
        job.generated += n
        last = job.generated >= req.output_tokens
        if not req.stream:
            job.text.append(text)
            job.chunk_times.append(now)
            job.chunk_tokens.append(n)
            if last:
                self._respond(conn, 200, job.wire.full_json(b"".join(job.text)))
                self._write_trace(job, "ok")
            return not last
        event = job.wire.token_event(text, job.generated, last)
        if index == 0:
            event = job.wire.first_events() + event
        fault = job.fault
        if fault is not None and index == job.fault_at:
            if fault.kind == "disconnect":
                self._write_trace(job, "disconnect")
                conn.job = None
                self._close_abruptly(conn)
                return False
            if fault.kind == "malformed":
                event = job.wire.malformed_event()
            elif fault.kind == "stall":
                job.stalled_until = now + self.config.faults.stall_s
        if job.stalled_until > now:
            # a stall: hold chunks back until it ends, then send them all at once
            job.held.append(event)
            job.chunk_tokens.append(n)
            job.chunk_times.append(0.0)
            if len(job.held) == 1:
                self.loop.call_at(job.stalled_until, self._release, job)
            return not last
        if job.held:
            self._release(job, now)
            if job.conn.job is not job:
                return False
        data = self._frame(event)
        if last:
            data += self._frame(job.wire.tail_events()) + _END_CHUNKED
        self._send(conn, data)
        job.chunk_times.append(now)
        job.chunk_tokens.append(n)
        self.chunks_sent += 1
        if last:
            self._write_trace(job, "ok" if fault is None else fault.kind)
            self._done(conn)
        return not last

    def _release(self, job: Job, _deadline: float) -> None:
        """End a stall: send what was held back (and finish the response if the last chunk was held)."""
        if job.conn.job is not job or not job.held:
            return
        now = time.monotonic()
        data = b"".join(self._frame(e) for e in job.held)
        self.chunks_sent += len(job.held)
        job.held.clear()
        job.chunk_times = [t or now for t in job.chunk_times]
        last = job.generated >= job.req.output_tokens
        if last:
            data += self._frame(job.wire.tail_events()) + _END_CHUNKED
        self._send(job.conn, data)
        if last:
            self._write_trace(job, "stall")
            self._done(job.conn)

    def _close_abruptly(self, conn: Conn) -> None:
        try:
            conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        except OSError:
            pass
        self._close(conn)

    # -- ground truth --------------------------------------------------------------------------------------

    def _write_trace(self, job: Job, status: str) -> None:
        if self.trace_fd is None:
            return
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
            "chunks": job.chunk_times,
            "tokens": job.chunk_tokens,
            "prompt_tokens": job.req.prompt_tokens,
            "completion_tokens": sum(job.chunk_tokens),
            "max_tokens": job.req.max_tokens,
            "clock": "monotonic",
            "wall_offset": self.wall_offset,
            "pid": os.getpid(),
        }
        os.write(self.trace_fd, orjson.dumps(entry) + b"\n")

    def stats(self) -> dict:
        counts = self.loop.lateness
        total = sum(counts)

        def pct(p: float) -> float:
            """The lateness percentile in µs: the bucket :func:`rank_bucket` picks (10 µs each)."""
            k = rank_bucket(counts, p)
            return 0.0 if k is None else k * 10.0

        engine = self.engine
        return {
            "pid": os.getpid(),
            "requests": self.requests,
            "chunks_sent": self.chunks_sent,
            "timer_events": total,
            "lateness_us": {"p50": pct(50), "p99": pct(99), "p999": pct(99.9), "max": pct(100)},
            "running": len(engine.running) if engine else None,
            "waiting": len(engine.waiting) if engine else None,
        }


# -- processes -------------------------------------------------------------------------------------------

def _listen(host: str, port: int, reuse_port: bool) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(4096)
    return sock


def _token_counter(config: SimConfig) -> Callable[[str], int] | None:
    if not config.tokenizer:
        return None
    from llmload.tokenizer import load_tokenizer

    tok = load_tokenizer(config.tokenizer)
    return lambda text: len(tok(text).input_ids)


def _install_stop(server: SimServer) -> None:
    signal.signal(signal.SIGTERM, lambda *_: server.stop())
    signal.signal(signal.SIGINT, lambda *_: server.stop())


def run_worker(config: SimConfig, sock: socket.socket, index: int, counter: Callable[[str], int] | None) -> None:
    server = SimServer(config, sock, index, counter)
    _install_stop(server)
    server.serve_forever()


def serve(config: SimConfig, ready: Callable[[str], None] | None = None) -> None:
    """Run the simulator until SIGINT/SIGTERM; ``ready`` gets the base URL once it accepts connections."""
    counter = _token_counter(config)
    workers = max(1, config.workers)
    # Bind once without SO_REUSEPORT first, so a busy port fails here even if its owner shares it.
    probe = _listen(config.host, config.port, reuse_port=False)
    port = probe.getsockname()[1]
    host = f"[{config.host}]" if ":" in config.host else config.host
    url = f"http://{host}:{port}"
    if workers == 1:
        server = SimServer(config, probe, 0, counter)
        _install_stop(server)
        if ready:
            ready(url)
        server.serve_forever()
        return
    probe.close()
    children: list[int] = []
    stopping: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        stopping.append(signum)
        for pid in children:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    stop_signals = {signal.SIGTERM, signal.SIGINT}
    for index in range(workers):
        sock = _listen(config.host, port, reuse_port=True)
        # Block stop signals across fork so a child never runs the parent's handler: it takes a pending
        # signal only once its own handler is installed.
        signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                server = SimServer(config, sock, index, counter)
                _install_stop(server)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, stop_signals)
                server.serve_forever()
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stop_signals)
        children.append(pid)
        sock.close()
    if stopping:  # a signal came while forking: pass it to the workers started after it
        forward(signal.SIGTERM, None)
    elif ready:
        ready(url)
    status = 0
    for pid in children:
        while True:
            try:
                _, code = os.waitpid(pid, 0)
                status = status or os.waitstatus_to_exitcode(code)
                break
            except InterruptedError:
                continue
            except ChildProcessError:
                break
    sys.exit(max(0, status))
