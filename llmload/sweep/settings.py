"""Sweeps over server settings (``--serve-cmd``, ``--serve-params``) and repeated sweeps (``--trials``,
``--resume``): for each setting of the grid, start the server with that setting, wait until it answers, run the
load sweep or SLO search the other flags ask for (one ``llmload sweep`` child process a trial), stop the
server, and keep everything in a folder of its own::

    OUTPUT/settings.json                       the settings, what became of each, the spread over trials
    OUTPUT/setting-01-max_num_seqs=64/         that setting's sweep.json, points and figures
                                    server.log   the server's output
                                    trial-2/     with --trials N > 1: one folder a trial

A setting's trials are finished when their ``sweep.json`` says so; ``--resume`` skips those. docs/sweep.md,
"Server settings".
"""

from __future__ import annotations

import argparse
import copy
import itertools
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from llmload.bench.console import log
from llmload.common.errors import ConfigError
from llmload.processes.children import wait_for
from llmload.sweep.serve import ServerError, ServerProcess
from llmload.sweep.spread import spread
from llmload.sweep.table import read_sweep

SETTINGS_KIND = "llmload-settings-sweep"
SETTINGS_FILE = "settings.json"
#: ``{name}`` in ``--serve-cmd``: a parameter of the grid
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
#: the flags this layer takes off a child sweep's command line: name -> how many values (``+``: one or more)
_OWN_FLAGS: dict[str, int | str] = {"--serve-cmd": 1, "--serve-params": "+", "--serve-ready-timeout": 1,
                                    "--serve-stop-timeout": 1, "--trials": 1, "--resume": 0, "--output": 1,
                                    "-o": 1, "--label": 1}
#: a child sweep's exit codes that mean it finished (3: it ran, and no load met the SLO)
_FINISHED = (0, 3)


@dataclass(frozen=True, slots=True)
class Setting:
    """One point of the grid: ``params`` fill ``--serve-cmd``'s placeholders."""

    index: int
    params: dict[str, str]

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.params.items()) or "default"

    @property
    def dirname(self) -> str:
        slug = "-".join(f"{k}={re.sub(r'[^A-Za-z0-9._-]+', '_', v)}" for k, v in self.params.items())
        return f"setting-{self.index:02d}" + (f"-{slug}" if slug else "")


def parse_grid(items: list[str] | None) -> list[dict[str, str]]:
    """``--serve-params a=1,2 b=x,y`` -> every combination, the first parameter varying slowest."""
    axes: dict[str, list[str]] = {}
    for item in items or []:
        name, sep, values = item.partition("=")
        name = name.strip()
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ConfigError(f"--serve-params: expected NAME=V1,V2,... with NAME a word, got {item!r}")
        if name in axes:
            raise ConfigError(f"--serve-params: {name} is given twice")
        parts = [v.strip() for v in values.split(",") if v.strip()]
        if not parts:
            raise ConfigError(f"--serve-params {name}: no values")
        axes[name] = parts
    return [dict(zip(axes, combo, strict=True)) for combo in itertools.product(*axes.values())] if axes else [{}]


def render(template: str, params: dict[str, str]) -> list[str]:
    """``--serve-cmd`` with every ``{name}`` filled in, split as a shell would (no shell runs it)."""
    import shlex

    try:
        words = shlex.split(template)
    except ValueError as exc:
        raise ConfigError(f"--serve-cmd: {exc}") from None
    if not words:
        raise ConfigError("--serve-cmd is empty")
    return [_PLACEHOLDER.sub(lambda m: params[m.group(1)], w) for w in words]


def check_template(template: str, names: set[str]) -> None:
    used = set(_PLACEHOLDER.findall(template))
    if missing := sorted(used - names):
        raise ConfigError(f"--serve-cmd uses {', '.join('{' + n + '}' for n in missing)}, which --serve-params "
                          "does not set")
    if unused := sorted(names - used):
        raise ConfigError(f"--serve-params {', '.join(unused)}: not used in --serve-cmd (write {{{unused[0]}}} "
                          "where its value goes)")


def child_argv(argv: list[str], output: Path, label: str) -> list[str]:
    """The sweep's own command line without this layer's flags, writing into ``output`` under ``label``."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        word = argv[i]
        name = word.split("=", 1)[0]
        if name in _OWN_FLAGS:
            arity = _OWN_FLAGS[name]
            i += 1
            if "=" in word or arity == 0:
                continue
            if arity == "+":
                while i < len(argv) and not argv[i].startswith("-"):
                    i += 1
            else:
                i += int(arity)
            continue
        out.append(word)
        i += 1
    return [sys.executable, "-m", "llmload.cli", "sweep", *out, "--output", str(output), "--label", label]


def trial_dir(setting_dir: Path, trial: int, trials: int) -> Path:
    return setting_dir if trials == 1 else setting_dir / f"trial-{trial}"


def finished(folder: Path) -> bool:
    """Whether ``folder`` holds a sweep that ran to its end (not interrupted)."""
    try:
        data = read_sweep(folder / "sweep.json")
    except (OSError, ValueError):
        return False
    return bool(data.get("finished", True)) and not data.get("interrupted")


def check(args: argparse.Namespace) -> list[Setting]:
    """Every usage error before anything starts: the grid, the template, the target, the sweep's own flags."""
    from llmload.bench.plan import base_url
    from llmload.sweep.plan import build_sweep_plan

    grid = parse_grid(args.serve_params)
    if args.serve_cmd is None:
        if args.serve_params:
            raise ConfigError("--serve-params fills in --serve-cmd: give the command that starts the server")
    else:
        check_template(args.serve_cmd, set(grid[0]))
        render(args.serve_cmd, grid[0])
        if base_url(args) is None:
            raise ConfigError("--serve-cmd needs --base-url (or --host/--port): where the server it starts listens")
    build_sweep_plan(copy.deepcopy(args))  # the load sweep's flags, as each child will check them
    return [Setting(i, params) for i, params in enumerate(grid, 1)]


class _Signals:
    """SIGINT/SIGTERM while settings run: remembered, and passed on once to the child sweep that runs."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.child: subprocess.Popen | None = None
        self._old: dict[int, Any] = {}

    def __enter__(self) -> _Signals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)

    def _on_signal(self, signum: int, _frame: Any) -> None:
        first = self.signum is None
        self.signum = self.signum or signum
        if first and self.child is not None and self.child.poll() is None:
            self.child.send_signal(signum)


def run_settings(args: argparse.Namespace) -> int:
    settings = check(args)
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    argv = list(getattr(args, "command_argv", None) or [])
    entries: list[dict[str, Any]] = []
    with _Signals() as signals:
        code = 0
        for setting in settings:
            if signals.signum is not None:
                break
            entry, code = _run_setting(args, setting, output, argv, signals, total=len(settings))
            entries.append(entry)
            _write(args, output, entries, settings)
            if code:
                break
        _write(args, output, entries, settings, done=code == 0 and signals.signum is None)
    print(format_settings(entries), flush=True)
    if signals.signum is not None:
        from llmload.processes.interrupts import exit_code

        log(f"Interrupted: {output / SETTINGS_FILE} holds the settings that finished")
        return exit_code(signals.signum)
    if code:
        return code
    if args.slo and not any(_met(e) for e in entries):
        return 3
    return 0


def _run_setting(args: argparse.Namespace, setting: Setting, output: Path, argv: list[str], signals: _Signals,
                 total: int) -> tuple[dict[str, Any], int]:
    """One setting: its server up, its trials, its server down. Returns its entry and an exit code (0: go on)."""
    folder = output / setting.dirname if args.serve_cmd else output
    trials = args.trials
    entry: dict[str, Any] = {"index": setting.index, "params": setting.params, "label": setting.label,
                             "dir": folder.name if folder != output else ".", "status": "running", "trials": []}
    todo = [k for k in range(1, trials + 1) if not (args.resume and finished(trial_dir(folder, k, trials)))]
    done_before = [k for k in range(1, trials + 1) if k not in todo]
    entry["trials"] = [_trial_entry(folder, k, trials, 0, resumed=True) for k in done_before]
    if not todo:
        log(f"Setting {setting.index}/{total} ({setting.label}): finished before, skipped (--resume)")
        entry["status"] = "finished"
        return _with_spread(entry, folder, trials), 0
    server = None
    if args.serve_cmd:
        server = ServerProcess(render(args.serve_cmd, setting.params), folder / "server.log")
        entry["server_log"] = str((folder / "server.log").relative_to(output))
        log(f"Setting {setting.index}/{total} ({setting.label}): starting the server: {' '.join(server.argv)}")
    try:
        if server is not None:
            try:
                server.start()  # a command that cannot start is the setting's error too
                entry["server_pid"] = server.pid
                took = server.wait_ready(_url(args), args.serve_ready_timeout, lambda: signals.signum is not None)
            except ServerError as exc:
                log(f"error: setting {setting.index} ({setting.label}): {exc}")
                entry["status"], entry["error"] = "server failed", str(exc)
                return entry, 1
            if signals.signum is not None:
                entry["status"] = "interrupted"
                return entry, 0
            log(f"Setting {setting.index}/{total} ({setting.label}): the server answered after {took:.1f} s")
        for k in todo:
            label = f"{args.label + ' ' if args.label else ''}{setting.label}" + (f" #{k}" if trials > 1 else "")
            where = trial_dir(folder, k, trials)
            if trials > 1:
                log(f"Setting {setting.index}/{total} ({setting.label}): trial {k}/{trials}")
            signals.child = subprocess.Popen(child_argv(argv, where, label), start_new_session=True)
            child_code = wait_for(signals.child)
            signals.child = None
            entry["trials"].append(_trial_entry(folder, k, trials, child_code))
            if signals.signum is not None or child_code in (130, 143):
                entry["status"] = "interrupted"
                return _with_spread(entry, folder, trials), 0
            if child_code not in _FINISHED:
                log(f"error: setting {setting.index} ({setting.label}): its sweep exited with code {child_code}")
                entry["status"] = "sweep failed"
                return _with_spread(entry, folder, trials), 1
        entry["status"] = "finished"
        return _with_spread(entry, folder, trials), 0
    finally:
        if server is not None:
            server.stop(args.serve_stop_timeout)
            log(f"Setting {setting.index}/{total} ({setting.label}): the server stopped")


def _url(args: argparse.Namespace) -> str:
    from llmload.bench.plan import base_url

    url = base_url(args)
    assert url is not None
    return url


def _trial_entry(folder: Path, k: int, trials: int, code: int, resumed: bool = False) -> dict[str, Any]:
    where = trial_dir(folder, k, trials)
    try:
        answer = read_sweep(where / "sweep.json").get("answer")
    except (OSError, ValueError):
        answer = None
    return {"trial": k, "dir": str(where.relative_to(folder)) if where != folder else ".",
            "exit_code": code, "resumed": resumed, "finished": finished(where), "answer": answer}


def _with_spread(entry: dict[str, Any], folder: Path, trials: int) -> dict[str, Any]:
    sweeps = []
    for t in sorted(entry["trials"], key=lambda t: t["trial"]):
        try:
            sweeps.append(read_sweep(trial_dir(folder, t["trial"], trials) / "sweep.json"))
        except (OSError, ValueError):
            continue
    entry["trials"].sort(key=lambda t: t["trial"])
    entry["spread"] = spread(sweeps) if sweeps else None
    return entry


def _met(entry: dict[str, Any]) -> bool:
    return any((t.get("answer") or {}).get("met") for t in entry["trials"])


def _write(args: argparse.Namespace, output: Path, entries: list[dict[str, Any]], settings: list[Setting],
           done: bool = False) -> None:
    from llmload.sweep.table import write_sweep

    data = {"kind": SETTINGS_KIND, "version": 1, "date": datetime.now().strftime("%Y%m%d-%H%M%S"),
            "serve_cmd": args.serve_cmd, "grid": [s.params for s in settings], "trials": args.trials,
            "base_url": _url(args) if args.serve_cmd else None, "finished": done, "settings": entries}
    write_sweep(output / SETTINGS_FILE, data)


def is_settings(data: Any) -> bool:
    return isinstance(data, dict) and data.get("kind") == SETTINGS_KIND


def format_settings(entries: list[dict[str, Any]]) -> str:
    """One line per setting: what became of it, its answer (the range over trials) and its best throughput."""
    lines = ["=" * 20 + " Settings Result " + "=" * 20,
             f"{'#':>3} {'setting':<30} {'status':<14} {'trials':>6} {'answer':>16} {'best out tok/s':>15}"]
    for e in entries:
        s = e.get("spread") or {}
        answer = s.get("answer") or {}
        shown = "-" if not answer.get("met") else (
            f"{answer['min']:g}" if answer["min"] == answer["max"] else f"{answer['min']:g}..{answer['max']:g}")
        best = s.get("best_output_throughput")
        lines.append(f"{e['index']:>3} {e['label'][:30]:<30} {e['status']:<14} {len(e['trials']):>6} {shown:>16} "
                     f"{best if best is None else round(best, 1)!s:>15}")
    return "\n".join(lines)
