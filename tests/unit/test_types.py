"""The run core, the client side, the records and both cluster sides type-check: mypy on the files
``[tool.mypy]`` in pyproject.toml names (its cache in the repository's .mypy_cache, so a second run is quick)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("mypy", reason="mypy is in the test extra: pip install -e '.[test]'")


@pytest.mark.slow
def test_mypy_is_clean_on_the_checked_packages() -> None:
    proc = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary"], cwd=ROOT, capture_output=True,
                          text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_the_checked_files_exist_and_cover_the_core() -> None:
    files = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["files"]
    assert all((ROOT / f).exists() for f in files), files
    assert {"llmload/core", "llmload/distributed", "llmload/plugin"} <= set(files)
