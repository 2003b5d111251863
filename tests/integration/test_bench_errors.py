"""Bad input to llmload bench gives a one-line error and exit code 2 (usage) or 1 (runtime), never a traceback;
the API key is never printed or saved."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from support import http_server

UNREACHABLE = "http://127.0.0.1:1"
SECRET = "sk-secret-123"


def one_line_error(run, *codes: int) -> str:
    """The run failed with one of ``codes`` and said why in exactly one ``error:`` line, its last."""
    assert run.returncode in codes, run.describe()
    assert "Traceback" not in run.stderr and "Traceback" not in run.stdout, run.describe()
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("llmload bench: error:")]
    assert len(errors) == 1 and lines[-1] == errors[0], run.describe()
    message = errors[0][len("llmload bench: error:"):].strip()
    assert message, run.describe()
    return message


class Recorder(BaseHTTPRequestHandler):
    """A server that answers 404 to everything and remembers the headers it was sent."""

    seen: list[dict[str, str]]

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.seen.append({k.lower(): v for k, v in self.headers.items()})
        body = b'{"detail":"Not Found"}'
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def not_found_server() -> Iterator[tuple[str, list[dict[str, str]]]]:
    seen: list[dict[str, str]] = []
    with http_server(type("Handler", (Recorder,), {"seen": seen})) as url:
        yield url, seen


def bench_offline_dataset(child_runner, *flags: str):
    """A bench whose dataset step must fail before any request (the server is unreachable anyway)."""
    return child_runner.bench("--base-url", UNREACHABLE, "--model", "m", "--tokenizer", "builtin",
                              "--num-prompts", "5", *flags)


def test_missing_dataset_file(child_runner, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-sharegpt.json"
    message = one_line_error(bench_offline_dataset(child_runner, "--dataset-path", str(missing)), 1, 2)
    assert str(missing) in message


def test_malformed_json_dataset(child_runner, tmp_path: Path) -> None:
    bad = tmp_path / "broken.json"
    bad.write_text('[{"id": "a", "conversations": [{"from": "human", "value": "hi"}')
    message = one_line_error(bench_offline_dataset(child_runner, "--dataset-path", str(bad)), 1, 2)
    assert str(bad) in message and "JSON" in message


def test_dataset_empty_after_filtering(child_runner, tmp_path: Path) -> None:
    """Every prompt is longer than vLLM's 1024-token limit, so nothing is left to send."""
    long_prompt = " ".join(f"word{i} and some more text number {i}." for i in range(600))
    data = [{"id": f"c{i}", "conversations": [{"from": "human", "value": long_prompt},
                                              {"from": "gpt", "value": "a fine answer with enough tokens"}]}
            for i in range(5)]
    path = tmp_path / "too_long.json"
    path.write_text(json.dumps(data))
    message = one_line_error(bench_offline_dataset(child_runner, "--dataset-path", str(path)), 1, 2)
    assert "prompt" in message.lower() or "empty" in message.lower() or "usable" in message.lower(), message


def test_unknown_backend(cli) -> None:
    run = cli("bench", "--base-url", UNREACHABLE, "--backend", "no-such-engine")
    message = one_line_error(run, 2)
    assert "--backend" in message and "no-such-engine" in message


def test_bad_goodput(child_runner) -> None:
    message = one_line_error(child_runner.bench("--base-url", UNREACHABLE, "--goodput", "foo"), 2)
    assert "--goodput" in message and "foo" in message


def test_missing_tokenizer_dir(child_runner) -> None:
    run = child_runner.bench("--base-url", UNREACHABLE, "--model", "m", "--tokenizer", "/nonexistent/tokenizer")
    message = one_line_error(run, 1, 2)
    assert "/nonexistent/tokenizer" in message


def test_unreachable_server(child_runner) -> None:
    message = one_line_error(child_runner.bench("--base-url", UNREACHABLE, "--tokenizer", "builtin"), 1)
    assert "127.0.0.1:1" in message


@pytest.mark.slow
def test_server_answers_404(child_runner, not_found_server) -> None:
    url, _ = not_found_server
    assert "404" in one_line_error(child_runner.bench("--base-url", url, "--tokenizer", "builtin"), 1)
    run = child_runner.bench("--base-url", url, "--model", "m", "--tokenizer", "builtin", "--num-prompts", "3")
    assert "404" in one_line_error(run, 1)


def test_wrong_endpoint_on_real_server(child_runner, start_sim) -> None:
    sim = start_sim("--ttft-ms", "5", "--itl-ms", "1")
    run = child_runner.bench("--base-url", sim.url, "--endpoint", "/v1/no-such-path", "--tokenizer", "builtin",
                             "--num-prompts", "3")
    message = one_line_error(run, 1)
    assert "404" in message and "/v1/no-such-path" in message


def _assert_secret_absent(run) -> None:
    assert SECRET not in run.stdout and SECRET not in run.stderr, run.describe()
    for path in run.result_dir.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), f"the API key was written into {path}"


@pytest.mark.slow
def test_api_key_sent_but_never_printed_or_saved(child_runner, start_sim, not_found_server) -> None:
    # a successful run with every output switched on
    sim = start_sim("--ttft-ms", "5", "--itl-ms", "1")
    run = child_runner.bench("--base-url", sim.url, "--tokenizer", "builtin", "--num-prompts", "4",
                             "--sharegpt-output-len", "4", "--save-result", "--save-detailed",
                             env_extra={"OPENAI_API_KEY": SECRET})
    assert run.returncode == 0, run.describe()
    assert list(run.result_dir.glob("*.records.jsonl")), run.describe()
    _assert_secret_absent(run)
    # a failing run: the key really is sent, and the error message does not repeat it
    url, seen = not_found_server
    run = child_runner.bench("--base-url", url, "--model", "m", "--tokenizer", "builtin", "--num-prompts", "2",
                             env_extra={"OPENAI_API_KEY": SECRET})
    one_line_error(run, 1)
    _assert_secret_absent(run)
    assert seen and all(h.get("authorization") == f"Bearer {SECRET}" for h in seen), seen
    # the same with --api-key-file
    key_file = run.result_dir / "key.txt"
    key_file.write_text(SECRET + "\n")
    seen.clear()
    run = child_runner.bench("--base-url", url, "--model", "m", "--tokenizer", "builtin", "--num-prompts", "2",
                             "--api-key-file", str(key_file))
    one_line_error(run, 1)
    assert SECRET not in run.stdout and SECRET not in run.stderr, run.describe()
    assert seen and all(h.get("authorization") == f"Bearer {SECRET}" for h in seen), seen
