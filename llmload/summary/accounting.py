"""The summary's accounting lines, the same for every way in: where each request of the schedule went (sent and
measured, never sent, lost with a dead worker), and each worker's part of a distributed run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llmload.summary.lines import int_line


def format_accounting(*, not_sent: int, planned: int | None = None, interrupted_by: str | None = None,
                      workers: Sequence[dict[str, Any]] | None = None, lost: int = 0) -> str:
    """``Interrupted by`` (a signal's name), ``Requests in the schedule``, ``Not sent (run stopped early)``, and
    for a distributed run ``Workers``, each worker's records (``ok`` or ``LOST``) and ``Lost with dead workers``.
    ``workers``: the result JSON's ``workers`` list (``worker``, ``records``, ``lost``)."""
    lines = []
    if interrupted_by is not None:
        lines.append(int_line("Interrupted by:", interrupted_by))
    if planned is not None:
        lines.append(int_line("Requests in the schedule:", planned))
    lines.append(int_line("Not sent (run stopped early):", not_sent))
    if workers is not None:
        lines.append(int_line("Workers:", len(workers)))
        for w in workers:
            status = "LOST" if w["lost"] else "ok"
            lines.append(int_line(f"  {w['worker']} records ({status}):", w["records"]))
        lines.append(int_line("Lost with dead workers:", lost))
    return "\n".join(lines)
