"""Load shapes over time: the open-loop request rate or the closed-loop user count as a function of time.

A shape is a small frozen value object with ``value(t)`` (requests/s or users at ``t`` seconds),
``cumulative(t)`` (the integral of ``value`` from 0 to ``t``), ``duration`` and ``spec()`` (the compact
string that parses back to an equal shape). Four kinds:

    steps   value jumps to each level at its time and holds it
    ramp    linear from one value to another, then holds the end value
    spike   a base value with one rectangular spike
    sine    a diurnal cycle: mean - amplitude * cos(2π (t + phase) / period), starting at the trough

Spec grammar (``--rate-shape`` / ``--user-shape``; spaces are ignored; TIME is seconds, or a number
with an ``s``, ``m`` or ``h`` suffix)::

    SPEC   := KIND ":" BODY ";" "duration=" TIME
    steps  :  VALUE "@" TIME ("," VALUE "@" TIME)*          the first TIME is 0, times increase
    ramp   :  FROM "->" TO ["@" TIME]                       reach TO at TIME (default: at the end)
    spike  :  "base=" B "," "peak=" P "," "at=" TIME "," "width=" TIME
    sine   :  "mean=" M "," "amplitude=" A "," "period=" TIME ["," "phase=" TIME]

    steps:10@0,20@30,40@60;duration=90
    ramp:1->50;duration=120            ramp:1->50@60;duration=5m
    spike:base=5,peak=50,at=30,width=10;duration=90
    sine:mean=10,amplitude=5,period=60;duration=300

A JSON file holds the same fields: ``{"shape": "steps", "steps": [[10, 0], [20, 30]], "duration": 90}``
(``[value, at]`` pairs or ``{"value", "at"}`` objects), ``{"shape": "ramp", "from": 1, "to": 50,
"over": 60, "duration": 120}``, ``{"shape": "spike", "base": 5, "peak": 50, "at": 30, "width": 10,
"duration": 90}``, ``{"shape": "sine", "mean": 10, "amplitude": 5, "period": 60, "phase": 0,
"duration": 300}``. :func:`parse_shape` takes either (a path to an existing file, or text starting
with ``{``). Every mistake is a :class:`~llmload.common.errors.ConfigError` naming the bad part.

Open loop: :func:`rate_offsets` draws send offsets whose instantaneous rate follows the shape — a
non-homogeneous Poisson process by time rescaling: unit-mean gaps ``e_i`` are summed into
``u_k = e_1 + ... + e_k`` and sent at ``t_k = Λ⁻¹(u_k)``, where ``Λ = cumulative``, for every
``u_k < Λ(duration)``. The gaps are Exp(1) for burstiness 1 and Gamma(b, 1/b) otherwise (a gamma renewal
process in rescaled time; b < 1 is burstier), like vLLM's ``--burstiness``.

Closed loop: :func:`user_shape_class` makes a Locust ``LoadTestShape`` whose user count follows the shape.

    kinds.py         Shape and the four kinds (value objects, validated on construction)
    parsing.py       spec strings, JSON objects and files -> a Shape
    offsets.py       open-loop send offsets (rate_offsets)
    locust_shape.py  the closed-loop Locust LoadTestShape (user_shape_class)
"""

from __future__ import annotations

from llmload.shapes.kinds import SHAPE_KINDS, Ramp, Shape, Sine, Spike, Steps
from llmload.shapes.locust_shape import user_shape_class
from llmload.shapes.offsets import invert_cumulative, rate_offsets
from llmload.shapes.parsing import parse_shape, parse_spec, parse_time, shape_from_dict

__all__ = [
    "SHAPE_KINDS",
    "Ramp",
    "Shape",
    "Sine",
    "Spike",
    "Steps",
    "invert_cumulative",
    "parse_shape",
    "parse_spec",
    "parse_time",
    "rate_offsets",
    "shape_from_dict",
    "user_shape_class",
]
