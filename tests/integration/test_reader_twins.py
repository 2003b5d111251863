"""The compiled reader and its Python twin give identical records for the same bytes, however they are split.

Streams are recorded from the real ``llmload sim`` over a raw socket: every dialect (with reasoning, several
tokens per chunk, usage in the finish chunk), and every fault of the fault matrix that changes the bytes (an HTTP
error, a malformed event, a disconnect mid-stream, a JSON answer to a streaming request, an error event in a 200
stream). Each recording is then read by both readers the way a request is read (the response parsed, the stream's
events read into its record, a transport error kept with what had arrived), all at once, one byte at a time, and
in seeded random reads, after the stream and live; the records, responses and errors are compared field by field.
"""

from __future__ import annotations

import random
import socket
from typing import Any

import orjson
import pytest

from llmload.client.backends import BACKENDS, get_backend
from llmload.client.reader import StreamReader
from llmload.client.records import RequestRecord
from llmload.client.transport import ResponseParser, TransportError, readers

OUTPUT = 12
MODEL = "twin-model"
TIMING = ("--ttft-ms", "1", "--itl-ms", "0.2", "--model", MODEL)
#: what each simulator injects: every fault that changes the bytes, and the dialect variants
SIMS: dict[str, tuple[str, ...]] = {
    "plain": ("--reasoning-tokens", "3"),
    "multi-token chunks": ("--dialect", "sglang", "--tokens-per-chunk", "3"),
    "faults": ("--error-rate", "0.15", "--error-codes", "429,500,503", "--disconnect-rate", "0.15",
               "--malformed-rate", "0.2", "--not-streamed-rate", "0.15", "--seed", "7"),
    # transformers serve's wire: usage in the finish chunk, and half the requests an error event in a 200 stream
    "error events": ("--dialect", "transformers", "--error-rate", "0.5", "--seed", "3"),
}
#: requests per dialect on each simulator (the faulting ones draw a fault per request)
REQUESTS = {"plain": 1, "multi-token chunks": 1, "faults": 3, "error events": 2}
RANDOM_SPLITS = 3
PATIENCE_S = 30.0


def recorded(sim: Any, path: str, body: bytes) -> bytes:
    """One exchange's response bytes, as the server sent them, up to its close (or reset)."""
    head = (b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n\r\n" % (path.encode(), len(body)))
    received = []
    with socket.create_connection(("127.0.0.1", sim.port), timeout=PATIENCE_S) as conn:
        conn.sendall(head + body)
        try:
            while data := conn.recv(65536):
                received.append(data)
        except ConnectionResetError:
            pass  # a disconnect mid-stream: what arrived is the recording (replayed, it ends as at a close)
    return b"".join(received)


@pytest.fixture(scope="module")
def recordings(start_sim_module) -> list[tuple[str, str, bytes]]:
    """(what, backend, response bytes) for every simulator, dialect and request."""
    out = []
    for what, flags in SIMS.items():
        sim = start_sim_module(*TIMING, *flags)
        for name in BACKENDS:
            backend = get_backend(name)
            for i in range(REQUESTS[what]):
                # a pooling dialect's body: a query (or a batch) and documents, as its datasets make them
                inputs = [f"tell me {i}", "doc a", "doc b"] if backend.pooling else None
                body = orjson.dumps(backend.build_body(f"tell me {i}", OUTPUT, model=MODEL, ignore_eos=True,
                                                       inputs=inputs))
                out.append((f"{what}/{name}/{i}", name, recorded(sim, backend.default_path, body)))
    return out


def read_with(reader: readers.Reader, backend_name: str, pieces: list[bytes], live: bool) -> dict[str, Any]:
    """What a request makes of ``pieces`` (read ``i`` arrives at time ``i``): its record, its response and the
    transport error, with the reader's pieces throughout (mirrors LLMUser._stream)."""
    record = RequestRecord(request_id=1, start=0.0, success=False)
    stream = StreamReader(record, True, get_backend(backend_name))
    stream.pick_events = reader.pick_events
    parser = ResponseParser(stream.on_lines if live else None, decoder=reader.Decoder())
    error = None
    try:
        for i, piece in enumerate(pieces):
            if parser.feed(piece, float(i)):
                break
        else:
            parser.eof(float(len(pieces)))
    except TransportError as exc:
        error = (type(exc).__name__, str(exc))
        partial = exc.response
        if partial is not None and partial.status:
            record.status_code = partial.status
            if not live and partial.status == 200:
                stream.consume(partial.lines, 0, live=False)
        stream.fail_transport(exc)
    else:
        stream.finish(parser.resp)
    resp = parser.resp
    return {"record": record.to_dict(), "error": error, "status": resp.status, "headers": resp.headers,
            "lines": resp.lines, "body": resp.body, "reusable": resp.reusable, "leftover": parser.leftover}


def splits(wire: bytes, seed: int) -> dict[str, list[bytes]]:
    rng = random.Random(seed)
    out = {"all at once": [wire], "one byte at a time": [wire[i : i + 1] for i in range(len(wire))]}
    for k in range(RANDOM_SPLITS):
        cuts = sorted(rng.sample(range(1, len(wire)), min(len(wire) - 1, rng.randint(1, 40))))
        out[f"random reads {k}"] = [wire[a:b] for a, b in zip([0, *cuts], [*cuts, len(wire)], strict=True)]
    return out


@pytest.mark.needs("compiled-reader")
def test_both_readers_give_identical_records_for_every_recorded_stream(recordings) -> None:
    if readers.COMPILED not in readers.available():
        pytest.skip("the compiled reader is not built here (no C compiler when llmload was installed)")
    compiled, python = readers.named(readers.COMPILED), readers.named(readers.PYTHON)
    outcomes = set()
    for n, (what, backend_name, wire) in enumerate(recordings):
        for how, pieces in splits(wire, n).items():
            for live in (False, True):
                mine = read_with(compiled, backend_name, pieces, live)
                twin = read_with(python, backend_name, pieces, live)
                assert mine == twin, f"{what}, {how}, {'live' if live else 'after the stream'}"
                outcomes.add(mine["record"]["failure_kind"] or ("ok" if mine["record"]["success"] else "?"))
    # the recordings hold what they are meant to: successes and each fault's failure
    assert {"ok", "http_429", "http_5xx", "malformed_event", "disconnect", "not_streamed",
            "error_event"} <= outcomes, outcomes


def test_the_readers_agree_on_a_failure_a_live_listener_raises(recordings) -> None:
    """A listener that raises fails its request the same way on both readers (ListenerError in the reactor; here
    the parser hands the exception on)."""
    wire = recordings[0][2]
    results = []
    for name in readers.available():
        seen = []

        def listener(resp, first, seen=seen) -> None:
            seen.append((first, len(resp.lines)))
            if len(resp.lines) >= 3:
                raise KeyError("enough")

        parser = ResponseParser(listener, decoder=readers.named(name).Decoder())
        with pytest.raises(KeyError):
            for i in range(len(wire)):
                parser.feed(wire[i : i + 1], float(i))
        results.append((seen, parser.resp.lines))
    assert all(r == results[0] for r in results)
