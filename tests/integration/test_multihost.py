"""A `llmload bench --master` and a `llmload bench --worker` on different hosts (network namespaces joined by a veth pair) run one benchmark together."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import end_process, llmload_command, offline_env

pytestmark = pytest.mark.slow

#: link-local addresses, used only on the veth pair inside the two namespaces this test creates
MASTER_ADDR, WORKER_ADDR, PREFIX = "169.254.77.1", "169.254.77.2", 30
PROMPTS = 40






def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20, check=check)


class Hosts:
    """Two network namespaces, ``master`` and ``worker``, joined by a veth pair; deleted on close."""

    def __init__(self) -> None:
        tag = f"{os.getpid() % 100000}"
        self.master, self.worker = f"llt-m{tag}", f"llt-w{tag}"
        self.master_if, self.worker_if = f"lltm{tag}", f"lltw{tag}"  # interface names: at most 15 characters
        self.made: list[str] = []

    def create(self) -> None:
        for ns in (self.master, self.worker):
            _ip("netns", "add", ns)
            self.made.append(ns)
        # the pair is created straight inside the namespaces: nothing appears in the host's own namespace
        _ip("link", "add", self.master_if, "netns", self.master, "type", "veth", "peer", "name", self.worker_if,
            "netns", self.worker)
        for ns, dev, addr in ((self.master, self.master_if, MASTER_ADDR), (self.worker, self.worker_if, WORKER_ADDR)):
            _ip("-n", ns, "addr", "add", f"{addr}/{PREFIX}", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def exec(self, ns: str) -> list[str]:
        return ["ip", "netns", "exec", ns]

    def tx_bytes(self, ns: str, dev: str) -> int:
        info = json.loads(_ip("-n", ns, "-s", "-j", "link", "show", dev).stdout)
        return int(info[0]["stats64"]["tx"]["bytes"])

    def close(self) -> None:
        for ns in reversed(self.made):  # deleting a namespace deletes its end of the veth pair (and the pair)
            _ip("netns", "del", ns, check=False)


@pytest.fixture
def hosts() -> Iterator[Hosts]:
    if sys.platform != "linux":
        pytest.skip("network namespaces are Linux-only")
    if shutil.which("ip") is None:
        pytest.skip("no 'ip' command (iproute2): cannot create network namespaces")
    if os.geteuid() != 0:
        pytest.skip("creating network namespaces needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN)")
    h = Hosts()
    try:
        try:
            h.create()
        except subprocess.CalledProcessError as exc:
            pytest.skip(f"this machine does not allow network namespaces / veth pairs: {' '.join(exc.cmd)}: "
                        f"{exc.stderr.strip()}")
        yield h
    finally:
        h.close()


class Children:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[subprocess.Popen] = []

    def start(self, name: str, argv: list[str]) -> tuple[subprocess.Popen, Path, Path]:
        out, err = self.tmp / f"{name}.stdout", self.tmp / f"{name}.stderr"
        with open(out, "wb") as fo, open(err, "wb") as fe:
            # `ip netns exec` execs the command: the PID is the program's, and its session is its own
            proc = subprocess.Popen(argv, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL, env=offline_env(),
                                    start_new_session=True)
        self.procs.append(proc)
        return proc, out, err

    def close(self) -> None:
        for proc in reversed(self.procs):
            end_process(proc)


@pytest.fixture
def children(tmp_path: Path) -> Iterator[Children]:
    c = Children(tmp_path)
    try:
        yield c
    finally:
        c.close()  # before the namespaces go (fixture order: children is torn down first)


def _wait_for(path: Path, pattern: str, proc: subprocess.Popen, timeout: float) -> re.Match:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = re.search(pattern, path.read_text(errors="replace"))
        if m:
            return m
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    pytest.fail(f"{pattern!r} not in {path.name} after {timeout} s (exit {proc.poll()}):\n"
                f"{path.read_text(errors='replace')[-3000:]}")


def test_master_and_worker_in_separate_network_namespaces(hosts: Hosts, children: Children, tmp_path: Path) -> None:
    sim_trace = tmp_path / "sim.jsonl"
    sim, sim_out, _ = children.start("sim", [
        *hosts.exec(hosts.master), *llmload_command(), "sim", "--host", MASTER_ADDR, "--port", "0", "--ttft-ms", "10",
        "--itl-ms", "5", "--tokenizer", "builtin", "--trace-file", str(sim_trace)])
    url = _wait_for(sim_out, rf"listening on (http://{re.escape(MASTER_ADDR)}:\d+)\b", sim, 30).group(1)

    result_dir = tmp_path / "result"
    # the defaults across hosts: the master binds all interfaces on 5557, the worker needs only the master's
    # address (the namespaces are fresh, so 5557 is free in them)
    master, m_out, m_err = children.start("master", [
        *hosts.exec(hosts.master), *llmload_command(), "bench", "--base-url", url, "--tokenizer", "builtin", "--master",
        "--expect-workers", "1", "--expect-workers-max-wait", "60", "--num-prompts", str(PROMPTS),
        "--constant-rate", "--request-rate", "20", "--sharegpt-output-len", "20", "--ignore-eos", "--save-result",
        "--disable-tqdm", "--result-dir", str(result_dir)])
    _wait_for(m_err, r"waiting for 1 workers", master, 60)
    before = hosts.tx_bytes(hosts.worker, hosts.worker_if)
    worker, _, w_err = children.start("worker", [
        *hosts.exec(hosts.worker), *llmload_command(), "bench", "--worker", "--master-host", MASTER_ADDR])
    try:
        rc = master.wait(timeout=90)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the master did not finish\n{m_err.read_text()[-3000:]}\n{w_err.read_text()[-3000:]}")
    stdout, stderr = m_out.read_text(errors="replace"), m_err.read_text(errors="replace")
    assert rc == 0, f"exit {rc}\n{stdout[-3000:]}\n{stderr[-3000:]}\n--- worker ---\n{w_err.read_text()[-2000:]}"
    assert worker.wait(timeout=20) == 0, w_err.read_text()[-3000:]  # the master's quit ends the worker
    sent = hosts.tx_bytes(hosts.worker, hosts.worker_if) - before

    assert re.search(r"Workers:\s+1\b", stdout) and re.search(r"worker0 records \(ok\):\s+40\b", stdout), stdout
    [result_path] = sorted(result_dir.glob("*.json"))
    result = json.loads(result_path.read_text())
    assert result["completed"] == PROMPTS and result["failed"] == 0 and result["lost_with_workers"] == 0
    assert result["workers"] == [{"worker": "worker0", "assigned": PROMPTS, "dispatched": PROMPTS,
                                  "records": PROMPTS, "lost": False}]
    records = [json.loads(line) for line in
               result_path.with_name(result_path.name[:-5] + ".records.jsonl").read_text().splitlines()]
    assert len({r["request_id"] for r in records}) == PROMPTS  # every request once, under its run-wide id
    assert all(r["success"] and r["worker"] == "worker0" and r["output_tokens"] == 20 for r in records)

    # the requests came over the veth from the worker's namespace: the server saw each one, the worker's end
    # of the pair carried at least their prompts, and the records sit on the master's timeline
    server = {}
    for line in sim_trace.read_text().splitlines():
        t = json.loads(line)
        server.setdefault(t["client_id"], []).append(t)
    for r in records:
        [srv] = server[r["request_id"]]
        assert srv["status"] == "ok" and srv["completion_tokens"] == 20
        assert srv["prompt_tokens"] == r["prompt_len"]
        assert abs(srv["received"] - r["start"]) < 0.5, (srv["received"], r["start"])
    assert sent > sum(r["prompt_len"] for r in records), f"only {sent} bytes left the worker's namespace"
