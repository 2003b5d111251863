"""Open Locust's web UI with llmload's LLM tab: live TTFT/ITL/TPOT, tokens/s, charts, rate steering.

Runs ``locust -f locustfiles/sharegpt.py`` (or your ``-f``) with the web UI on 127.0.0.1:8089. Without
``--host`` it first starts the built-in simulator (``llmload sim``) and points the test at it; the simulator
is stopped when the UI exits (Ctrl-C). Arguments after ``--`` go to locust unchanged.

examples:
  llmload ui                                         # simulator + web UI; open http://127.0.0.1:8089/?tab=llm
  llmload ui --host http://gpu-box:8000 --model my-model --tokenizer /models/my-model
  llmload ui --processes 4 -- --arrival open --request-rate 20 --web-login --llm-web-credentials me:secret
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from llmload.common.errors import ConfigError
from llmload.options import add_table_arguments, argtypes
from llmload.processes.children import wait_for

#: used when no ``-f`` is given and the repository's locustfile is not at hand (an installed llmload)
_LOCUSTFILE = '''"""Replay ShareGPT prompts as streaming completions (written by 'llmload ui')."""
from llmload.locust import ShareGPTUser


class ShareGPT(ShareGPTUser):
    pass
'''


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="", help="server base URL; default: start the simulator (llmload sim)")
    parser.add_argument("-f", "--locustfile", default="",
                        help="locustfile (default: locustfiles/sharegpt.py, else an equivalent one)")
    parser.add_argument("--web-host", default="127.0.0.1", help="interface for the web UI (default: %(default)s)")
    parser.add_argument("--web-port", type=argtypes.port, default=8089, help="web UI port (default: %(default)s)")
    parser.add_argument("--processes", type=argtypes.non_negative_int, default=0,
                        help="load-generating worker processes (locust --processes); 0: one process")
    parser.add_argument("--master-port", type=argtypes.port_or_zero, default=0,
                        help="with --processes: master port (default: a free one, not Locust's shared 5557)")
    add_table_arguments(parser, ("model", "tokenizer", "sim_args"))  # declared once, in the option table
    parser.add_argument("locust_args", nargs=argparse.REMAINDER,
                        help="after '--': more locust/llmload options, passed through")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _locustfile(given: str, tmp: Path) -> str:
    if given:
        if not Path(given).is_file():
            raise ConfigError(f"-f/--locustfile: no such file: {given}")
        return given
    repo_file = Path("locustfiles/sharegpt.py")
    if repo_file.is_file():
        return str(repo_file)
    path = tmp / "sharegpt.py"
    path.write_text(_LOCUSTFILE)
    return str(path)


def build_command(args: argparse.Namespace, host: str, locustfile: str) -> list[str]:
    extra = list(args.locust_args or [])
    if extra[:1] == ["--"]:
        extra = extra[1:]
    cmd = [sys.executable, "-m", "locust", "-f", locustfile, "--host", host,
           "--web-host", args.web_host, "--web-port", str(args.web_port)]
    if args.model:
        cmd += ["--model", args.model]
    if args.tokenizer:
        cmd += ["--tokenizer", args.tokenizer]
    if args.processes:
        port = args.master_port or _free_port()
        cmd += ["--processes", str(args.processes), "--master-bind-port", str(port), "--master-port", str(port)]
    return cmd + extra


def run(args: argparse.Namespace) -> int:
    import shlex

    from llmload.processes.simproc import SimProcess

    if args.processes < 0:
        raise ConfigError(f"--processes must be >= 0, got {args.processes}")
    sim = None
    with tempfile.TemporaryDirectory(prefix="llmload-ui-") as tmp:
        locustfile = _locustfile(args.locustfile, Path(tmp))
        host = args.host
        if not host:
            sim = SimProcess(shlex.split(args.sim_args))
            host = sim.url
            if not args.tokenizer:
                args.tokenizer = "builtin"
            print(f"llmload ui: started the simulator at {host} (pid {sim.pid})", file=sys.stderr, flush=True)
        cmd = build_command(args, host, locustfile)
        shown = "127.0.0.1" if args.web_host in ("", "0.0.0.0", "*") else args.web_host
        print(f"llmload ui: LLM tab at http://{shown}:{args.web_port}/?tab=llm (Ctrl-C to quit)",
              file=sys.stderr, flush=True)
        proc = subprocess.Popen(cmd)
        previous = signal.signal(signal.SIGTERM, lambda *_: _forward(proc, signal.SIGTERM))
        try:
            while True:
                try:
                    return wait_for(proc)
                except KeyboardInterrupt:
                    _forward(proc, signal.SIGINT)  # locust stops the test, prints its summary and quits
        finally:
            signal.signal(signal.SIGTERM, previous)
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if sim is not None:
                sim.stop()


def _forward(proc: subprocess.Popen, sig: int) -> None:
    if proc.poll() is None:
        try:
            os.kill(proc.pid, sig)
        except ProcessLookupError:
            pass
