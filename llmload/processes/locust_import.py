"""Import Locust at a process's start, without paying for gevent's plugin lookups.

Importing Locust monkey-patches the standard library with gevent. gevent announces each module it patches to
plugins it looks up with ``importlib.metadata.entry_points(group=...)``, and each lookup reads the entry points
of every installed distribution again: some 25 lookups, ~0.2 s of CPU on every start of ``llmload bench``,
its workers and ``llmload sweep`` (a quarter of importing Locust). No distribution is installed or removed while
Locust imports, so the lookups are answered from one read of them; the function is put back afterwards.
"""

from __future__ import annotations

import sys
from importlib import metadata
from typing import Any


def import_locust() -> None:
    """Import Locust (once per process; gevent's monkey-patching comes with it) with its plugin lookups read
    from one scan of the installed distributions."""
    if "locust" in sys.modules:
        return
    original = metadata.entry_points
    scanned: list[Any] = []  # EntryPoints (SelectableGroups before Python 3.12): both have select()

    def entry_points(**params: Any) -> Any:
        if not scanned:
            scanned.append(original())
        return scanned[0].select(**params) if params else scanned[0]

    metadata.entry_points = entry_points
    try:
        import locust  # noqa: F401
    finally:
        metadata.entry_points = original
