"""LoRA adapters in the simulator: which are loaded, and what loading one costs.

``--lora-modules a,b,c`` serves each adapter as a model name of its own (``/v1/models`` lists them with the
base model as ``parent``). At most ``--max-loras`` adapters are loaded at a time, least recently used out first;
a request for an adapter that is not loaded waits ``--lora-load-ms`` before its prefill (the swap-in), so a
run that spreads its requests over more adapters than fit pays that on every swap: visibly and explainably
slower than the same run over one adapter. Requests for the base model never load anything.
docs/simulator.md, "LoRA adapters".
"""

from __future__ import annotations

from collections import OrderedDict


class AdapterSlots:
    """The loaded adapters (an LRU of ``max_loras``) and how many swaps happened."""

    def __init__(self, max_loras: int, load_ms: float) -> None:
        self.max_loras = max_loras
        self.load_s = load_ms / 1000.0
        self._loaded: OrderedDict[str, None] = OrderedDict()
        #: adapters loaded so far (each swap-in counts)
        self.loads = 0

    def admit(self, adapter: str) -> float:
        """Seconds ``adapter``'s request waits to have it loaded (0 when it already is, or for the base model)."""
        if not adapter:
            return 0.0
        if adapter in self._loaded:
            self._loaded.move_to_end(adapter)
            return 0.0
        self._loaded[adapter] = None
        while len(self._loaded) > self.max_loras:
            self._loaded.popitem(last=False)
        self.loads += 1
        return self.load_s

    @property
    def active(self) -> list[str]:
        return list(self._loaded)
