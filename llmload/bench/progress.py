"""A progress line on stderr: done/total, req/s, output tok/s, errors."""

from __future__ import annotations

import sys
from time import perf_counter
from typing import Any, TextIO

import gevent

from llmload.client.records import RequestRecord


class Progress:
    def __init__(self, total: int, stream: TextIO = sys.stderr, every_s: float | None = None) -> None:
        self.total = total
        self.stream = stream
        self.tty = stream.isatty()
        self.every_s = every_s if every_s is not None else (0.5 if self.tty else 5.0)
        self.done = self.errors = self.tokens = 0
        self._start = perf_counter()
        self._greenlet: gevent.Greenlet | None = None

    def on_record(self, record: RequestRecord, **_: Any) -> None:
        self.done += 1
        if record.success:
            self.tokens += record.output_tokens
        else:
            self.errors += 1

    def line(self) -> str:
        elapsed = max(1e-9, perf_counter() - self._start)
        width = len(str(self.total))
        return (
            f"[{self.done:>{width}}/{self.total}] {self.done / elapsed:7.2f} req/s {self.tokens / elapsed:9.1f} tok/s "
            f"{self.errors} errors {elapsed:6.1f} s"
        )

    def _loop(self) -> None:
        while True:
            gevent.sleep(self.every_s)
            self._print()

    def _print(self, final: bool = False) -> None:
        if self.tty:
            self.stream.write("\r" + self.line() + ("\n" if final else ""))
        else:
            self.stream.write(self.line() + "\n")
        self.stream.flush()

    def start(self) -> None:
        self._start = perf_counter()
        self._greenlet = gevent.spawn(self._loop)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill()
            self._print(final=True)
