"""LoRA adapters in the simulator: which are loaded, and what loading one costs.

``--lora-modules a,b,c`` serves each adapter as a model name of its own (``/v1/models`` lists them with the
base model as ``parent``). At most ``--max-loras`` adapters are loaded at a time; loading one that is not costs
``--lora-load-ms`` before its request's prefill (the swap-in), so a run that spreads its requests over more
adapters than fit pays that on every swap: visibly and explainably slower than the same run over one adapter.
Requests for the base model never load anything.

With the batching engine this follows vLLM's scheduler (:mod:`llmload.sim.engine`): the running batch holds
requests of at most ``--max-loras`` distinct adapters, a waiting request whose adapter would be one too many is
skipped until a running adapter's requests finish, and the adapter loaded out is the least recently used one
that no running request uses. In fixed-timing mode (no batch) an adapter is loaded when its request arrives.
docs/simulator.md, "LoRA adapters".
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection


class AdapterSlots:
    """The loaded adapters (an LRU of ``max_loras``) and how many swaps happened."""

    def __init__(self, max_loras: int, load_ms: float) -> None:
        self.max_loras = max_loras
        self.load_s = load_ms / 1000.0
        self._loaded: OrderedDict[str, None] = OrderedDict()
        #: adapters loaded so far (each swap-in counts)
        self.loads = 0

    def admit(self, adapter: str, in_use: Collection[str] = ()) -> float:
        """Seconds ``adapter``'s request waits to have it loaded (0 when it already is, or for the base model).
        The adapter loaded out to make room is the least recently used one not ``in_use`` by running requests
        (the caller never asks for more than ``max_loras`` in use at once)."""
        if not adapter:
            return 0.0
        if adapter in self._loaded:
            self._loaded.move_to_end(adapter)
            return 0.0
        while len(self._loaded) >= self.max_loras:
            idle = next((name for name in self._loaded if name not in in_use), None)
            if idle is None:
                break
            del self._loaded[idle]
        self._loaded[adapter] = None
        self.loads += 1
        return self.load_s

    @property
    def active(self) -> list[str]:
        return list(self._loaded)
