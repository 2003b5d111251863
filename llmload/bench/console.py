"""Where ``llmload bench`` says what it is doing: one line at a time on stderr (stdout carries the summary)."""

from __future__ import annotations

import sys


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
