"""``llmload sim`` names its tokenizer and its timing profile on its ``/v1/models`` card; a run's target carries
both (a sweep labels its results with the profile the simulator says it runs)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from argparse import Namespace
from pathlib import Path

import pytest

from llmload.core.run import Target

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def sim_url(tmp_path: Path):
    err = tmp_path / "sim.stdout"
    with open(err, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "llmload.cli", "sim", "--host", "127.0.0.1", "--port", "0",
                                 "--profile", "tiny", "--tokenizer", "builtin"], stdout=out,
                                stderr=subprocess.STDOUT, cwd=REPO)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            m = re.search(r"listening on (http://127\.0\.0\.1:\d+)\b", err.read_text())
            if m:
                yield m.group(1)
                break
            assert proc.poll() is None, err.read_text()
            time.sleep(0.05)
        else:
            pytest.fail(f"the simulator did not start\n{err.read_text()}")
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def test_the_target_knows_the_simulator_s_profile(sim_url: str) -> None:
    options = Namespace(model="", tokenizer="", read_timeout=10.0)
    target = Target.resolve(options, sim_url, None)
    assert target.simulator and target.sim_profile == "tiny" and target.tokenizer_id == "builtin", target
    # given a model and a tokenizer, only the simulator started for the run is asked
    given = Namespace(model="m", tokenizer="builtin", read_timeout=10.0)
    assert Target.resolve(given, sim_url, None).sim_profile is None
    assert Target.resolve(given, sim_url, None, built_in_sim=True).sim_profile == "tiny"


def test_a_server_that_is_not_there_is_one_error_unless_lenient() -> None:
    from llmload.common.errors import EndpointError

    options = Namespace(model="", tokenizer="", read_timeout=2.0)
    with pytest.raises(EndpointError):
        Target.resolve(options, "http://127.0.0.1:9", None)
    lenient = Target.resolve(Namespace(model="given", tokenizer="", read_timeout=2.0), "http://127.0.0.1:9", None,
                             lenient=True)
    assert (lenient.model, lenient.tokenizer_id, lenient.simulator) == ("given", "given", False)
