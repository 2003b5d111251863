"""Package names that load on first use (PEP 562), for packages whose modules bring heavy libraries.

``llmload.metrics`` and ``llmload.datasets`` export names from modules that import numpy; the simulator, the
option table and the records code import only light parts of them, so each name's module is imported when the
name is first read, and the value is kept in the package's namespace from then on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from importlib import import_module
from typing import Any


def lazy_names(package: str, exports: Mapping[str, Sequence[str]], namespace: dict[str, Any],
               listed: Sequence[str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of ``package``: ``exports`` maps each submodule to the
    names it gives, ``namespace`` is the package's ``globals()``, ``listed`` its ``__all__``."""
    where = {name: module for module, names in exports.items() for name in names}

    def attribute(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    def names() -> list[str]:
        return list(listed)

    return attribute, names
