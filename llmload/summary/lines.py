"""The summary's line formats: vLLM's ``benchmark_serving.py`` layout, shared by every block."""

from __future__ import annotations

from typing import Any

#: the width of a heading rule
WIDTH = 50
#: a conversation's example text is cut to this many characters
EXAMPLE_CHARS = 100


def heading(title: str, fill: str = "=") -> str:
    """``title`` centred in a 50-character rule of ``fill``."""
    return "{s:{c}^{n}}".format(s=title, c=fill, n=WIDTH)


def int_line(label: str, value: Any) -> str:
    return f"{label:<40} {value!s:<10}"


def float_line(label: str, value: float) -> str:
    return f"{label:<40} {value:<10.2f}"
