"""The documented import path of the arrival maths (docs/arrivals.md); they live with the schedule, in
:mod:`llmload.core.arrivals`."""

from llmload.core.arrivals import (
    constant_offsets,
    parse_think_time,
    request_rates,
    share_for_worker,
    think_time,
    validate_arrivals,
    vllm_send_offsets,
)

__all__ = ["constant_offsets", "parse_think_time", "request_rates", "share_for_worker", "think_time",
           "validate_arrivals", "vllm_send_offsets"]
