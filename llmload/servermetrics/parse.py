"""Prometheus text exposition -> flat samples, through ``prometheus_client``'s own parser.

The format has corner cases (escaped label values, ``NaN``/``+Inf``, timestamps, exemplars, missing ``# HELP``
and ``# TYPE`` lines) that a hand-written parser gets wrong; ``prometheus_client`` is a project dependency.
One difference is undone here: its parser renames the samples of a ``# TYPE x counter`` family to ``x_total``
(the OpenMetrics convention); a sample keeps the name the server wrote (TGI's counters have no ``_total``).
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from llmload.common.errors import EndpointError

#: the longest excerpt of bad input quoted in an :class:`ExpositionError`
EXCERPT_CHARS = 80
#: lines parsed between two calls of ``iter_samples``'s ``pause``
PAUSE_LINES = 32

_COUNTER_TYPE = re.compile(r"^[ \t]*#[ \t]+TYPE[ \t]+(\S+)[ \t]+counter[ \t]*$", re.MULTILINE)


class ExpositionError(EndpointError):
    """The text is not Prometheus exposition text (an HTML page, JSON, a truncated line...); one line."""


@dataclass(slots=True)
class Sample:
    """One sample line: histogram and summary parts come as their own ``_bucket``/``_sum``/``_count``
    samples (buckets with an ``le`` label), as written in the text."""

    name: str
    labels: dict[str, str]
    value: float


def _one_line(text: str) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= EXCERPT_CHARS else flat[: EXCERPT_CHARS - 3] + "..."


def _bare_counters(text: str) -> set[str]:
    """Counter families declared without ``_total`` (whose samples the parser renames)."""
    if "counter" not in text:
        return set()
    return {name for name in _COUNTER_TYPE.findall(text) if not name.endswith("_total")}


def preload() -> None:
    """Import the parser now (about 50 ms), so that a run's first scrape does not pay for it mid-run."""
    import prometheus_client.parser  # noqa: F401


def _lines(text: str, pause: Callable[[], None]) -> Iterator[str]:
    """The lines of ``text``, calling ``pause`` every :data:`PAUSE_LINES` lines."""
    for n, line in enumerate(io.StringIO(text)):
        if n % PAUSE_LINES == PAUSE_LINES - 1:
            pause()
        yield line


def iter_samples(text: str, pause: Callable[[], None] | None = None) -> Iterator[Sample]:
    """Each sample of ``text`` in order, lazily. ``pause`` (if given) is called every :data:`PAUSE_LINES`
    lines of parsing, also inside one family: where a caller on an event loop lets the loop run.

    Raises :class:`ExpositionError` for text that is not exposition text; empty text has no samples."""
    from prometheus_client.parser import text_fd_to_metric_families

    if "\x00" in text:
        raise ExpositionError("not Prometheus text: a NUL byte")
    bare = _bare_counters(text)
    lines: Iterable[str] = io.StringIO(text) if pause is None else _lines(text, pause)
    try:
        for family in text_fd_to_metric_families(lines):  # type: ignore[arg-type]  # it only iterates lines
            renamed = bare and family.type == "counter" and family.name in bare
            for s in family.samples:
                name = s.name[:-6] if renamed and s.name == family.name + "_total" else s.name
                yield Sample(name, dict(s.labels), float(s.value))
    except ExpositionError:
        raise
    except Exception as exc:  # the parser raises ValueError, IndexError, KeyError... on bad input
        detail = _one_line(str(exc)) if str(exc) else type(exc).__name__
        raise ExpositionError(f"not Prometheus text: {detail}") from None


def parse_exposition(text: str) -> list[Sample]:
    """Every sample of ``text`` (see :func:`iter_samples`)."""
    return list(iter_samples(text))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def sample_key(name: str, labels: dict[str, str]) -> str:
    """``name{k="v",...}`` with labels sorted and values escaped as in the text format (``name`` alone when
    there are none): one stable key per series across scrapes."""
    if not labels:
        return name
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def split_key(key: str) -> str:
    """The metric name of a :func:`sample_key`."""
    return key.split("{", 1)[0]
