"""A ``locust -f`` worker's share beyond its first job: the later parts of a long run's share (as their time comes:
:mod:`llmload.core.parts`) and a lost worker's requests, on the run's clock. A mixin of
:class:`~llmload.plugin.run.LocustRun` (it shares its state)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gevent

from llmload.core.conversation import request_count
from llmload.core.dispatch import RequestFeed, run_open_loop
from llmload.core.messages import job_requests
from llmload.core.protocol import Job
from llmload.core.schedule import Scheduled


class ShareRole:
    """What a worker does with the requests that come after its first job."""

    #: worker: a lost worker's requests, each job's own dispatcher, and how many of them went out
    _more: list[gevent.Greenlet]
    _more_dispatched: int
    #: worker: the feed its open loop reads when its share comes in parts, parts that came before the test
    #: started, and the requests of the later parts and of lost workers (each turn counted)
    feed: RequestFeed | None
    early_parts: list[Job]
    parts_planned: int
    #: worker: a lost worker's requests that came before this worker's test started
    early_more: list[Sequence[Scheduled]]
    freeze: Any
    share: Any
    finished: bool
    start: float
    control: Any
    dispatcher: Any
    _share_sent: bool

    def __init__(self) -> None:
        super().__init__()
        self._more = []
        self._more_dispatched = 0
        self.feed = None
        self.early_parts = []
        self.parts_planned = 0
        self.early_more = []

    @property
    def sink(self) -> Any:
        raise NotImplementedError  # the run's (LocustRun)

    def sender_for(self, request: Scheduled) -> Any:
        raise NotImplementedError  # the run's (LocustRun)

    def _on_dispatch(self, request: Scheduled) -> None:
        raise NotImplementedError  # the run's (LocustRun)

    def _share_done(self) -> None:
        raise NotImplementedError  # the run's (LocustRun)

    def take_part(self, job: Job) -> None:
        """A later part of this worker's share (:mod:`llmload.core.parts`): into its open loop's feed, or kept
        until the test starts; none is open (the test stopped): not sent."""
        if self.feed is None:
            if self.dispatcher is None:
                self.early_parts.append(job)
            return
        part = job_requests(job.items)
        self.parts_planned += request_count(part)
        self.feed.add(part, job.more)

    def add_requests(self, requests: Sequence[Scheduled]) -> None:
        """Send ``requests`` too, on this run's clock, in a loop of their own (a lost worker's unsent requests:
        most are overdue, and go out at once); kept until the test starts. The share is finished again only
        when they are answered. They never join the share's list: its loop may still be reading it, and would
        send them a second time."""
        if self.dispatcher is None:
            self.early_more.append(requests)
            return
        self.parts_planned += request_count(requests)
        self.finished = False
        self._more.append(gevent.spawn(self._dispatch_more, requests))

    def start_early_requests(self) -> None:
        """The test started: send the lost workers' requests that came before it."""
        early, self.early_more = self.early_more, []
        for requests in early:
            self.add_requests(requests)

    def skip_given_away(self) -> Callable[[Scheduled], bool] | None:
        """A worker's open loop asks, as each request is due, whether it is still its own: after a freeze the
        master may have given it away (:mod:`llmload.distributed.freeze`). None elsewhere: nothing to ask."""
        freeze = self.freeze
        if freeze is None:
            return None
        return lambda request: not freeze.may_send(request)

    def _dispatch_more(self, requests: Sequence[Scheduled]) -> None:
        tally = run_open_loop(requests, self.sender_for, self.sink, control=self.control, start_at=self.start,
                              skip=self.skip_given_away(), on_dispatch=self._on_dispatch)
        self._more_dispatched += tally.dispatched
        self._more.remove(gevent.getcurrent())
        if self._share_sent and not self._more and not self.control.stop.is_set():
            self._share_done()
