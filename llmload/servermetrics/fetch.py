"""One HTTP GET of a ``/metrics`` page on gevent sockets, every failure turned into a kind and one line.

Why gevent sockets explicitly (not ``urllib`` or a thread pool): a scrape runs next to the streaming requests
on the same event loop; gevent's socket waits cooperatively whether or not the process is monkey-patched
(``llmload bench`` and ``locust -f`` are; a test or a ``probe()`` before the run may not be), costs no thread,
and a deadline (``gevent.Timeout``) bounds the whole exchange, a server that trickles bytes included.

Credentials: ``user:password@`` in the URL is sent as Basic authentication; ``headers`` (an API key) are sent
as given. Neither appears in a message: URLs are shown through :func:`llmload.common.urls.redact_url` and any secret
that an exception's text might carry is masked.
"""

from __future__ import annotations

import http.client
import zlib
from dataclasses import dataclass
from time import perf_counter, time
from urllib.parse import urlsplit

import gevent
import gevent.socket
import gevent.ssl

from llmload.common.urls import MASK, basic_auth, redact_url, secrets_in

#: failure kinds, as counted by the scraper
HTTP_404, HTTP_ERROR, TIMEOUT, CONNECT, GARBAGE = "http_404", "http_error", "timeout", "connect", "garbage"
FAILURE_KINDS = (HTTP_404, HTTP_ERROR, TIMEOUT, CONNECT, GARBAGE)

#: the largest body read (a vLLM page is ~100 KB; more is not a metrics page)
MAX_BODY = 32 << 20
#: bytes asked for per read of the body
READ_SIZE = 1 << 16

ACCEPT = "text/plain;version=0.0.4;q=0.9,*/*;q=0.1"


class ScrapeError(Exception):
    """A failed scrape: ``kind`` (one of :data:`FAILURE_KINDS`) and a one-line message, secrets masked."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(slots=True)
class Page:
    """A ``200`` answer: the text and when it arrived (``perf_counter()`` and wall clock)."""

    text: str
    t: float
    wall: float


class _Deadline(Exception):
    """The whole exchange ran past its time (raised by our own ``gevent.Timeout``)."""


class _HTTP(http.client.HTTPConnection):
    def connect(self) -> None:
        self.sock = gevent.socket.create_connection((self.host, self.port), self.timeout)


class _HTTPS(http.client.HTTPSConnection):
    def __init__(self, host: str, port: int | None, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self._gevent_tls = gevent.ssl.create_default_context()

    def connect(self) -> None:
        sock = gevent.socket.create_connection((self.host, self.port), self.timeout)
        self.sock = self._gevent_tls.wrap_socket(sock, server_hostname=self.host)


class Masker:
    """Masks a URL's password and header values in text meant for the user."""

    def __init__(self, url: str, headers: dict[str, str] | None) -> None:
        self.shown = redact_url(url)
        secrets = {*secrets_in(url), *(v for v in (headers or {}).values() if len(v) >= 4)}
        auth = basic_auth(url)
        if auth and secrets_in(url):  # the credentials' base64 form, should a server echo the header
            secrets.update((auth, auth.split(" ", 1)[1]))
        self._secrets = sorted(secrets, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, MASK)
        return " ".join(text.split())


def _request_headers(url: str, headers: dict[str, str] | None) -> dict[str, str]:
    out = {"Accept": ACCEPT, "Accept-Encoding": "gzip", "User-Agent": "llmload"}
    auth = basic_auth(url)
    if auth:
        out["Authorization"] = auth
    out.update(headers or {})
    return out


def _connection(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ScrapeError(CONNECT, "not an http(s) URL")
    host = parts.hostname
    cls = _HTTPS if parts.scheme == "https" else _HTTP
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return cls(host, parts.port, timeout=timeout), target


def _body(resp: http.client.HTTPResponse) -> str:
    parts: list[bytes] = []
    size = 0
    while chunk := resp.read(READ_SIZE):
        parts.append(chunk)
        size += len(chunk)
        if size > MAX_BODY:
            raise ScrapeError(GARBAGE, f"the page is over {MAX_BODY >> 20} MiB")
    data = b"".join(parts)
    if (resp.getheader("Content-Encoding") or "").lower() == "gzip":
        try:
            data = zlib.decompress(data, 16 + zlib.MAX_WBITS)
        except zlib.error as exc:
            raise ScrapeError(GARBAGE, f"bad gzip body ({exc})") from None
    charset = resp.headers.get_content_charset() or "utf-8"
    try:
        return data.decode(charset)
    except (LookupError, UnicodeDecodeError) as exc:
        raise ScrapeError(GARBAGE, f"the body is not {charset} text ({exc})") from None


def _exchange(url: str, timeout: float, headers: dict[str, str]) -> Page:
    conn, target = _connection(url, timeout)
    try:
        conn.request("GET", target, headers=headers)
        resp = conn.getresponse()
        if resp.status != 200:
            kind = HTTP_404 if resp.status == 404 else HTTP_ERROR
            raise ScrapeError(kind, f"HTTP {resp.status} {resp.reason}".strip())
        text = _body(resp)
        return Page(text, perf_counter(), time())
    finally:
        conn.close()


def _failure(exc: BaseException) -> ScrapeError:
    """The kind and words of an exception raised by the exchange."""
    if isinstance(exc, ScrapeError):
        return exc
    if isinstance(exc, _Deadline | TimeoutError):
        return ScrapeError(TIMEOUT, "timed out")
    if isinstance(exc, http.client.IncompleteRead):
        return ScrapeError(CONNECT, f"connection closed mid-body ({len(exc.partial)} bytes read)")
    if isinstance(exc, ConnectionRefusedError):
        return ScrapeError(CONNECT, "connection refused")
    if isinstance(exc, OSError):
        return ScrapeError(CONNECT, f"{type(exc).__name__}: {exc}")
    if isinstance(exc, http.client.HTTPException):
        return ScrapeError(HTTP_ERROR, f"not an HTTP answer ({type(exc).__name__}: {exc})")
    return ScrapeError(CONNECT, f"{type(exc).__name__}: {exc}")


def fetch(url: str, timeout_s: float, headers: dict[str, str] | None = None) -> Page:
    """GET ``url`` within ``timeout_s`` seconds (connect to last byte); raise :class:`ScrapeError` otherwise.

    Cooperative: only the calling greenlet waits."""
    masker = Masker(url, headers)
    sent = _request_headers(url, headers)
    try:
        with gevent.Timeout(timeout_s, _Deadline):
            return _exchange(url, timeout_s, sent)
    except Exception as exc:
        failure = _failure(exc)
        raise ScrapeError(failure.kind, f"{masker.shown}: {masker(str(failure))}") from None


def metrics_url(base_url: str) -> str:
    """``<scheme>://<host>/metrics`` for a server's base URL (its path dropped: vLLM, SGLang and TGI serve
    ``/metrics`` at the root, next to ``/v1``); credentials in the URL stay."""
    parts = urlsplit(base_url)
    return f"{parts.scheme}://{parts.netloc}/metrics"
