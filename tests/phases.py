"""The suite's two phases: everything in parallel (pytest-xdist), then the ``serial`` tests alone.

``python -m pytest`` runs both (``-n auto`` is in ``pyproject.toml``'s addopts). The xdist workers leave out the
tests marked ``serial`` (they measure time or need a quiet machine) and tell the controller which; once the
parallel phase has printed its summary, the controller runs exactly those in one child ``pytest -n 0`` with the
same options, and the command exits with the worse of the two phases' statuses. ``-n 0`` (or ``-p no:xdist``)
runs everything in one process, each serial test in its place.

Most of the suite waits on child processes and real-time schedules, not on the CPU, so ``-n auto`` starts more
workers than there are cores (:func:`pytest_xdist_auto_num_workers`). Tests of one module that share a
module-scoped fixture (a simulator, a run whose output several tests read) go to one worker together, so the
fixture is set up once (``--dist loadgroup``, :func:`group_shared_modules`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Generator
from pathlib import Path

import pytest

SERIAL = "serial"
SLOW = "slow"
#: the serial phase's child reads the node ids it runs from the file this option names
ONLY_OPTION = "--serial-phase-ids"
#: key of ``config.workeroutput``: the serial node ids a worker left out
_OUTPUT_KEY = "llmload_serial_ids"
#: ``config.stash`` key: the serial node ids the workers left out, in the controller
_LEFT_OUT = pytest.StashKey[set]()


def worker_id() -> str | None:
    """``gw0``, ``gw1``, ... in an xdist worker; None in the controller or in a run without xdist."""
    return os.environ.get("PYTEST_XDIST_WORKER")


def worker_index() -> int:
    """0 outside xdist workers, ``N + 1`` in worker ``gwN``."""
    name = worker_id()
    return int(name[2:]) + 1 if name and name[2:].isdigit() else 0


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(ONLY_OPTION, default=None, help="(internal: the serial phase) run only the node ids listed "
                                                     "in this file")


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_LEFT_OUT] = set()
    config.pluginmanager.register(SlowFirst(), "llmload-slow-first")
    if worker_id() is None:
        cache_bytecode_outside_the_tree()


def cache_bytecode_outside_the_tree() -> None:
    """Where ``PYTHONDONTWRITEBYTECODE`` is set (it is on this project's machines), every xdist worker would
    rewrite and compile every test module again (~3 s each) and every child process compile llmload: the
    workers and children this process starts keep their bytecode in a cache outside the source tree instead."""
    if os.environ.get("PYTHONDONTWRITEBYTECODE") and not os.environ.get("PYTHONPYCACHEPREFIX"):
        del os.environ["PYTHONDONTWRITEBYTECODE"]
        os.environ["PYTHONPYCACHEPREFIX"] = str(Path(tempfile.gettempdir()) / f"llmload-pycache-{os.getuid()}")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """Workers for ``-n auto``: three per core, at least 4 (the tests mostly wait); ``PYTEST_XDIST_AUTO_NUM_WORKERS``
    overrides it."""
    given = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS", "").strip()
    if given.isdigit():
        return int(given)
    return max(4, 3 * (os.cpu_count() or 1))


def _module_scoped(item: pytest.Item) -> bool:
    """Whether the test uses a fixture set up once per module (or class) of its own."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    for name in info.names_closure:
        defs = info.name2fixturedefs.get(name) or ()
        if any(d.scope in ("module", "class", "package") for d in defs):
            return True
    return False


def group_shared_modules(items: list[pytest.Item]) -> None:
    """Put the tests of a module that share a module-scoped fixture in one xdist group (one worker)."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None and _module_scoped(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))


def _slow_first(items: list[pytest.Item]) -> None:
    """Slow tests start first (a stable sort, module blocks kept whole), so none is left running alone at the end."""
    first_slow: dict[str, int] = {}
    for index, item in enumerate(items):
        module = item.nodeid.split("::", 1)[0]
        if item.get_closest_marker(SLOW) is not None:
            first_slow.setdefault(module, index)
    order = {item.nodeid: (0 if item.nodeid.split("::", 1)[0] in first_slow else 1) for item in items}
    items.sort(key=lambda item: order[item.nodeid])


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Select this phase's tests and group them; first, before xdist appends each group to its node ids."""
    only = config.getoption(ONLY_OPTION)
    if only:
        wanted = set(Path(only).read_text().split())
        keep = [item for item in items if item.nodeid in wanted]
    elif worker_id() is not None:
        keep = [item for item in items if item.get_closest_marker(SERIAL) is None]
        config.workeroutput[_OUTPUT_KEY] = [item.nodeid for item in items if item.get_closest_marker(SERIAL)]
    else:
        keep = items
    if len(keep) < len(items):
        kept = {id(item) for item in keep}
        config.hook.pytest_deselected(items=[item for item in items if id(item) not in kept])
        items[:] = keep
    group_shared_modules(items)


class SlowFirst:
    """The order the tests start in, decided last (after pytest's own ordering by fixture scope)."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        _slow_first(items)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """(controller) A worker finished: remember the serial tests it left out."""
    output = getattr(node, "workeroutput", None) or {}
    node.config.stash[_LEFT_OUT].update(output.get(_OUTPUT_KEY, ()))  # type: ignore[attr-defined]


def _combined(first: int, second: int) -> int:
    """The exit status of both phases: a failure of either, else success when either ran tests."""
    no_tests = pytest.ExitCode.NO_TESTS_COLLECTED
    failures = [code for code in (first, second) if code not in (0, no_tests)]
    if failures:
        return max(failures)
    return no_tests if first == second == no_tests else 0


def _serial_phase(config: pytest.Config, ids: list[str]) -> int:
    """Run ``ids`` in one child ``pytest -n 0`` with this run's own arguments; its exit status."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_sep("=", f"serial phase: {len(ids)} tests that measure time or need a quiet machine, "
                                f"one at a time")
    with tempfile.NamedTemporaryFile("w", suffix=".txt", prefix="serial-ids-", delete=False) as f:
        f.write("\n".join(ids) + "\n")
    argv = [sys.executable, "-m", "pytest", *config.invocation_params.args, "-n", "0", f"{ONLY_OPTION}={f.name}",
            f"--rootdir={config.rootpath}"]
    if not config.option.file_or_dir:  # no paths given: collect only the serial tests' files, not the suite
        argv += sorted({str(config.rootpath / nodeid.split("::", 1)[0]) for nodeid in ids})
    if config.inipath is not None:
        argv.append(f"--config-file={config.inipath}")
    xml = getattr(config.option, "xmlpath", None)
    if xml:
        argv.append(f"--junitxml={Path(xml).with_suffix('')}.serial.xml")
    try:
        return subprocess.call(argv, cwd=config.invocation_params.dir)
    finally:
        os.unlink(f.name)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> Generator[None, None, None]:
    """(controller) After the parallel phase's summary: the serial phase, unless the run was interrupted or is
    stopping at its first failure."""
    result = yield
    config = session.config
    ids = sorted(config.stash[_LEFT_OUT])
    stop = session.shouldstop or (config.getoption("exitfirst", False) and session.testsfailed)
    if ids and worker_id() is None and session.exitstatus != pytest.ExitCode.INTERRUPTED and not stop:
        session.exitstatus = _combined(session.exitstatus, _serial_phase(config, ids))
    return result
