"""The one cluster protocol: every message a master and its workers exchange, for ``llmload bench`` and
``locust -f`` alike, with its payload as a typed value and each constant once. docs/design.md, "Distributed
protocol", has the table; the record batch (``llm_records``) and the job items are :mod:`llmload.core.messages`.

Each payload is a frozen dataclass: ``.data()`` is what goes on Locust's message channel, ``from_data`` reads
it back (a field the sender left out takes its default, so a newer worker still reads an older master).
The cluster token's challenge is here too: :class:`TokenGate` on the master, :func:`answer_challenge` on a
worker; the token itself never crosses the wire.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, fields
from time import perf_counter
from typing import Any, TypeVar

CHALLENGE = "llm_challenge"
AUTH = "llm_auth"
JOB = "llm_job"
STOP = "llm_stop"
REVOKE = "llm_revoke"
RESUMED = "llm_resumed"
RECORDS = "llm_records"
DONE = "llm_done"
FINISHED = "llm_finished"
SET_RATE = "llm_set"
LIVE = "llm_live"

#: the first send is this far in the future when a run's jobs go out, so every worker starts together
START_LEAD_S = 0.5
#: how often workers ship record batches
BATCH_INTERVAL_S = 0.25
#: a worker that has not answered the cluster-token challenge after this long is asked again (a worker's
#: handler exists only once Locust's worker runner has connected: a challenge that arrives before is dropped)
CHALLENGE_AGAIN_S = 1.0
#: a worker whose own loop did not run for this long was frozen, and checks with the master before it sends
FREEZE_S = 2.0
#: how often a ``locust -f`` worker reports its requests in flight, and when a report is too old to count
LIVE_INTERVAL_S = 1.0
LIVE_STALE_S = 5.0

_P = TypeVar("_P", bound="Payload")


class Payload:
    """A message's payload: ``data()`` for the wire, ``from_data`` back."""

    def data(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_data(cls: type[_P], data: dict[str, Any] | None) -> _P:
        known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in (data or {}).items() if k in known})


@dataclass(frozen=True)
class Job(Payload):
    """``llm_job``, master → worker: requests to send on the run's clock.

    ``first``: the worker's first job of a run (its share at the start, or a newcomer's), which resets what the
    last run left; later jobs add requests (a lost worker's unsent ones) to the same run. ``part`` is this
    worker's place ``[k, n]`` among the run's workers. ``run`` carries ``llmload bench``'s user settings (the
    worker builds its user from them; ``locust -f`` workers have their own options). ``closed`` is
    ``{users, think}`` for a closed loop with ``--think-time``; ``live`` the web UI's steerable schedule
    (``{rate, burstiness, seed, classes}``); ``open_loop``/``headless``/``model``: what the master's options
    decided at its start (``locust -f``). A long run's share comes in parts (:mod:`llmload.core.parts`):
    ``more`` says parts follow this one, and a part with ``follows`` joins the worker's running loop instead of
    starting a job of its own."""

    #: one item a request, or a compact job: a pool of samples and a row a request (core/messages.job_items)
    items: list[list[Any]] | dict[str, Any]
    start_wall: float
    first: bool = True
    part: tuple[int, int] | list[int] = (0, 1)
    max_concurrency: int | None = None
    stop_timeout: float = 0.0
    run: dict[str, Any] | None = None
    closed: dict[str, Any] | None = None
    live: dict[str, Any] | None = None
    open_loop: bool = True
    headless: bool = True
    model: str = ""
    more: bool = False
    follows: bool = False


@dataclass(frozen=True)
class Stop(Payload):
    """``llm_stop``, master → worker: stop sending and drain (``force``: cut off what is in flight now)."""

    force: bool = False


@dataclass(frozen=True)
class Revoke(Payload):
    """``llm_revoke``, master → worker: requests moved elsewhere before they were due; ``resume`` answers
    ``llm_resumed`` (the worker may go on with the rest)."""

    indices: list[int]
    resume: bool = False


@dataclass(frozen=True)
class Done(Payload):
    """``llm_done``, worker → master, after its last record batch: its accounting. ``planned``: requests its
    jobs held (every turn of a conversation is one); ``dispatched``: how many it released; ``records``: how many
    it shipped; ``leaving``: it was stopped by a signal to the worker (the master re-assigns its rest);
    ``health``: its client-health report (:class:`llmload.core.health.HealthMonitor`), or None."""

    records: int = 0
    planned: int = 0
    dispatched: int = 0
    leaving: bool = False
    health: dict[str, Any] | None = None
    #: jobs it had taken when it sent this: fewer than the master sent means a job is still on its way and this
    #: ``llm_done`` closes only the earlier ones (0: a worker that does not say)
    jobs: int = 0


@dataclass(frozen=True)
class Finished(Payload):
    """``llm_finished``, worker → master (``locust -f`` headless, where Locust's users keep running): every
    request of the ``jobs`` jobs it had was sent and answered."""

    jobs: int = 1


@dataclass(frozen=True)
class SetRate(Payload):
    """``llm_set``, master → worker: the web UI steered the open-loop rate, from schedule offset ``from_offset``."""

    request_rate: float
    from_offset: float = 0.0


@dataclass(frozen=True)
class Live(Payload):
    """``llm_live``, worker → master, every :data:`LIVE_INTERVAL_S`: its requests in flight now."""

    in_flight: int = 0


def auth_proof(token: str, nonce: str, worker_id: str) -> str:
    """What a worker answers to the master's challenge: HMAC-SHA256(token, ``nonce:worker_id``)."""
    return hmac.new(token.encode(), f"{nonce}:{worker_id}".encode(), hashlib.sha256).hexdigest()


class TokenGate:
    """The master's side of the cluster token: which connected workers proved they hold it.

    Without a token every worker is trusted. With one, :meth:`admit` challenges each worker not yet asked (and
    asks again one that did not answer within :data:`CHALLENGE_AGAIN_S`), a right proof admits it, a wrong one
    gets it Locust's ``quit``; it never gets a job, and its messages are ignored (:meth:`trusted`)."""

    def __init__(self, runner: Any, token: str | None, log: Callable[[str], None]) -> None:
        self.runner = runner
        self.token = token
        self.log = log
        #: worker id -> nonce of the challenge sent to it, and when it was last sent
        self._nonces: dict[str, str] = {}
        self._asked_at: dict[str, float] = {}
        self.authenticated: set[str] = set()
        #: workers whose proof was wrong (logged and told to quit once)
        self.refused: set[str] = set()
        runner.register_message(AUTH, self._on_auth)

    def trusted(self, client_id: str) -> bool:
        return not self.token or client_id in self.authenticated

    def admit(self, client_ids: Iterable[str]) -> list[str]:
        """Of ``client_ids`` (connected workers), the ones that may get jobs; challenges the others."""
        ids = list(client_ids)
        if not self.token:
            return ids
        now = perf_counter()
        for cid in ids:
            if cid in self.authenticated or cid in self.refused:  # a refused worker was told to quit
                continue
            if cid not in self._nonces:
                self._nonces[cid] = secrets.token_hex(16)
            elif now - self._asked_at.get(cid, now) < CHALLENGE_AGAIN_S:
                continue
            self._asked_at[cid] = now
            self.runner.send_message(CHALLENGE, {"nonce": self._nonces[cid]}, client_id=cid)
        return [cid for cid in ids if cid in self.authenticated]

    def _on_auth(self, msg: Any, **_: Any) -> None:
        cid = msg.node_id
        nonce = self._nonces.get(cid)
        proof = str((msg.data or {}).get("proof", ""))
        if nonce is not None and self.token and hmac.compare_digest(proof, auth_proof(self.token, nonce, cid)):
            self.authenticated.add(cid)
            return
        self.refused.add(cid)
        self.log(f"a worker ({cid}) failed to authenticate with the cluster token: it gets no job and is told "
                 "to quit")
        self.runner.send_message("quit", None, client_id=cid)


def answer_challenge(runner: Any, token: str | None, log: Callable[[str], None]) -> None:
    """Register a worker's answer to the master's challenge (with no token it answers nothing the master
    accepts, and says why)."""

    def on_challenge(msg: Any, **_: Any) -> None:
        if not token:
            log("the master asks for a cluster token and this worker has none "
                "(set LLMLOAD_CLUSTER_TOKEN or --cluster-token-file)")
        nonce = str((msg.data or {}).get("nonce", ""))
        runner.send_message(AUTH, {"proof": auth_proof(token, nonce, runner.client_id) if token else ""})

    runner.register_message(CHALLENGE, on_challenge)
