"""How llmload speaks on ``locust -f``'s stderr, next to Locust's own log."""

from __future__ import annotations

import sys


def tell(line: str) -> None:
    """One line from llmload on ``locust -f``'s stderr, next to Locust's own log: ``llmload: <line>``."""
    print(f"llmload: {line}", file=sys.stderr, flush=True)
