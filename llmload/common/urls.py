"""Server URLs that may carry credentials (``http://user:password@host:8000``).

The credentials are sent as HTTP Basic authentication and never shown: every message, log line and result
file names the URL through :func:`redact_url`, which keeps the user name and replaces the password.
"""

from __future__ import annotations

import base64
from urllib.parse import unquote, urlsplit, urlunsplit

MASK = "***"


def _userinfo(url: str) -> tuple[str, str | None] | None:
    netloc = urlsplit(url).netloc
    if "@" not in netloc:
        return None
    userinfo = netloc.rsplit("@", 1)[0]
    user, sep, password = userinfo.partition(":")
    return unquote(user), (unquote(password) if sep else None)


def redact_url(url: str) -> str:
    """``url`` with its password (if any) replaced by ``***``; the user name stays, to say whose it is."""
    creds = _userinfo(url)
    if creds is None:
        return url
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[1]
    user = parts.netloc.rsplit("@", 1)[0].partition(":")[0]
    masked = f"{user}:{MASK}@{host}" if creds[1] is not None else f"{user}@{host}"
    return urlunsplit((parts.scheme, masked, parts.path, parts.query, parts.fragment))


def strip_credentials(url: str) -> str:
    """``url`` without ``user:password@``."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def basic_auth(url: str) -> str | None:
    """The ``Authorization`` header value for credentials in ``url`` (None without any)."""
    creds = _userinfo(url)
    if creds is None:
        return None
    user, password = creds
    token = base64.b64encode(f"{user}:{password or ''}".encode()).decode("ascii")
    return f"Basic {token}"


def secrets_in(url: str) -> list[str]:
    """The secret parts of ``url`` (its password, raw and percent-decoded), for scrubbing text."""
    creds = _userinfo(url)
    if creds is None or not creds[1]:
        return []
    raw = urlsplit(url).netloc.rsplit("@", 1)[0].partition(":")[2]
    return sorted({raw, creds[1]})


def mask_process_title(argv: list[str]) -> None:
    """Replace this process's command line (what ``ps`` and ``/proc/PID/cmdline`` show every user) with one in
    which every URL password is masked. Only when there is one: it costs an import of ``setproctitle``.

    The password is visible there from the moment the process starts until this runs (the CLI calls it
    first thing, within the interpreter's start-up)."""
    masked = [redact_url(a) if "://" in a and "@" in a else a for a in argv]
    if masked == argv:
        return
    try:
        import setproctitle
    except ImportError:
        return
    import os
    import sys

    setproctitle.setproctitle(" ".join([os.path.basename(sys.executable), *masked]))
