"""A non-editable install carries what ``llmload bench`` needs by default (issue 9, item 13).

Builds a wheel of this checkout, installs it into a fresh virtual environment (system site-packages
visible, so the dependencies come from there and nothing is downloaded) and runs the default
``llmload bench`` from a directory outside the checkout: the bundled ShareGPT sample and the builtin
tokenizer must come from the installed package, not from the source tree.
"""

from __future__ import annotations

import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest
from support import offline_env

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SAMPLE = "llmload/data/sharegpt_sample.json.gz"
TOKENIZER = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
#: never copied into the build tree: VCS data, caches, earlier build output
_COPY_IGNORE = shutil.ignore_patterns(
    ".git", "__pycache__", "*.egg-info", "build", "dist", ".venv", ".pytest_cache", ".ruff_cache", ".mypy_cache",
    ".hypothesis", "results", "*.so"
)


def _check(argv: list[str], *, cwd: Path, timeout: float = 120.0, env: dict[str, str] | None = None,
           both: bool = False) -> str:
    """Run ``argv`` to completion (outside the checkout, offline, no PYTHONPATH, ``env`` added); its stdout (and
    stderr after it, with ``both``), or fail."""
    run_env = offline_env(env)
    run_env.pop("PYTHONPATH", None)
    run_env["PIP_NO_INDEX"] = "1"
    proc = subprocess.run(argv, cwd=cwd, env=run_env, capture_output=True, text=True, errors="replace",
                          timeout=timeout, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"{argv} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout + proc.stderr if both else proc.stdout


def _installed(tmp: Path, build_env: dict[str, str] | None = None) -> Path:
    """A fresh virtual environment with the checkout's wheel (built with ``build_env`` added) installed
    (``--no-deps``); its directory."""
    try:  # what --no-build-isolation needs: setuptools >= 70.1 has bdist_wheel built in
        from setuptools.command.bdist_wheel import bdist_wheel  # noqa: F401
    except ImportError:
        pytest.fail("building the wheel offline needs setuptools>=70.1: pip install -e '.[test]'")
    # Build from a copy: an in-tree build would leave build/ and *.egg-info in the shared checkout.
    src = tmp / "src"
    shutil.copytree(REPO, src, ignore=_COPY_IGNORE)
    wheels = tmp / "wheels"
    built = _check([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-v", "-w",
                    str(wheels), str(src)], cwd=tmp, env=build_env, both=True)
    (tmp / "build.log").write_text(built)
    (wheel,) = wheels.glob("llmload-*.whl")
    env_dir = tmp / "venv"
    # No pip of its own: the system's pip (visible through --system-site-packages) installs into it.
    _check([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(env_dir)], cwd=tmp)
    if sys.prefix != sys.base_prefix:
        # Run from inside a virtual environment: its packages (locust, transformers, ...) are not the
        # base interpreter's system site-packages, so make them visible too, after the new venv's own.
        (py_site,) = (env_dir / "lib").glob("python3*/site-packages")
        (py_site / "_outer_env.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    python = env_dir / "bin" / "python"
    _check([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)], cwd=tmp)
    shutil.rmtree(src)
    return env_dir


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The checkout's wheel, built with the machine's compiler, installed in a fresh virtual environment."""
    return _installed(tmp_path_factory.mktemp("packaging"))


@pytest.fixture(scope="module")
def venv_without_compiler(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built where the C compiler fails (``CC`` is a compiler that exits 1), installed the same way."""
    tmp = tmp_path_factory.mktemp("no-compiler")
    broken = tmp / "broken-cc"
    broken.write_text("#!/bin/sh\necho 'broken-cc: no compiler here' >&2\nexit 1\n")
    broken.chmod(0o755)
    return _installed(tmp, {"CC": str(broken), "LDSHARED": f"{broken} -shared"})


def _outside(tmp_path: Path) -> Path:
    assert REPO not in tmp_path.resolve().parents
    return tmp_path


def test_wheel_carries_sample_and_tokenizer(venv: Path, tmp_path: Path) -> None:
    out = _check([str(venv / "bin" / "python"), "-c",
                  "import importlib.metadata as m; print('\\n'.join(str(f) for f in m.files('llmload')))"],
                 cwd=_outside(tmp_path))
    files = set(out.split())
    assert SAMPLE in files, f"the ShareGPT sample is not installed: {sorted(f for f in files if 'data' in f)}"
    for name in TOKENIZER:
        assert f"llmload/data/tokenizer/{name}" in files
    assert not any(f.startswith("datasets/") for f in files)


def test_import_comes_from_the_venv(venv: Path, tmp_path: Path) -> None:
    code = ("import llmload, llmload.datasets.sharegpt as s, llmload.tokenizer as t; "
            "print(llmload.__file__); print(s.default_sharegpt_path()); print(t.builtin_tokenizer_dir())")
    lines = _check([str(venv / "bin" / "python"), "-c", code], cwd=_outside(tmp_path)).split()
    for line in lines:
        path = Path(line).resolve()
        assert venv.resolve() in path.parents, f"{path} is not inside the virtual environment {venv}"
        assert REPO not in path.parents, f"{path} comes from the checkout"
        assert path.exists()


def test_default_bench_runs_outside_the_checkout(venv: Path, tmp_path: Path) -> None:
    """The default dataset (the bundled sample) and tokenizer, the auto-started simulator: 5 requests."""
    here = _outside(tmp_path)
    out = _check([str(venv / "bin" / "llmload"), "bench", "--num-prompts", "5", "--sim-args", "--profile tiny"],
                 cwd=here, timeout=120)
    line = next((x for x in out.splitlines() if x.startswith("Successful requests:")), None)
    assert line is not None, out
    assert line.split()[-1] == "5", line


def test_the_wheel_carries_the_compiled_reader(venv: Path, tmp_path: Path) -> None:
    out = _check([str(venv / "bin" / "python"), "-c", "from llmload.client.transport import readers; "
                  "print(readers.available(), readers.chosen().name)"], cwd=_outside(tmp_path))
    assert out.split("\n")[0] == "('compiled', 'python') compiled", out


def test_without_a_compiler_the_install_succeeds_and_reads_with_python(venv_without_compiler: Path,
                                                                       tmp_path: Path) -> None:
    """CC fails: the build says why and goes on; the installed llmload reads with its Python twin, the run says
    so once, and the result names the reader that ran."""
    log = (venv_without_compiler.parent / "build.log").read_text()
    assert "broken-cc" in log and "the compiled reader was not built" in log, log[-3000:]
    here = _outside(tmp_path)
    python = str(venv_without_compiler / "bin" / "python")
    out = _check([python, "-c", "from llmload.client.transport import readers; print(readers.available())"], cwd=here)
    assert out.strip() == "('python',)"
    env = offline_env()
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([str(venv_without_compiler / "bin" / "llmload"), "bench", "--num-prompts", "5",
                           "--sim-args", "--profile tiny", "--save-result", "--result-dir", str(here),
                           "--result-filename", "r.json"], cwd=here, env=env, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    notes = [line for line in proc.stderr.splitlines() if "the compiled reader was not built" in line]
    assert len(notes) == 1, proc.stderr[-3000:]
    assert "Client reader:                           python" in proc.stdout
    import json

    result = json.loads((here / "r.json").read_text())
    assert result["client"] == {"reader": "python"} and result["client_health"]["reader"] == "python"
    # asked for, the compiled reader that was not built is a one-line error, before anything starts
    env["LLMLOAD_READER"] = "compiled"
    refused = subprocess.run([str(venv_without_compiler / "bin" / "llmload"), "bench", "--num-prompts", "2",
                              "--sim-args", "--profile tiny"], cwd=here, env=env, capture_output=True, text=True,
                             timeout=120, stdin=subprocess.DEVNULL)
    assert refused.returncode == 2, (refused.returncode, refused.stderr[-2000:])
    assert len(refused.stderr.strip().splitlines()) == 1 and "LLMLOAD_READER=compiled" in refused.stderr


def _dockerfile() -> tuple[dict[str, str], list[str], str]:
    """k8s/Dockerfile's final stage: its ENV, the RUN commands after USER (the image's own check) and USER."""
    text = (REPO / "k8s" / "Dockerfile").read_text().replace("\\\n", " ")
    final = text.rsplit("\nFROM ", 1)[1]
    env: dict[str, str] = {}
    checks: list[str] = []
    user = ""
    for line in final.splitlines():
        word, _, rest = line.strip().partition(" ")
        if word == "ENV":
            env.update(item.split("=", 1) for item in rest.split())
        elif word == "USER":
            user = rest.strip()
        elif word == "RUN" and user:
            checks.append(rest.strip())
    return env, checks, user


def test_the_image_recipe_installs_the_wheel_and_runs_as_non_root() -> None:
    text = (REPO / "k8s" / "Dockerfile").read_text()
    _env, checks, user = _dockerfile()
    assert user and not user.startswith(("0", "root")), "the image must not run as root"
    assert "pip install --no-cache-dir /wheels/*.whl" in text and "pip wheel" in text
    assert "COPY locustfiles /app/locustfiles" in text
    assert checks and "llmload bench --num-prompts 5" in checks[-1]


def test_the_image_check_passes_in_an_installed_wheel(venv: Path, tmp_path: Path) -> None:
    """The Dockerfile's own check (run at the end of ``docker build``), run here in the installed wheel with
    the image's environment: /tmp remapped to a temporary directory, the venv's bin first on PATH."""
    import os

    env_vars, checks, _user = _dockerfile()
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = offline_env({k: v.replace("/tmp", str(scratch)) for k, v in env_vars.items()})
    env.pop("PYTHONPATH", None)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    for command in checks:
        command = command.replace("/tmp/", f"{scratch}/")
        proc = subprocess.run(["sh", "-c", command], cwd=_outside(tmp_path), env=env, capture_output=True,
                              text=True, timeout=180)
        assert proc.returncode == 0, f"{command}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
