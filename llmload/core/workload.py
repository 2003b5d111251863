"""What a run sends, from its options: the samples (dataset + tokenizer) and the schedule spec. The same
function serves ``llmload bench``'s argparse namespace and Locust's parsed options (one set of dest names,
declared once in :mod:`llmload.options`)."""

from __future__ import annotations

from typing import Any

from llmload.core.schedule import ScheduleSpec


def _opt(options: Any, name: str, default: Any = None) -> Any:
    value = getattr(options, name, default)
    return default if value is None or value == "" else value


def schedule_spec(options: Any) -> ScheduleSpec:
    """The arrival options (``--request-rate``, ``--burstiness``, ramps, ``--constant-rate``, ``--rate-shape``)."""
    return ScheduleSpec(request_rate=float(_opt(options, "request_rate", float("inf"))),
                        burstiness=float(_opt(options, "burstiness", 1.0)), seed=int(_opt(options, "seed", 0)),
                        ramp_up_strategy=_opt(options, "ramp_up_strategy"),
                        ramp_up_start_rps=_opt(options, "ramp_up_start_rps"),
                        ramp_up_end_rps=_opt(options, "ramp_up_end_rps"),
                        constant_rate=bool(_opt(options, "constant_rate", False)),
                        rate_shape=_opt(options, "rate_shape"), trace=_opt(options, "dataset_name") == "trace")


def dataset_options(options: Any) -> dict[str, Any]:
    """The keyword arguments :func:`llmload.datasets.load_samples` takes for ``--dataset-name``.

    ``--max-tokens`` (the Locust plugin's older spelling) fixes every output length whatever the dataset."""
    name = _opt(options, "dataset_name", "sharegpt")
    fixed = _opt(options, "max_tokens", 0) or None
    if name == "sharegpt":
        return {"fixed_output_len": fixed or _opt(options, "sharegpt_output_len")}
    if name == "random":
        return {"input_len": _opt(options, "random_input_len", 1024),
                "output_len": fixed or _opt(options, "random_output_len", 128),
                "range_ratio": _opt(options, "random_range_ratio", 0.0),
                "prefix_len": _opt(options, "random_prefix_len", 0)}
    if name == "trace":
        return {"trace_format": _opt(options, "trace_format"), "time_scale": _opt(options, "time_scale", 1.0),
                "trace_start": _opt(options, "trace_start", 0.0), "trace_duration": _opt(options, "trace_duration"),
                "prompt_path": _opt(options, "trace_prompts")}
    return {"default_output_len": fixed or _opt(options, "custom_output_len", 256)}


def forces_output_len(options: Any) -> bool:
    """A trace fixes every output length: force it with ``max_tokens`` + ``ignore_eos``."""
    return bool(_opt(options, "ignore_eos", False)) or _opt(options, "dataset_name") == "trace"
