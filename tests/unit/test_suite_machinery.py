"""The suite's own machinery, run on small suites of its own in child pytest processes: the serial phase after
the parallel one (tests/phases.py), the gevent and CI-skip guards (tests/guards.py) and the ports each xdist
worker is handed (tests/support.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
pytest_plugins = ["pytester"]

CONFTEST = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
pytest_plugins = ["phases", "guards"]
"""
INI = """
[pytest]
addopts = -p no:cacheprovider -p no:benchmark
markers =
    serial: alone, after the parallel phase
    slow: slow
    needs(tool): needs a tool
"""


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makeini(INI)
    return pytester


def _run(suite: pytest.Pytester, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "LLMLOAD_TEST"))}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "pytest", *args], cwd=suite.path, capture_output=True, text=True,
                          env=full_env, timeout=120)


LOGGING_TESTS = """
import json, os, time
import pytest

def log(name):
    with open("log.jsonl", "a") as f:
        f.write(json.dumps({"name": name, "worker": os.environ.get("PYTEST_XDIST_WORKER"),
                            "t": time.time()}) + "\\n")

@pytest.mark.parametrize("i", range(6))
def test_parallel(i):
    time.sleep(0.2)
    log(f"parallel{i}")

@pytest.mark.serial
def test_alone():
    log("serial")

@pytest.mark.serial
def test_alone_too():
    log("serial2")
"""


def _log(suite: pytest.Pytester) -> list[dict]:
    return [json.loads(line) for line in (suite.path / "log.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_serial_tests_run_after_the_parallel_phase_in_one_process(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_mixed=LOGGING_TESTS)
    run = _run(suite, "-n", "2")
    assert run.returncode == 0, run.stdout + run.stderr
    log = _log(suite)
    parallel = [e for e in log if e["name"].startswith("parallel")]
    serial = [e for e in log if e["name"].startswith("serial")]
    assert len(parallel) == 6 and {e["worker"] for e in parallel} <= {"gw0", "gw1"}
    assert [e["name"] for e in serial] == ["serial", "serial2"]  # each once, in one process outside xdist
    assert all(e["worker"] is None for e in serial)
    assert min(e["t"] for e in serial) >= max(e["t"] for e in parallel)
    assert "serial phase: 2 tests" in run.stdout


@pytest.mark.slow
def test_a_failing_serial_test_fails_the_command(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_fail="""
        import pytest

        def test_fine():
            pass

        @pytest.mark.serial
        def test_broken():
            assert False, "on purpose"
    """)
    run = _run(suite, "-n", "2")
    assert run.returncode == 1, run.stdout
    assert "on purpose" in run.stdout and "1 passed" in run.stdout


@pytest.mark.slow
def test_without_workers_the_serial_tests_run_in_their_place(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_mixed=LOGGING_TESTS)
    run = _run(suite, "-n", "0")
    assert run.returncode == 0, run.stdout + run.stderr
    assert len(_log(suite)) == 8 and "serial phase" not in run.stdout


def test_a_test_that_imports_locust_in_the_test_process_fails(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_patch="""
        def test_patches():
            from gevent import monkey
            monkey.patch_all()
    """)
    run = _run(suite, "-n", "0")
    assert run.returncode == 1, run.stdout
    assert "monkey-patched the test process with gevent" in run.stdout


SKIPPING = """
import pytest

@pytest.mark.needs("chromium")
def test_browser():
    pytest.skip("/usr/bin/chromium is missing")
"""


@pytest.mark.parametrize(("required", "outcome"), [("", "skipped"), ("kubectl", "skipped"),
                                                   ("chromium kubectl", "failed")])
def test_a_skip_of_what_ci_installed_is_a_failure(suite: pytest.Pytester, required: str, outcome: str) -> None:
    suite.makepyfile(test_needs=SKIPPING)
    run = _run(suite, "-n", "0", "-rA", env={"LLMLOAD_TEST_REQUIRE": required})
    assert f"1 {outcome}" in run.stdout, run.stdout
    if outcome == "failed":
        assert "LLMLOAD_TEST_REQUIRE says chromium is installed here: /usr/bin/chromium is missing" in run.stdout


def test_each_worker_gets_its_own_ports() -> None:
    """Two xdist workers draw 40 ports each: never the same one twice, never the other worker's, never one in
    the kernel's ephemeral range (where any bind(0) or outgoing connection could take it)."""
    code = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(TESTS)!r})
        from support import free_port
        print(json.dumps([free_port() for _ in range(40)]))
    """)
    drawn = {}
    for worker in ("gw0", "gw1"):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "PYTEST_XDIST_WORKER": worker})
        assert out.returncode == 0, out.stderr
        drawn[worker] = json.loads(out.stdout)
    low, _high = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    for ports in drawn.values():
        assert len(set(ports)) == len(ports) == 40 and max(ports) < low
    assert not set(drawn["gw0"]) & set(drawn["gw1"])


def test_no_two_test_modules_share_a_name() -> None:
    # tests/ has no packages: pytest imports every test module by its bare name, so a second
    # tests/*/test_x.py is an "import file mismatch" and its whole module is never run
    names: dict[str, list[str]] = {}
    for path in TESTS.rglob("test_*.py"):
        names.setdefault(path.name, []).append(str(path.relative_to(TESTS)))
    assert not {name: where for name, where in names.items() if len(where) > 1}
