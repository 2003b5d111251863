"""llmload's own events, declared the way Locust declares its own (``locust.event.Events``).

Add a listener in a locustfile to derive a custom metric::

    from llmload import llm_events

    @llm_events.first_token.add_listener
    def on_first_token(record, **kwargs):
        print("TTFT", record.ttft)

Listeners run inside the request greenlet, right after the event's timestamp was taken: keep them cheap
(append to a list, bump a counter) so they do not delay the next token's timestamp.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from locust.event import EventHook


class ListenedHook(EventHook):
    """Locust's ``EventHook`` that also says whether anything listens: the reader parses each chunk as it
    arrives only for listeners, and reads the whole stream at the end otherwise."""

    def __init__(self) -> None:
        super().__init__()
        self.listeners = 0

    def add_listener(self, handler: Callable[..., Any]) -> Callable[..., Any]:
        self.listeners += 1
        return super().add_listener(handler)

    def remove_listener(self, handler: Callable[..., Any]) -> None:
        super().remove_listener(handler)
        self.listeners -= 1

    @property
    def listened(self) -> bool:
        return self.listeners > 0


class LLMEvents:
    first_token: ListenedHook
    """
    Fired when the first token of a streaming response arrives (per the run's TTFT rule).

    :param record: the :class:`~llmload.client.records.RequestRecord` being filled in; ``record.first_token`` is set
    :param text: the text of the first event
    :param user: the Locust user that sent the request
    """

    token: ListenedHook
    """
    Fired for every later counted event (a chunk may hold several tokens).

    :param record: the request's :class:`~llmload.client.records.RequestRecord`
    :param itl: seconds since the previous counted event (the inter-token latency)
    :param tokens: tokens carried by the event (1 unless the wire says more)
    :param text: the event's text
    :param user: the Locust user
    """

    request_complete: ListenedHook
    """
    Fired once per request, when it finished, failed or was cut off by the end of the run.

    :param record: the finished :class:`~llmload.client.records.RequestRecord`
    :param user: the Locust user (None when the request was sent outside a user)
    """

    def __init__(self) -> None:
        for name, annotation in type(self).__annotations__.items():
            if annotation in (ListenedHook, "ListenedHook"):
                setattr(self, name, ListenedHook())


#: the process-wide llmload events
llm_events = LLMEvents()
