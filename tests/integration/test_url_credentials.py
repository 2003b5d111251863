"""``--base-url http://user:password@host`` works: every request carries HTTP Basic auth (the model list too), and
the password is never shown — not in the summary, the log lines, the result JSON or the records."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from support import offline_env

USER = "alice"
PASSWORD = "pw-8d1f0c2a9e"  # a string that appears nowhere else


class _AuthServer(BaseHTTPRequestHandler):
    """An OpenAI-style completions server that answers only requests with the right Basic credentials."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def _authorized(self) -> bool:
        self.server.seen.append(self.headers.get("Authorization", ""))
        expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        if self.headers.get("Authorization") == expected:
            return True
        body = b'{"error": "unauthorized"}'
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        return False

    def do_GET(self) -> None:
        if not self._authorized():
            return
        body = json.dumps({"object": "list", "data": [{"id": "auth-model", "object": "model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        self.rfile.read(length)
        if not self._authorized():
            return
        events = [{"id": "c", "object": "text_completion", "model": "auth-model",
                   "choices": [{"index": 0, "text": f" word{i}", "finish_reason": None}]} for i in range(4)]
        body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _serve() -> tuple[ThreadingHTTPServer, threading.Thread]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _AuthServer)
    server.seen = []  # the Authorization header of every request, in order
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread


@pytest.mark.slow
def test_basic_auth_from_the_url_is_sent_and_the_password_never_shown(tmp_path: Path) -> None:
    server, thread = _serve()
    try:
        port = server.server_address[1]
        result_dir = tmp_path / "results"
        run = subprocess.run(
            [sys.executable, "-m", "llmload.cli", "bench", "--base-url", f"http://{USER}:{PASSWORD}@127.0.0.1:{port}",
             "--tokenizer", "builtin", "--num-prompts", "4", "--disable-tqdm", "--save-result",
             "--result-dir", str(result_dir)],
            capture_output=True, text=True, env=offline_env(), timeout=180,
        )
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    assert "Successful requests:                     4" in run.stdout, output
    expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    # the model list, the initial test and the 4 requests: all with the credentials
    assert len(server.seen) >= 6 and set(server.seen) == {expected}, server.seen
    files = list(result_dir.iterdir())
    assert any(f.suffix == ".json" for f in files) and any(f.name.endswith(".records.jsonl") for f in files)
    written = "".join(f.read_text() for f in files)
    token = expected.split()[1]
    for text in (output, written):
        assert PASSWORD not in text and token not in text
    assert f"{USER}:***@127.0.0.1:{port}" in written  # the result names the server, masked


def test_wrong_credentials_fail_the_initial_test_without_echoing_them(tmp_path: Path) -> None:
    server, thread = _serve()
    try:
        port = server.server_address[1]
        wrong = "not-the-pw-77e1"
        run = subprocess.run(
            [sys.executable, "-m", "llmload.cli", "bench", "--base-url", f"http://{USER}:{wrong}@127.0.0.1:{port}",
             "--model", "auth-model", "--tokenizer", "builtin", "--num-prompts", "2", "--disable-tqdm"],
            capture_output=True, text=True, env=offline_env(), timeout=180,
        )
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "HTTP 401" in run.stderr and "Traceback" not in run.stderr
    assert wrong not in run.stdout + run.stderr
