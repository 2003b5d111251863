"""Per-run state kept on the Locust environment (never in module globals), so two environments in one
process share nothing."""

from __future__ import annotations

import itertools
from typing import Any


class RunState:
    """What the users of one environment share: requests in flight (for live views) and one transport reactor
    (one epoll set and watchdog for every stream of the process, docs/design.md "Transport")."""

    def __init__(self) -> None:
        self.in_flight = 0
        self._reactor: Any = None
        self._ids = itertools.count(1)

    def next_id(self) -> int:
        """A number for a request sent outside the run's schedule (a locustfile's own ``send(sample)``)."""
        return next(self._ids)

    @property
    def reactor(self) -> Any:
        if self._reactor is None:
            from llmload.client.transport import Reactor

            self._reactor = Reactor()
        return self._reactor


def state_of(environment: Any) -> RunState:
    """The environment's run state (``environment.llmload``), created on first use."""
    state = getattr(environment, "llmload", None)
    if state is None:
        state = RunState()
        environment.llmload = state
    return state
