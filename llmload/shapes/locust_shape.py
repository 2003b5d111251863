"""Closed loop: a Locust ``LoadTestShape`` whose user count follows a shape.

Locust is imported only inside :func:`user_shape_class`: importing it monkey-patches the interpreter
with gevent.
"""

from __future__ import annotations

import math

from llmload.common.errors import ConfigError
from llmload.shapes.kinds import Shape


def user_shape_class(shape: Shape, spawn_rate: float | None = None) -> type:
    """A Locust ``LoadTestShape`` subclass whose user count is ``round(shape.value(run_time))``.

    ``tick()`` returns ``(users, spawn_rate)`` until ``shape.duration``, then ``None`` (the test stops).
    ``spawn_rate`` (users/s) defaults to the shape's peak per second, so any level is reached in about
    a second. Locust is imported here, not at module import (it monkey-patches with gevent).
    """
    from locust import LoadTestShape

    if spawn_rate is None:
        spawn_rate = max(1.0, shape.peak())
    if not (spawn_rate > 0 and math.isfinite(spawn_rate)):
        raise ConfigError(f"--spawn-rate must be > 0, got {spawn_rate}")
    rate = float(spawn_rate)

    class ShapeFromSpec(LoadTestShape):
        llm_shape = shape
        """The shape this class follows."""
        llm_spawn_rate = rate

        def tick(self) -> tuple[int, float] | None:
            run_time = self.get_run_time()
            if run_time >= shape.duration:
                return None
            return round(shape.value(run_time)), rate

    ShapeFromSpec.__name__ = ShapeFromSpec.__qualname__ = f"{shape.kind.capitalize()}Shape"
    ShapeFromSpec.__doc__ = f"User count following {shape.spec()}."
    return ShapeFromSpec
