"""What the server under test says about itself at ``/v1/models``: the models it serves and, for llmload's own
simulator (``llmload sim``), the tokenizer to count its tokens with.

Both ways in ask it: ``llmload bench`` when ``--model`` is not given, the Locust plugin at test start. The
simulator adds ``"llmload_tokenizer"`` to each model entry; any other server leaves it out, and the tokenizer
stays the caller's choice (``--tokenizer``, else the model's own).
"""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from llmload.common.errors import EndpointError
from llmload.common.urls import basic_auth, redact_url, strip_credentials

#: the key of a ``/v1/models`` entry through which ``llmload sim`` names its tokenizer
TOKENIZER_KEY = "llmload_tokenizer"
#: ... and its timing profile (``--profile``), which a sweep names its results by
PROFILE_KEY = "llmload_profile"


@dataclass(frozen=True)
class ServerInfo:
    """``models``: the ids listed, in the server's order (the first is the default model). ``tokenizer``: the
    tokenizer the server names (``llmload sim`` only), else None."""

    models: list[str] = field(default_factory=list)
    tokenizer: str | None = None
    #: ``llmload sim``'s timing profile, else None
    profile: str | None = None

    @property
    def is_simulator(self) -> bool:
        """True for ``llmload sim``: the only server that names a tokenizer."""
        return self.tokenizer is not None


def describe_server(base_url: str, api_key: str | None, timeout: float = 10.0, verify_tls: bool = True
                    ) -> ServerInfo:
    """Ask ``base_url``'s ``/v1/models``. Sends the Bearer key, else the Basic credentials in ``base_url``
    (never shown: every message names the URL redacted). Raises :class:`~llmload.common.errors.EndpointError` with one
    line when the server cannot be reached, answers an HTTP error, is silent for ``timeout`` seconds, or does not
    answer a model list."""
    data = _get_models(base_url, api_key, timeout, verify_tls)
    listed = data.get("data")
    entries = [m for m in listed if isinstance(m, dict)] if isinstance(listed, list) else []
    tokenizer = next((m[TOKENIZER_KEY] for m in entries if isinstance(m.get(TOKENIZER_KEY), str)
                      and m[TOKENIZER_KEY]), None)
    profile = next((m[PROFILE_KEY] for m in entries if isinstance(m.get(PROFILE_KEY), str) and m[PROFILE_KEY]), None)
    return ServerInfo(models=[m.get("id", "") for m in entries], tokenizer=tokenizer, profile=profile)


def _get_models(base_url: str, api_key: str | None, timeout: float, verify_tls: bool = True) -> dict[str, Any]:
    import ssl

    import orjson

    shown = redact_url(base_url)
    request = urllib.request.Request(f"{strip_credentials(base_url)}/v1/models")
    auth = f"Bearer {api_key}" if api_key else basic_auth(base_url)
    if auth:
        request.add_header("Authorization", auth)
    try:
        context = None
        if not verify_tls:  # --insecure: no certificate or host-name check
            context = ssl.create_default_context()
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        with urllib.request.urlopen(request, timeout=timeout, context=context) as resp:
            data = orjson.loads(resp.read())
    except urllib.error.HTTPError as exc:
        raise EndpointError(f"{shown}/v1/models answered HTTP {exc.code}; pass --model") from None
    except OSError as exc:  # URLError is an OSError; a timeout arrives bare or as a URLError's reason
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, TimeoutError):
            raise EndpointError(f"{shown}/v1/models sent no answer within {timeout:g} s (--read-timeout); "
                                "pass --model to skip asking") from None
        raise EndpointError(f"cannot reach the server at {shown}: {reason}") from None
    except ValueError:
        raise EndpointError(f"{shown}/v1/models did not return JSON; pass --model") from None
    if not isinstance(data, dict):
        raise EndpointError(f"{shown}/v1/models did not return a model list; pass --model")
    return data


@dataclass(frozen=True)
class Resolved:
    """What a run needs to know of its server: the model to name, the tokenizer the server names (``llmload
    sim`` only), whether it is the simulator, and the simulator's profile."""

    model: str
    tokenizer: str | None = None
    simulator: bool = False
    profile: str | None = None


def resolve_target(options: Any, base_url: str, api_key: str | None, *, ask: bool = False) -> Resolved:
    """The model (``--model``, else the server's first) and what the server says of itself, for either way in
    (the same option names). Asks ``/v1/models`` only when the model or the tokenizer is not given (or ``ask``:
    the simulator started for this run, whose profile a sweep names); :class:`EndpointError` when no model can
    be found."""
    model = (getattr(options, "model", "") or "").split(",")[0].strip()  # --model a,b,c: the first names the run
    if model and getattr(options, "tokenizer", "") and not ask:
        return Resolved(model)
    timeout = min(float(getattr(options, "read_timeout", 0) or 30.0), 30.0)
    try:
        info = describe_server(base_url, api_key, timeout=timeout,
                               verify_tls=not getattr(options, "insecure", False))
    except EndpointError:
        if not model:
            raise
        return Resolved(model)  # a server without /v1/models: the model's own tokenizer
    if not model and not info.models:
        raise EndpointError(f"{redact_url(base_url)}/v1/models lists no model; pass --model")
    return Resolved(model or info.models[0], info.tokenizer, info.is_simulator, info.profile)
