"""The error answers the simulator gives a request it rejects, shaped as the real servers shape them.

They live apart from :mod:`llmload.sim.requests` so that every module that checks part of a body (the chat
renderer, the image reader, the pooling routes) can refuse it the same way without importing the parser.
"""

from __future__ import annotations

import orjson


class RequestError(Exception):
    """A request the server rejects; carries the status and JSON body to send."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(status)
        self.status = status
        self.body = body


def openai_error(status: int, message: str, err_type: str, param: str | None = None) -> RequestError:
    """vLLM's (and OpenAI's) error body: ``{"error": {"message", "type", "param", "code"}}``."""
    body = {"error": {"message": message, "type": err_type, "param": param, "code": status}}
    return RequestError(status, orjson.dumps(body))


def extra_forbidden(field: str, value: object = None) -> RequestError:
    """FastAPI/pydantic's 422 for a request field the server does not know (transformers serve sends it)."""
    detail = [{"type": "extra_forbidden", "loc": ["body", field], "msg": "Extra inputs are not permitted",
               "input": value}]
    return RequestError(422, orjson.dumps({"detail": detail}))


def bad_request(message: str, param: str | None = None) -> RequestError:
    """vLLM's answer to a ``ValueError`` while it reads a request: a 400 ``BadRequestError``."""
    return openai_error(400, message, "BadRequestError", param)


def not_implemented(message: str) -> RequestError:
    """vLLM's answer to a ``NotImplementedError`` while it reads a request: a 501."""
    return openai_error(501, message, "NotImplementedError")
