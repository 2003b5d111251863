"""The first run of each way in works against a running ``llmload sim`` with no flags beyond the server:
the tokenizer comes from the simulator's ``/v1/models`` (it names the one it uses)."""

from __future__ import annotations

import re

import pytest

LOCUSTFILE = "locustfiles/sharegpt.py"


#: a quick simulator (the runs take no flags; the server may be fast)
FAST = ("--ttft-ms", "5", "--itl-ms", "1")


@pytest.mark.slow
def test_locust_with_only_host(child_runner, start_sim) -> None:
    sim = start_sim(*FAST)
    run = child_runner.locust("-f", LOCUSTFILE, "--host", sim.url, "--headless", "-u", "4", "-t", "10s",
                              timeout=120)
    assert run.returncode == 0, run.describe()
    m = re.search(r"^Successful requests:\s+(\d+)", run.stderr, re.M)
    assert m and int(m.group(1)) > 0, run.describe()
    assert "cannot load tokenizer" not in run.stderr


@pytest.mark.slow
def test_bench_with_only_base_url(child_runner, start_sim) -> None:
    sim = start_sim(*FAST)
    run = child_runner.bench("--base-url", sim.url, timeout=240)
    assert run.returncode == 0, run.describe()
    m = re.search(r"^Successful requests:\s+(\d+)", run.stdout, re.M)
    assert m and int(m.group(1)) > 0, run.describe()
    assert "Loading tokenizer 'builtin'" in run.stderr, run.describe()
