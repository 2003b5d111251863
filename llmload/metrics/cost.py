"""What a run's throughput means per GPU and in money: the deployment behind the server (``--gpus``,
``--gpu-type``, ``--gpu-hour-cost``) and the numbers derived from it (docs/metrics.md, "Per GPU and cost").

    per GPU                    = throughput / gpus
    cost per 1M output tokens  = gpus x gpu_hour_cost / (output_throughput x 3600) x 1e6     (USD)
    cost per 1M total tokens   = the same with total_token_throughput (prompt + output tokens)

The cost is what the GPUs cost for the time it took to make the tokens at the measured rate: a server kept as
busy as in the run. Without a positive throughput there is no cost (None).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmload.common.errors import ConfigError

SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class Deployment:
    """The GPUs the server ran on, as the user describes them; ``gpu_hour_cost`` in USD per GPU-hour."""

    gpus: int = 1
    gpu_type: str | None = None
    gpu_hour_cost: float | None = None

    def __post_init__(self) -> None:
        if self.gpus < 1:
            raise ConfigError(f"--gpus must be a whole number >= 1, got {self.gpus}")
        if self.gpu_hour_cost is not None and not self.gpu_hour_cost >= 0:
            raise ConfigError(f"--gpu-hour-cost must be a price >= 0 (USD per GPU-hour), got {self.gpu_hour_cost}")

    def per_gpu(self, throughput: float | None) -> float | None:
        return None if throughput is None else throughput / self.gpus

    def cost_per_million(self, tokens_per_s: float | None) -> float | None:
        """USD per million tokens made at ``tokens_per_s``; None without a price or a positive rate."""
        if self.gpu_hour_cost is None or not tokens_per_s or tokens_per_s <= 0:
            return None
        return self.gpus * self.gpu_hour_cost / (tokens_per_s * SECONDS_PER_HOUR) * 1e6

    def result_keys(self, output_throughput: float | None, total_token_throughput: float | None) -> dict[str, Any]:
        """The result JSON's deployment keys (the cost ones only with a price)."""
        out: dict[str, Any] = {
            "gpus": self.gpus,
            "gpu_type": self.gpu_type,
            "output_throughput_per_gpu": self.per_gpu(output_throughput),
            "total_token_throughput_per_gpu": self.per_gpu(total_token_throughput),
        }
        if self.gpu_hour_cost is not None:
            out["gpu_hour_cost"] = self.gpu_hour_cost
            out["cost_per_million_output_tokens"] = self.cost_per_million(output_throughput)
            out["cost_per_million_total_tokens"] = self.cost_per_million(total_token_throughput)
        return out

    @property
    def described(self) -> bool:
        """Whether the user said anything about the GPUs (else the summary says nothing of them)."""
        return self.gpus != 1 or self.gpu_type is not None or self.gpu_hour_cost is not None


def deployment_from(options: Any) -> Deployment:
    """The run's :class:`Deployment` from its parsed options (bench's, a sweep's or Locust's)."""
    gpus = getattr(options, "gpus", None)
    cost = getattr(options, "gpu_hour_cost", None)
    return Deployment(int(gpus) if gpus not in (None, "") else 1, getattr(options, "gpu_type", None) or None,
                      float(cost) if cost not in (None, "") else None)
