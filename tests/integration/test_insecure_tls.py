"""``--insecure`` (``vllm bench serve``'s): https to a server whose certificate nothing vouches for. A TLS proxy
on 127.0.0.1 with a self-signed certificate (made by ``openssl`` here) forwards to the simulator: without the
flag the run stops before its first request with one line naming the certificate (exit 1); with it every
request completes."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")]


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@pytest.fixture
def tls_proxy(start_sim, tmp_path: Path) -> Iterator[str]:
    sim = start_sim("--ttft-ms", "5", "--itl-ms", "1")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=llmload-test"], check=True, capture_output=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.5)
    stop = threading.Event()
    target = (sim.host, int(sim.url.rsplit(":", 1)[1]))

    def serve() -> None:
        while not stop.is_set():
            try:
                raw, _ = listener.accept()
            except OSError:
                continue
            try:
                conn = context.wrap_socket(raw, server_side=True)
            except (OSError, ssl.SSLError):
                raw.close()  # the client refused the certificate
                continue
            upstream = socket.create_connection(target)
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=_pipe, args=(a, b), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()


def test_insecure_reaches_a_self_signed_server(child_runner, tls_proxy: str) -> None:
    base = ("--base-url", tls_proxy, "--tokenizer", "builtin", "--num-prompts", "3", "--request-rate", "20",
            "--disable-tqdm", "--save-result")
    refused = child_runner.bench(*base, "--model", "llmload-sim", timeout=120)
    assert refused.returncode == 1, refused.describe()
    errors = [line for line in refused.stderr.splitlines() if ": error: " in line]
    assert len(errors) == 1 and "certificate" in errors[0].lower() and "Traceback" not in refused.stderr, \
        refused.stderr[-2000:]
    run = child_runner.bench(*base, "--insecure", timeout=120)
    assert run.returncode == 0, run.describe()
    assert run.result()["completed"] == 3
