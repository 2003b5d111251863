"""The settings every LLM user of a run gets, decided once from the run's options for every way in
(docs/design.md, "Run set-up"): ``llmload bench`` builds its user class from them (on workers too, from the
copy in their job), ``locust -f`` sets them on the locustfile's user classes.

The options come from the one option table (:mod:`llmload.options.table`), whose defaults every parser
applies; nothing here repeats a default.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from llmload.core.cancel import CancelAfter, CancelPlan, cancel_plan_from
from llmload.core.conversation import ConversationPolicy
from llmload.core.models import ModelMix, model_mix_from
from llmload.core.session import SessionPolicy
from llmload.core.shaping import shaping_from
from llmload.core.workload import forces_output_len, session_policy


@dataclass(frozen=True, slots=True)
class UserSettings:
    """What an :class:`~llmload.client.users.LLMUser` needs to send a run's requests (its class attributes)."""

    backend: str
    endpoint: str | None
    model: str
    ignore_eos: bool
    ttft_rule: str
    #: ``Authorization: Bearer``; never printed, written or logged
    api_key: str | None
    connection_timeout: float
    network_timeout: float
    request_timeout: float | None
    session_header: str
    conversation: ConversationPolicy | None
    #: ``--cancel-rate``/``--cancel-after`` (None: nothing is cancelled)
    cancel: CancelPlan | None
    #: ``--model a,b,c`` or ``--lora-modules``: the model each request names (None: ``model`` for all)
    models: ModelMix | None
    #: merged into every request body, last (sampling flags, ``--extra-body``: :mod:`llmload.core.shaping`)
    extra_body: dict[str, Any] = field(default_factory=dict)
    #: ``--header KEY=VALUE``: sent with every request (the request id header wins over one of its name)
    extra_headers: dict[str, str] = field(default_factory=dict)
    #: ``--request-id-prefix``: put before every ``X-Request-Id``
    request_id_prefix: str = ""
    #: ``--insecure`` turns it off: no certificate or host-name check on https
    verify_tls: bool = True
    #: how agentic sessions replay (``--time-scale``, ``--max-idle``, ``--stream-all``; None: the defaults)
    sessions: SessionPolicy | None = None

    @classmethod
    def from_options(cls, opts: Any, *, model: str, api_key: str | None,
                     conversation: ConversationPolicy | None) -> UserSettings:
        """From parsed options (bench's or Locust's: the same table); ``model`` is the server's when
        ``--served-model-name`` is not given."""
        shaping = shaping_from(opts)
        return cls(
            backend=opts.backend,
            endpoint=opts.endpoint or None,
            model=opts.served_model_name or model,
            ignore_eos=forces_output_len(opts),
            ttft_rule=opts.ttft_rule,
            api_key=api_key,
            connection_timeout=float(opts.connect_timeout),
            network_timeout=float(opts.read_timeout),
            request_timeout=opts.request_timeout or None,
            session_header=opts.session_header,
            conversation=conversation,
            sessions=session_policy(opts),
            cancel=cancel_plan_from(opts),
            models=model_mix_from(opts),
            extra_body=shaping.body,
            extra_headers=shaping.headers,
            request_id_prefix=shaping.request_id_prefix,
            verify_tls=not getattr(opts, "insecure", False),
        )

    def attributes(self) -> dict[str, Any]:
        """The user-class attributes these settings set."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def to_message(self) -> dict[str, Any]:
        """As plain data, for a worker's job (the API key included: the worker sends with it)."""
        out = self.attributes()
        out["conversation"] = asdict(self.conversation) if self.conversation is not None else None
        out["sessions"] = asdict(self.sessions) if self.sessions is not None else None
        out["cancel"] = asdict(self.cancel) if self.cancel is not None else None
        out["models"] = asdict(self.models) if self.models is not None else None
        return out

    @classmethod
    def from_message(cls, data: dict[str, Any]) -> UserSettings:
        conversation, cancel = data.get("conversation"), data.get("cancel")
        plan = None
        if cancel:
            after = cancel["after"]
            plan = CancelPlan(cancel["rate"], CancelAfter(after["distribution"], tuple(after["args"]), after["tokens"]),
                              cancel["seed"])
        models = data.get("models")
        mix = ModelMix(tuple(models["names"]), models["selection"], tuple(models["weights"]), models["seed"]) \
            if models else None
        sessions = data.get("sessions")
        return cls(**{**data, "conversation": ConversationPolicy(**conversation) if conversation else None,
                      "sessions": SessionPolicy(**sessions) if sessions else None, "cancel": plan, "models": mix})
