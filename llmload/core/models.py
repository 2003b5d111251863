"""Several models or LoRA adapters in one run: which one each request names as its ``model``.

Two spellings, one mechanism:

- vLLM's ``--lora-modules NAME [NAME ...]`` with ``--lora-assignment random|round-robin``: each request asks for
  one adapter by name (the adapter's name is the request's ``model``, as vLLM serves them);
- ``--model a,b,c`` with ``--model-selection round-robin|random|weighted`` and ``--model-weights 3,1,1``
  (AIPerf's idea): several models behind one endpoint (a router, or one server with several names).

The choice comes from ``--seed`` and the request alone (its index in the schedule for round-robin, its id for the
random draws), so every worker and every way in gives each request the same model; it is written on every
record (``model``) and the metrics break down by it (``by_model``). docs/arrivals.md, "Models and adapters".
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llmload.common.errors import ConfigError
from llmload.options import option_value

#: how a request's model is chosen
SELECTIONS = ("round-robin", "random", "weighted")


@dataclass(frozen=True)
class ModelMix:
    """The names requests choose from, how, and with what weights (``weighted`` only)."""

    names: tuple[str, ...]
    selection: str = "round-robin"
    weights: tuple[float, ...] = ()
    seed: int = 0

    def pick(self, index: int | None, request_id: str) -> str:
        """The model of the request at schedule ``index`` (None: not from a schedule) with ``request_id``."""
        if len(self.names) == 1:
            return self.names[0]
        if self.selection == "round-robin" and index is not None:
            return self.names[index % len(self.names)]
        rng = random.Random(f"llmload-model:{self.seed}:{request_id}")
        if self.selection == "weighted":
            return rng.choices(self.names, weights=self.weights)[0]
        return self.names[rng.randrange(len(self.names))]


def model_mix(models: str | None, selection: str | None, weights: str | None, lora_modules: Sequence[str] | None,
              lora_assignment: str | None, seed: int) -> ModelMix | None:
    """The run's mix from the options; None for one model (the usual run). One-line errors for bad input."""
    # the web UI's start form gives a list option as one string: names apart by commas or spaces
    adapters = tuple(name for item in (lora_modules or ()) for name in re.split(r"[,\s]+", str(item)) if name)
    names = tuple(n.strip() for n in (models or "").split(",") if n.strip())
    if adapters:
        if weights:
            raise ConfigError("--model-weights goes with --model a,b,c; --lora-modules takes --lora-assignment")
        assignment = lora_assignment or "random"
        if assignment not in ("random", "round-robin"):
            raise ConfigError(f"--lora-assignment must be random or round-robin, got {assignment!r}")
        return ModelMix(adapters, assignment, (), seed)
    if len(names) <= 1:
        if weights or (selection and selection != "round-robin"):
            raise ConfigError("--model-selection and --model-weights need several models: --model a,b,c")
        return None
    chosen = selection or ("weighted" if weights else "round-robin")
    if chosen not in SELECTIONS:
        raise ConfigError(f"--model-selection must be one of {', '.join(SELECTIONS)}, got {chosen!r}")
    parsed: tuple[float, ...] = ()
    if chosen == "weighted":
        try:
            parsed = tuple(float(w) for w in (weights or "").split(","))
        except ValueError:
            parsed = ()
        if len(parsed) != len(names) or any(w < 0 for w in parsed) or not sum(parsed) > 0:
            raise ConfigError(f"--model-weights needs {len(names)} non-negative numbers, one per model, "
                              f"not all 0 (got {weights!r})")
    elif weights:
        raise ConfigError("--model-weights applies to --model-selection weighted")
    return ModelMix(names, chosen, parsed, seed)


def model_mix_from(options: Any) -> ModelMix | None:
    """:func:`model_mix` of a run's parsed options (bench's or Locust's: the same table)."""
    def opt(name: str) -> Any:
        return option_value(options, name)

    return model_mix(opt("model"), opt("model_selection"), opt("model_weights"), opt("lora_modules"),
                     opt("lora_assignment"), int(opt("seed")))
