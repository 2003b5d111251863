"""`llmload --help` stays light, and `llmload sim` rejects bad flags and busy ports with one clear line, no traceback."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


@pytest.fixture
def run_cli(llmload_cmd):
    def run(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
        return subprocess.run([*llmload_cmd, *args], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    return run


def assert_one_error_line(stderr: str, *needles: str) -> str:
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if ": error:" in line]
    assert len(errors) == 1, stderr
    line = errors[0]
    assert line.startswith("llmload sim: error: ")
    assert stderr.rstrip().splitlines()[-1] == line, "the error must be the last thing printed"
    for needle in needles:
        assert needle in line, line
    return line


#: what makes a start-up slow: none of it is needed to print the help
HEAVY_MODULES = ("gevent", "locust", "transformers", "tokenizers", "numpy", "pandas", "matplotlib", "torch")


def test_top_level_help_is_fast_and_lists_sim(run_cli):
    out = run_cli("--help")
    assert out.returncode == 0
    assert "sim" in out.stdout.split("commands")[-1]
    # fast because it imports nothing heavy (a wall-clock bound would measure the CI machine's load)
    code = ("import sys\nfrom llmload.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            f"print('HEAVY', sorted(m for m in {HEAVY_MODULES!r} if m in sys.modules))")
    probe = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.splitlines()[-1] == "HEAVY []", f"llmload --help imports {probe.stdout.splitlines()[-1]}"


def test_sim_help_lists_the_flags(run_cli):
    out = run_cli("sim", "--help")
    assert out.returncode == 0
    for flag in ("--dialect", "--profile", "--ttft-ms", "--itl-ms", "--trace-file", "--error-rate", "--workers"):
        assert flag in out.stdout


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (("--ttft-ms", "5"), ("--ttft-ms", "--itl-ms")),
        (("--itl-ms", "5"), ("--ttft-ms", "--itl-ms")),
        (("--error-rate", "1.5"), ("--error-rate",)),
        (("--disconnect-rate", "-0.1"), ("--disconnect-rate",)),
        (("--error-rate", "0.6", "--stall-rate", "0.6"), ("fault rates",)),
        (("--tokens-per-chunk", "0"), ("--tokens-per-chunk",)),
        (("--error-codes", "200"), ("--error-codes",)),
        (("--dialect", "nope"), ("--dialect",)),
        (("--profile", "nope"), ("--profile",)),
        (("--ttft-ms", "-1", "--itl-ms", "1"), ("--ttft-ms",)),
    ],
    ids=["ttft-without-itl", "itl-without-ttft", "error-rate-1.5", "negative-rate", "rates-over-1",
         "tokens-per-chunk-0", "error-code-200", "bad-dialect", "bad-profile", "negative-ttft"],
)
def test_bad_flags_exit_2_with_one_line(cli, args, needles):
    out = cli("sim", "--port", "0", *args)  # in this process: each is refused before anything listens
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert "listening" not in out.stdout
    assert_one_error_line(out.stderr, *needles)


@pytest.mark.parametrize("occupant_workers", ["1", "2"])
@pytest.mark.parametrize("workers", ["1", "2"])
def test_port_in_use_fails_clearly(start_sim, llmload_cmd, occupant_workers, workers):
    """A second simulator on a busy port must fail, not silently share the port (SO_REUSEPORT) with the first."""
    occupant = start_sim("--ttft-ms", "1", "--itl-ms", "1", "--workers", occupant_workers)
    proc = subprocess.Popen(
        [*llmload_cmd, "sim", "--host", "127.0.0.1", "--port", str(occupant.port), "--workers", workers],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=30)  # a busy machine starts Python slowly
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=5)
        pytest.fail(f"a second simulator started on busy port {occupant.port}: {out.strip()}")
    assert proc.returncode != 0
    assert "listening" not in out
    assert_one_error_line(err, str(occupant.port), "in use")


def _group_members(pgid: int) -> list[int]:
    """Live processes in process group ``pgid`` (the simulator and the workers it forked)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_stops_cleanly_on_signal_right_after_listening(start_sim, sig, workers):
    """Once 'listening' is printed, a signal must stop the simulator and every worker, with exit status 0.
    Signalled the moment the line appears (what a script or test harness does); a few tries, as it is a race."""
    for _ in range(3):
        sim = start_sim("--ttft-ms", "1", "--itl-ms", "1", "--workers", workers)
        sim.proc.send_signal(sig)
        code = sim.proc.wait(timeout=20)
        deadline = time.monotonic() + 5  # the parent reaps its workers before it exits: normally at once
        while _group_members(sim.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        orphans = _group_members(sim.proc.pid)
        assert not orphans, f"workers {orphans} outlived the simulator (exit {code})"
        assert code == 0, f"exit status {code}: the signal arrived before the simulator handled it"
        assert "Traceback" not in sim.stderr()


def _loaded_libraries(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


def _chat(url: str, content: object) -> dict:
    import json
    import urllib.request

    body = json.dumps({"model": "llmload-sim", "max_tokens": 3,
                       "messages": [{"role": "user", "content": content}]}).encode()
    request = urllib.request.Request(f"{url}/v1/chat/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def test_a_simulator_serves_text_without_numpy_or_pillow_and_loads_pillow_with_the_first_image(start_sim):
    """Both cost a simulator's start more than the rest of it (numpy came with the option table's dataset names);
    a text-only simulator needs neither. Read from the running process's mapped libraries."""
    import base64
    import io

    from PIL import Image

    sim = start_sim("--ttft-ms", "1", "--itl-ms", "1")
    assert _chat(sim.url, "hello")["usage"]["completion_tokens"] == 3
    maps = _loaded_libraries(sim.proc.pid)
    assert "_multiarray_umath" not in maps and "PIL/_imaging" not in maps, "numpy or Pillow loaded for text"
    png = io.BytesIO()
    Image.new("RGB", (56, 56), "red").save(png, format="PNG")
    image = "data:image/png;base64," + base64.b64encode(png.getvalue()).decode()
    answer = _chat(sim.url, [{"type": "text", "text": "what is this"}, {"type": "image_url", "image_url": {"url": image}}])
    assert answer["usage"]["prompt_tokens"] > _chat(sim.url, "what is this")["usage"]["prompt_tokens"]
    assert "PIL/_imaging" in _loaded_libraries(sim.proc.pid)
