"""What one HTTP/1.1 response is once read: status, headers, and its timestamped lines (the parser fills it in; the
transport errors carry the part that had arrived)."""

from __future__ import annotations


class Response:
    """Status, headers, and the body as (timestamp, line) pairs plus raw bytes. The raw bytes are kept only
    where something reads them (an error status, a JSON or other whole answer): a 200 event stream is held
    once, as its lines."""

    __slots__ = ("body", "header_time", "headers", "lines", "reusable", "sent_at", "status")

    def __init__(self) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self.header_time = 0.0
        #: (perf_counter of the read that completed the line, line without the trailing newline)
        self.lines: list[tuple[float, bytes]] = []
        self.body = b""
        self.reusable = False
        #: perf_counter once the request's last byte was handed to the socket (a body of megabytes of images takes
        #: a while to go out)
        self.sent_at = 0.0
