"""Pure SSE / NDJSON line parsing for the streaming hot path (no I/O, easy to fuzz).

It runs once per streamed line while the client timestamps events, so it does the least work that
is correct: bytes in, the event payload (still bytes) out; JSON decoding is the backend's job.
"""

from __future__ import annotations

#: The OpenAI end-of-stream marker; compare payloads against it. It may never come (end on EOF).
DONE = b"[DONE]"


def parse_line(line: bytes) -> bytes | None:
    """Return the payload of one stream line, or ``None`` when the line carries no event.

    ``data: X`` and ``data:X`` (TGI) both give ``X``; a bare ``{...}`` line (NDJSON servers) gives
    itself. Blank lines, ``:`` comments (keep-alive pings), other SSE fields (``event:``, ``id:``,
    ``retry:``) and an empty ``data:`` give ``None``. Trailing CR/LF is stripped.
    """
    if line[:5] == b"data:":
        payload = line[6:] if line[5:6] == b" " else line[5:]
        payload = payload.rstrip(b"\r\n")
        return payload or None
    if line[:1] == b"{":
        return line.rstrip(b"\r\n")
    return None
