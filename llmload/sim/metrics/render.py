"""The Prometheus text exposition (format 0.0.4) of a :class:`~llmload.sim.metrics.shared.SharedStats`.

Label sets and ``# HELP``/``# TYPE`` lines are built once; a scrape only reads the shared block and formats
numbers, so it costs the event loop about 0.1 ms per worker reported.
"""

from __future__ import annotations

from prometheus_client.utils import floatToGoString

from llmload.sim.metrics.shared import SharedStats
from llmload.sim.metrics.spec import FINISH_REASONS, Family, engine_labels, frontend_labels

CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"


def _head(family: Family) -> str:
    return f"# HELP {family.name} {family.help}\n# TYPE {family.name} {family.kind}\n"


class Exposition:
    """Renders ``/metrics`` for one dialect and served model name."""

    def __init__(self, shared: SharedStats, dialect: str, model: str) -> None:
        """``dialect`` is the ``--dialect`` name (it picks the label sets); ``shared`` holds its metric set."""
        self.shared = shared
        self.dialect = shared.dialect
        self._engine_labels = [engine_labels(dialect, model, i, shared.workers) for i in range(shared.workers)]
        self._frontend_labels = frontend_labels(model)
        self._heads = [_head(f) for f in self.dialect.families]
        self._les = {name: [floatToGoString(b) for b in bounds] + ["+Inf"]
                     for name, bounds in self.dialect.buckets.items()}

    def render(self) -> bytes:
        out: list[str] = []
        for family, head in zip(self.dialect.families, self._heads, strict=True):
            out.append(head)
            if family.kind == "histogram":
                self._histogram(out, family)
            elif family.source == "success":
                self._by_reason(out, family)
            else:
                self._scalar(out, family)
        return "".join(out).encode()

    def _series(self, family: Family) -> list[tuple[str, list[int]]]:
        """(label set, the workers it sums) for each series of the family."""
        workers = list(range(self.shared.workers))
        if family.scope == "frontend":
            return [(self._frontend_labels, workers)]
        return [(self._engine_labels[i], [i]) for i in workers]

    def _scalar(self, out: list[str], family: Family) -> None:
        shared = self.shared
        for labels, workers in self._series(family):
            value = sum(shared.scalar(i, family.source) for i in workers)
            out.append(f"{family.name}{{{labels}}} {floatToGoString(value)}\n")

    def _by_reason(self, out: list[str], family: Family) -> None:
        shared = self.shared
        for labels, workers in self._series(family):
            for reason in FINISH_REASONS:
                value = sum(shared.scalar(i, f"success_{reason}") for i in workers)
                out.append(f'{family.name}{{{labels},finished_reason="{reason}"}} {floatToGoString(value)}\n')

    def _histogram(self, out: list[str], family: Family) -> None:
        shared = self.shared
        name = family.name
        les = self._les[family.source]
        for labels, workers in self._series(family):
            counts = [0.0] * len(les)
            total = 0.0
            for i in workers:
                buckets, s = shared.histogram(i, family.source)
                counts = [a + b for a, b in zip(counts, buckets, strict=True)]
                total += s
            cumulative = 0.0
            for le, count in zip(les, counts, strict=True):
                cumulative += count
                out.append(f'{name}_bucket{{{labels},le="{le}"}} {floatToGoString(cumulative)}\n')
            out.append(f"{name}_count{{{labels}}} {floatToGoString(cumulative)}\n")
            out.append(f"{name}_sum{{{labels}}} {floatToGoString(total)}\n")
