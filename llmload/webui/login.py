"""``--web-login --llm-web-credentials USER:PASS``: Locust's login page checks them, and scripts may send them as
HTTP basic auth (Flask-Login's user and request loaders, Locust's ``auth_args``)."""

from __future__ import annotations

import hmac
import logging
import os
from typing import Any

logger = logging.getLogger(__name__)


class _WebUser:
    """The one user ``--llm-web-credentials`` defines (Flask-Login's user protocol)."""

    is_authenticated = True
    is_active = True
    is_anonymous = False

    def __init__(self, name: str) -> None:
        self.name = name

    def get_id(self) -> str:
        return self.name


def setup_login(web_ui: Any, prefix: str, credentials: str) -> None:
    """With ``--web-login --llm-web-credentials USER:PASS``: Locust's login page checks them, and scripts may
    send them as HTTP basic auth; an unauthenticated ``/llm/*`` request gets 401, a page a redirect to login."""
    if not web_ui.web_login or not credentials:
        if credentials:
            logger.warning("llmload: --llm-web-credentials has no effect without --web-login")
        return
    import base64

    from flask import jsonify, redirect, request, session, url_for
    from flask_login import login_user

    user, sep, password = credentials.partition(":")
    if not sep or not user:
        raise SystemExit("llmload: error: --llm-web-credentials: expected USER:PASSWORD")
    app = web_ui.app
    if not app.secret_key:
        app.secret_key = os.urandom(32)
    manager = web_ui.login_manager

    def valid(name: str, secret: str) -> bool:
        return hmac.compare_digest(name.encode(), user.encode()) and hmac.compare_digest(
            secret.encode(), password.encode())

    @manager.user_loader
    def load_user(user_id: str) -> _WebUser | None:
        return _WebUser(user_id) if user_id == user else None

    @manager.request_loader
    def basic_auth(req: Any) -> _WebUser | None:
        header = req.headers.get("Authorization", "")
        if not header.lower().startswith("basic "):
            return None
        try:
            name, _, secret = base64.b64decode(header[6:]).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return None
        return _WebUser(name) if valid(name, secret) else None

    @manager.unauthorized_handler
    def unauthorized() -> Any:
        if request.path.startswith(f"{prefix}/llm/") and request.path != f"{prefix}/llm/":
            resp = jsonify({"error": "authentication required: log in, or send HTTP basic auth"})
            resp.status_code = 401
            resp.headers["WWW-Authenticate"] = 'Basic realm="llmload"'
            return resp
        return redirect(url_for("locust.login"))

    def login() -> Any:
        if valid(request.form.get("username", ""), request.form.get("password", "")):
            login_user(_WebUser(user))
            return redirect(url_for("locust.index"))
        session["auth_error"] = "Invalid username or password"
        return redirect(url_for("locust.login"))

    app.add_url_rule(f"{prefix}/llm/login", "llm_login", login, methods=["POST"])
    web_ui.auth_args = {**web_ui.auth_args, "username_password_callback": f"{prefix}/llm/login"}
