"""The samples a process sends, handed out in order and reused when exhausted."""

from __future__ import annotations

from collections.abc import Sequence

from llmload.datasets.base import SampleRequest


class Workload:
    """Hands out samples round-robin. Worker ``k`` of ``n`` starts at its own offset so workers interleave."""

    def __init__(self, samples: Sequence[SampleRequest], worker_index: int = 0, worker_count: int = 1) -> None:
        if not samples:
            raise ValueError("a workload needs at least one sample")
        self.samples = list(samples)
        self.worker_index = worker_index
        self.worker_count = max(1, worker_count)
        self._i = worker_index

    def __len__(self) -> int:
        return len(self.samples)

    def next(self) -> SampleRequest:
        sample = self.samples[self._i % len(self.samples)]
        self._i += self.worker_count
        return sample
