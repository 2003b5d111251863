"""Secrets never leak, black-box: the API key (environment, ``--api-key-file``, the web UI), the password in
``--base-url http://user:password@host`` and the cluster token appear in no output, file, report, web route, or
process listing; and the master/worker channel gives no job to a worker without the cluster token."""

from __future__ import annotations

import base64
import os
import re
import secrets
import signal
import socket
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import httpx
import pytest
from support import (
    ChildProcesses,
    free_port,
    is_run_request,
    llmload_command,
    offline_env,
    strict_json,
    trace_lines,
    wait_for_text,
)

#: fixed, fast simulator timing for every run here
SIM_TIMING = "--ttft-ms 5 --itl-ms 2"


# -- processes and what they leave -------------------------------------------------------------------------

class Procs(ChildProcesses):
    """The processes one test started, plus every file they wrote (to grep) and the command line each was given."""

    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp)
        #: every file a process or the test wrote that must hold no secret
        self.outputs: list[Path] = []
        #: pid -> the command line the test gave it
        self.argv: dict[int, bytes] = {}
        #: every command line the test gave, known before the process starts (the watcher may see a new
        #: process before start() has its pid)
        self.given: set[bytes] = set()

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None, **kwargs: object
              ) -> tuple[subprocess.Popen, Path, Path]:
        self.given.add("\0".join(argv).encode())
        proc, out, err = super().start(name, argv, env, **kwargs)
        self.argv[proc.pid] = "\0".join(argv).encode()
        self.outputs += [out, err]
        return proc, out, err

    def run(self, name: str, argv: list[str], env: dict[str, str], timeout: float = 120.0) -> tuple[int, str, str]:
        proc, out, err = self.start(name, argv, env)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{name}: still running after {timeout} s\n{err.read_text(errors='replace')[-3000:]}")
        return rc, out.read_text(errors="replace"), err.read_text(errors="replace")


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Procs]:
    with Procs(tmp_path) as p:
        yield p


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


class ProcessWatcher(threading.Thread):
    """Samples every process while the runs go: each command line (``/proc/PID/cmdline`` and ``ps -eo args``)
    must hold no secret; so must the environment (``/proc/PID/environ`` and ``ps e``) of every simulator and
    worker that a process we started started itself (children get a cleaned environment).

    Who is whose child is worked out from each listing alone (PIDs are reused: the host's pid_max may be small):
    the test's own processes are those it started that are still children of this process."""

    CHILD_KINDS: ClassVar[dict[str, re.Pattern[bytes]]] = {
        "sim": re.compile(rb"llmload(\.cli)?\x00sim\x00"), "worker": re.compile(rb"\x00bench\x00--worker\x00")}

    def __init__(self, secret_values: list[str], procs: Procs) -> None:
        super().__init__(daemon=True)
        self.secrets = [s.encode() for s in secret_values]
        self.procs = procs
        self.halt = threading.Event()
        self.leaks: list[str] = []
        #: environments of sim / worker children read and checked, by kind
        self.children_checked: Counter = Counter()
        self.scans = 0
        self.ps_listings = 0

    def _found(self, data: bytes, given: bytes = b"") -> list[str]:
        """The secrets in ``data``, except those in ``given``: what the test itself put on that process's
        command line (``--base-url http://user:password@...``: the user's own argv, see
        test_password_in_base_url_is_hidden_from_ps)."""
        return [s.decode() for s in self.secrets if s in data and s not in given]

    def _family(self, parents: dict[int, int]) -> tuple[dict[int, bytes], set[int]]:
        """From one listing (pid -> ppid): the test's own processes (pid -> the argv it gave them) and all
        their descendants."""
        me = os.getpid()
        own = {pid: argv for pid, argv in list(self.procs.argv.items()) if parents.get(pid) == me}
        children: dict[int, list[int]] = {}
        for pid, ppid in parents.items():
            children.setdefault(ppid, []).append(pid)
        below: set[int] = set()
        todo = list(own)
        while todo:
            for child in children.get(todo.pop(), []):
                if child not in below:
                    below.add(child)
                    todo.append(child)
        return own, below - set(own)

    def _given(self, cmdline: bytes) -> bytes:
        """``cmdline`` when it is one the test gave: as given, or as the kernel shows a script it started through
        its ``#!`` line (the interpreter's path in front)."""
        for argv in list(self.procs.given):
            if cmdline == argv or cmdline.endswith(b"\0" + argv):
                return cmdline
        return b""

    def _kind(self, cmdline: bytes) -> str | None:
        return next((kind for kind, pattern in self.CHILD_KINDS.items() if pattern.search(cmdline)), None)

    def scan(self) -> None:
        table: dict[int, tuple[int, bytes]] = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                cmdline = _read(f"/proc/{name}/cmdline")
                stat = _read(f"/proc/{name}/stat")
            except OSError:
                continue
            table[int(name)] = (int(stat.rsplit(b")", 1)[1].split()[1]), cmdline)
        own, descendants = self._family({pid: ppid for pid, (ppid, _) in table.items()})
        for pid, (_, cmdline) in table.items():
            given = own.get(pid) or self._given(cmdline.rstrip(b"\0"))
            if found := self._found(cmdline, given):
                self.leaks.append(f"command line of pid {pid}: {found}: {cmdline[:300]!r}")
        for pid in descendants:
            kind = self._kind(table[pid][1])
            if kind is None:
                continue
            try:
                environ = _read(f"/proc/{pid}/environ")
            except OSError:
                continue
            self.children_checked[kind] += 1
            if found := self._found(environ):
                self.leaks.append(f"environment of {kind} child {pid}: {found}")

    def ps(self) -> None:
        listing = subprocess.run(["ps", "-ww", "-eo", "pid=,ppid=,args="], capture_output=True).stdout
        with_env = subprocess.run(["ps", "-ww", "-eo", "pid=,ppid=,args=", "e"], capture_output=True).stdout
        for text, env in ((listing, False), (with_env, True)):
            rows = {}
            for line in text.splitlines():
                fields = line.split(None, 2)
                if len(fields) == 3 and fields[0].isdigit() and fields[1].isdigit():
                    rows[int(fields[0])] = (int(fields[1]), fields[2])
            own, descendants = self._family({pid: ppid for pid, (ppid, _) in rows.items()})
            for pid, (_, args) in rows.items():
                if not env:
                    if found := self._found(args, own.get(pid, b"")):
                        self.leaks.append(f"ps -eo args, pid {pid}: {found}: {args[:300]!r}")
                elif (pid in descendants and re.search(rb"llmload(\.cli)? (sim|bench --worker) ", args)
                      and (found := self._found(args))):
                    self.leaks.append(f"ps e, child {pid}: {found}")
        self.ps_listings += 1

    def run(self) -> None:
        # /proc 10 times a second (the test's processes live for seconds), ps every 2 s: each listing reads
        # every process of the machine, xdist's included
        while not self.halt.is_set():
            self.scan()
            self.scans += 1
            if self.scans % 20 == 0:
                self.ps()
            self.halt.wait(0.1)

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=30)


class HeaderCatcher:
    """A tiny HTTP server on 127.0.0.1 that remembers each request's Authorization header and answers 503:
    proof that the secrets under test really are sent (so their absence everywhere else means something)."""

    def __init__(self) -> None:
        seen = self.seen = []

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                seen.append(self.headers.get("Authorization"))
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                body = b'{"error": "unavailable"}'
                self.send_response(503)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def start_sim(procs: Procs, name: str, *args: str) -> str:
    """``llmload sim`` on a free loopback port, started by the test; returns its URL once it listens."""
    proc, out, _ = procs.start(name, [*llmload_command(), "sim", "--host", "127.0.0.1", "--port", "0",
                                      *SIM_TIMING.split(), *args], offline_env())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        m = re.search(r"listening on (http://127\.0\.0\.1:\d+)\b", out.read_text(errors="replace"))
        if m:
            return m.group(1)
        time.sleep(0.05)
    pytest.fail(f"llmload sim did not start (exit {proc.poll()})")


# -- the one test that greps everything --------------------------------------------------------------------

WORKLOAD = ("--num-prompts", "12", "--request-rate", "20", "--sharegpt-output-len", "16", "--ignore-eos",
            "--save-result", "--disable-tqdm")


@pytest.mark.slow
def test_no_secret_in_any_output_file_report_route_or_process_listing(procs, tmp_path: Path) -> None:
    env_key = f"sk-test-{secrets.token_hex(12)}"
    file_key = f"sk-file-{secrets.token_hex(12)}"
    user, password = "tester", f"pw{secrets.token_hex(12)}"
    basic = base64.b64encode(f"{user}:{password}".encode()).decode()
    cluster_token = f"ct-{secrets.token_hex(16)}"
    ui_key, ui_openai_key = f"sk-ui-{secrets.token_hex(12)}", f"sk-uienv-{secrets.token_hex(12)}"
    all_secrets = [env_key, file_key, password, basic, cluster_token, ui_key, ui_openai_key]

    watcher = ProcessWatcher(all_secrets, procs)
    watcher.start()
    catcher = HeaderCatcher()
    result_dirs: list[Path] = []
    http_bodies: dict[str, bytes] = {}
    bench = [*llmload_command(), "bench"]
    try:
        def ok_run(name: str, *args: str, env: dict[str, str], sim: bool = True) -> None:
            result_dir = tmp_path / name
            result_dirs.append(result_dir)
            sim_args = ("--sim-args", SIM_TIMING) if sim else ()
            rc, out, err = procs.run(name, [*bench, *sim_args, *WORKLOAD, "--result-dir", str(result_dir), *args],
                                     env)
            assert rc == 0, f"{name}: exit {rc}\n{out[-2000:]}\n{err[-3000:]}"

        # 1. the key from the environment, the built-in simulator (a child: cleaned environment)
        ok_run("env-key", env=offline_env({"OPENAI_API_KEY": env_key}))
        # 2. the key from --api-key-file
        key_file = tmp_path / "api-key.txt"
        key_file.write_text(file_key + "\n")
        ok_run("key-file", "--api-key-file", str(key_file), env=offline_env())
        # 3. user:password@ in --base-url, against a simulator the test started (it ignores auth)
        sim_url = start_sim(procs, "sim-for-password", "--trace-file", str(tmp_path / "sim-for-password.jsonl"))
        procs.outputs.append(tmp_path / "sim-for-password.jsonl")
        creds_url = sim_url.replace("http://", f"http://{user}:{password}@")
        ok_run("password-url", "--base-url", creds_url, "--tokenizer", "builtin", env=offline_env(), sim=False)
        # 4. --processes 2 with the key in the environment (workers and simulator are children)
        ok_run("processes", "--processes", "2", env=offline_env({"OPENAI_API_KEY": env_key}))
        # 5. --master + a separately started --worker, with the cluster token
        port = free_port()
        token_env = {"LLMLOAD_CLUSTER_TOKEN": cluster_token}
        master_dir = tmp_path / "master"
        result_dirs.append(master_dir)
        master, _, master_err = procs.start("master", [
            *bench, "--sim-args", SIM_TIMING, *WORKLOAD, "--result-dir", str(master_dir), "--master",
            "--expect-workers", "1", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port)],
            offline_env({"OPENAI_API_KEY": env_key, **token_env}))
        worker, _, worker_err = procs.start("worker", [*bench, "--worker", "--master-host", "127.0.0.1",
                                                       "--master-port", str(port)], offline_env(token_env))
        assert master.wait(timeout=120) == 0, master_err.read_text()[-3000:]
        assert worker.wait(timeout=30) == 0, worker_err.read_text()[-3000:]

        # failures print the target: the password stays masked there too
        # a port bound but not listening: connections are refused, and nobody else can take it meanwhile
        refuser = socket.socket()
        refuser.bind(("127.0.0.1", 0))
        closed = refuser.getsockname()[1]
        closed_url = f"http://{user}:{password}@127.0.0.1:{closed}"
        rc, _, err = procs.run("unreachable-models", [*bench, "--base-url", closed_url, "--tokenizer", "builtin",
                                                      "--num-prompts", "5"], offline_env())
        assert rc == 1 and f"{user}:***@127.0.0.1:{closed}" in err, (rc, err[-2000:])
        rc, _, err = procs.run("unreachable-probe", [*bench, "--base-url", closed_url, "--model", "m",
                                                     "--tokenizer", "builtin", "--num-prompts", "5"], offline_env())
        assert rc == 1 and "initial test" in err, (rc, err[-2000:])
        unreachable_dir = tmp_path / "unreachable-run"
        rc, _, err = procs.run("unreachable-run", [
            *bench, "--base-url", closed_url, "--model", "m", "--tokenizer", "builtin", "--num-prompts", "5",
            "--no-initial-test", "--save-result", "--result-dir", str(unreachable_dir), "--disable-tqdm"],
            offline_env())
        assert rc == 1, (rc, err[-2000:])
        refuser.close()
        rc, _, err = procs.run("bad-port", [*bench, "--base-url", f"http://{user}:{password}@127.0.0.1:99999",
                                            "--num-prompts", "5"], offline_env())
        assert rc == 2 and "--base-url" in err, (rc, err[-2000:])
        # the secrets are really sent (Bearer key, Basic credentials): their absence below is not an accident
        catcher_url = f"http://127.0.0.1:{catcher.port}"
        rc, _, err = procs.run("bearer-503", [*bench, "--base-url", catcher_url, "--model", "m", "--tokenizer",
                                              "builtin", "--num-prompts", "5"],
                               offline_env({"OPENAI_API_KEY": env_key}))
        assert rc == 1 and "503" in err, (rc, err[-2000:])
        rc, _, err = procs.run("basic-503", [*bench, "--base-url", catcher_url.replace("//", f"//{user}:{password}@"),
                                             "--model", "m", "--tokenizer", "builtin", "--num-prompts", "5"],
                               offline_env())
        assert rc == 1 and "503" in err, (rc, err[-2000:])
        assert catcher.seen == [f"Bearer {env_key}", f"Basic {basic}"], catcher.seen

        # the HTML report (and its Markdown, CSV, figures) of the run whose base URL held the password, and of a
        # distributed one (a report shows only what its result and records hold, and the checks below read
        # those of every run)
        for result_dir in (tmp_path / "password-url", master_dir):
            (result_json,) = sorted(result_dir.glob("*.json"))
            report_dir = tmp_path / f"report-{result_dir.name}"
            rc, _, err = procs.run(f"report-{result_dir.name}", [*llmload_command(), "report", str(result_json),
                                                                   "--output", str(report_dir)], offline_env())
            assert rc == 0 and (report_dir / "report.html").exists(), (rc, err[-2000:])

        # the web UI: keys from LLMLOAD_API_KEY and OPENAI_API_KEY; its page, its JSON routes, Locust's own
        web_port = free_port()
        ui, _, ui_err = procs.start("ui", [*llmload_command(), "ui", "--web-port", str(web_port), "--sim-args",
                                           SIM_TIMING, "--", "--num-prompts", "10", "--max-tokens", "16"],
                                    offline_env({"LLMLOAD_API_KEY": ui_key, "OPENAI_API_KEY": ui_openai_key}))
        web = httpx.Client(base_url=f"http://127.0.0.1:{web_port}", timeout=10.0, trust_env=False)
        deadline = time.monotonic() + 60
        while True:
            assert ui.poll() is None and time.monotonic() < deadline, ui_err.read_text()[-3000:]
            try:
                if web.get("/llm/stats").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        routes = ("/", "/llm/", "/llm/stats", "/stats/requests", "/llm/records.jsonl", "/llm/result.json")
        for path in routes:
            http_bodies[f"before {path}"] = web.get(path).content
        assert '"is_secret": true' in http_bodies["before /"].decode(), "no secret api-key field on the page"
        swarm = web.post("/swarm", data={"user_count": "2", "spawn_rate": "2",
                                         "host": web.get("/llm/stats").json()["host"]})
        http_bodies["POST /swarm"] = swarm.content
        assert swarm.json()["success"], swarm.text
        deadline = time.monotonic() + 60
        while web.get("/llm/stats").json()["run"]["completed"] < 5:
            assert time.monotonic() < deadline, web.get("/llm/stats").text[:2000]
            time.sleep(0.25)
        for path in routes:
            resp = web.get(path)
            assert resp.status_code == 200, (path, resp.status_code)
            http_bodies[f"running {path}"] = resp.content
        http_bodies["GET /stop"] = web.get("/stop").content
        os.kill(ui.pid, signal.SIGTERM)
        ui.wait(timeout=30)
    finally:
        watcher.stop()
        catcher.close()

    # sampled while the runs went: command lines of every process, environments of every child
    assert watcher.scans > 50 and watcher.ps_listings > 10, (watcher.scans, watcher.ps_listings)
    assert watcher.children_checked["sim"] >= 5 and watcher.children_checked["worker"] >= 2, (
        f"the watcher saw too few children to check: {dict(watcher.children_checked)}")
    assert not watcher.leaks, "\n".join(watcher.leaks[:20])

    # every byte every process printed or wrote: stdout, stderr, result JSON, records, reports, traces
    texts: dict[str, bytes] = {str(p): p.read_bytes() for p in procs.outputs if p.exists()}
    for folder in (*result_dirs, unreachable_dir, *tmp_path.glob("report-*")):
        for path in folder.rglob("*"):
            if path.is_file():
                texts[str(path)] = path.read_bytes()
    texts.update(http_bodies)
    kinds = Counter(Path(name).suffix for name in texts)
    assert kinds[".json"] >= 5 and kinds[".jsonl"] >= 5 and kinds[".html"] >= 2, kinds
    leaks = [(name, s) for name, data in texts.items() for s in all_secrets if s.encode() in data]
    assert not leaks, leaks[:20]
    # the runs did what they should, so the outputs checked are the real ones
    for result_dir in result_dirs:
        (result_json,) = sorted(result_dir.glob("*.json"))
        result = strict_json(result_json.read_text(), result_json)
        assert result["completed"] == 12, (result_dir.name, result["completed"])
    password_run = strict_json(next((tmp_path / "password-url").glob("*.json")).read_text())
    assert password_run["base_url"] == f"http://{user}:***@{sim_url[len('http://'):]}", password_run["base_url"]


# -- the cluster token -------------------------------------------------------------------------------------

@pytest.mark.slow
def test_worker_without_the_cluster_token_gets_no_job(procs, tmp_path: Path) -> None:
    token = f"ct-{secrets.token_hex(16)}"
    api_key = f"sk-test-{secrets.token_hex(12)}"
    trace = tmp_path / "sim.jsonl"
    port = free_port()
    bench = [*llmload_command(), "bench"]
    master, out, err = procs.start("master", [
        *bench, "--sim-args", f"{SIM_TIMING} --trace-file {trace}", "--num-prompts", "20", "--request-rate", "20",
        "--sharegpt-output-len", "16", "--ignore-eos", "--save-result", "--result-dir", str(tmp_path / "out"),
        "--disable-tqdm", "--master", "--expect-workers", "1", "--master-bind-host", "127.0.0.1",
        "--master-bind-port", str(port)], offline_env({"LLMLOAD_CLUSTER_TOKEN": token, "OPENAI_API_KEY": api_key}))
    wait_for_text(err, r"Master listening on 127\.0\.0\.1", master, 90)
    worker = [*bench, "--worker", "--master-host", "127.0.0.1", "--master-port", str(port)]

    # strangers: one with no token, one with another token; each is refused and told to quit
    strangers = [("no-token", offline_env()), ("wrong-token", offline_env({"LLMLOAD_CLUSTER_TOKEN": "B" * 32}))]
    for k, (name, env) in enumerate(strangers, 1):
        stranger, _, stranger_err = procs.start(name, worker, env)
        text = wait_for_text(err, r"failed to authenticate with the cluster token", master, 60, count=k)
        try:
            rc = stranger.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the {name} stranger was not told to quit\n{stranger_err.read_text()[-2000:]}")
        assert "Starting main benchmark run" not in text, text[-2000:]
        stranger_text = stranger_err.read_text(errors="replace")
        assert api_key not in stranger_text and token not in stranger_text
        assert rc == 0, (name, rc, stranger_text[-2000:])
    assert "has none" in (tmp_path / "no-token.stderr").read_text()
    # the server saw the master's initial test and nothing from the strangers
    assert not [t for t in trace_lines(trace) if is_run_request(t["client_id"])], trace_lines(trace)
    assert master.poll() is None and "Starting main benchmark run" not in err.read_text()

    # the run starts only once a worker with the token connects
    good, _, good_err = procs.start("good", worker, offline_env({"LLMLOAD_CLUSTER_TOKEN": token}))
    assert master.wait(timeout=120) == 0, err.read_text()[-3000:]
    assert good.wait(timeout=30) == 0, good_err.read_text()[-3000:]
    (result_json,) = sorted((tmp_path / "out").glob("*.json"))
    result = strict_json(result_json.read_text(), result_json)
    assert result["completed"] == 20 and len(result["workers"]) == 1, result.get("workers")
    received = Counter(t["client_id"] for t in trace_lines(trace) if is_run_request(t["client_id"]))
    assert len(received) == 20 and max(received.values()) == 1, received
    assert api_key not in out.read_text() + err.read_text()


@pytest.mark.parametrize("secret", ["api-key", "url-password"])
@pytest.mark.parametrize("bind", ["0.0.0.0", None])
def test_master_on_every_interface_with_a_secret_needs_a_cluster_token(procs, tmp_path: Path, secret: str,
                                                                        bind: str | None) -> None:
    trace = tmp_path / "sim.jsonl"
    sim_url = start_sim(procs, "sim", "--trace-file", str(trace))
    password = f"pw{secrets.token_hex(8)}"
    env, url = offline_env(), sim_url
    if secret == "api-key":
        env["OPENAI_API_KEY"] = f"sk-test-{secrets.token_hex(8)}"
    else:
        url = sim_url.replace("http://", f"http://tester:{password}@")
    argv = [*llmload_command(), "bench", "--base-url", url, "--tokenizer", "builtin", "--num-prompts", "10",
            "--master", "--expect-workers", "1", "--master-bind-port", str(free_port())]
    if bind:
        argv += ["--master-bind-host", bind]
    rc, out, err = procs.run("master", argv, env, timeout=60)
    assert rc == 2, f"exit {rc}\n{out[-2000:]}\n{err[-2000:]}"
    assert len(err.strip().splitlines()) == 1 and "cluster token" in err and "LLMLOAD_CLUSTER_TOKEN" in err, err
    assert password not in err and password not in out
    assert trace_lines(trace) == [], "requests were sent before the check"


@pytest.mark.slow
def test_password_in_base_url_is_hidden_from_ps(procs, tmp_path: Path) -> None:
    sim_url = start_sim(procs, "sim")
    password = f"pw{secrets.token_hex(12)}"
    url = sim_url.replace("http://", f"http://tester:{password}@")
    bench, _, err = procs.start("bench", [*llmload_command(), "bench", "--base-url", url, "--tokenizer", "builtin",
                                          "--num-prompts", "40", "--request-rate", "10", "--disable-tqdm"],
                                offline_env())
    # once the run is going, whatever llmload does to its own process title has been done
    wait_for_text(err, r"Starting main benchmark run", bench, 90)
    cmdline = _read(f"/proc/{bench.pid}/cmdline")
    listing = subprocess.run(["ps", "-ww", "-o", "args=", "-p", str(bench.pid)], capture_output=True).stdout
    assert password.encode() not in cmdline and password.encode() not in listing, cmdline
