"""The seed study as sweeps (docs/sweep-study.md): the built-in simulator's three timing profiles
(``l40-qwen3-8b``, vLLM-like; ``l40-qwen3-8b-stall``, a new request's 2nd token waits for the batch, as MAX and
SGLang did in the study; ``h100-llama-8b``, a ~2.5x faster GPU), each swept with ShareGPT prompts instead of
measured at one load. Per profile, two ``llmload sweep`` runs against its own simulator:

- ``--auto N``: the unlimited-rate ceiling, then N open-loop rates up to it, each judged against the SLO
  (the curves);
- ``--slo ttft:T,tpot:P --goodput-target 0.95``: the search for the highest request rate at which 95% of the
  requests meet both (the answer, with its bracket);

then ``llmload compare`` of the three auto sweeps and of the three searches (overlaid figures, answers side by
side). SIMULATED: every number comes from ``llmload sim``'s step-time model, not from a real engine or GPU.
Not a test: the timings, and so the answers, depend on the machine (docs/sweep-study.md: on 2 shared cores the
client limits the h100 profile's points).

    python benchmarks/sweep_study.py                      # the full study, ~19 min on 2 cores
    python benchmarks/sweep_study.py --quick              # a smoke version, ~2 min (docs/figures untouched)
    python benchmarks/sweep_study.py --compare-only       # redraw the comparisons from the kept sweep.json files

Each sweep runs in a scratch directory (``--work-dir``, default a temporary one); only the small parts are kept
in ``--output`` (default benchmarks/results/sweep_study): ``<profile>-auto/sweep.json``,
``<profile>-search/sweep.json``, ``compare-auto/`` and ``compare-search/`` (compare.md, compare.csv; with
``--quick`` also the overlaid PNGs) and ``study.json`` (the commands, their exit codes and wall times). The per-point result JSONs, request records and
scraped server metrics stay in the scratch directory (deleted with it unless ``--work-dir`` is given). The full
study also copies the overlays to docs/figures/sweep-study-{latency,throughput}.png and
docs/figures/sweep-study-search-{latency,throughput}.png.

Ctrl-C or SIGTERM stops the sweep in progress (SIGTERM to its PID, which keeps the points it finished and stops
its simulator; SIGKILL to its process group if it has not ended 30 s later) and then the script.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results" / "sweep_study"
FIGURES = REPO / "docs" / "figures"
#: profile, and what it stands in for in the seed study
PROFILES = {
    "l40-qwen3-8b": "vLLM-like (chunked prefill, no stall)",
    "l40-qwen3-8b-stall": "MAX/SGLang-like (a new request's 2nd token waits for the batch)",
    "h100-llama-8b": "a faster GPU (~2.5x the L40 profile)",
}
#: TTFT 1 s: the seed study's burst (everything at once) breaks it on the L40 profiles, no open-loop rate does;
#: TPOT 45 ms: where the L40 profiles' batch growth makes TPOT cross within the search's range (docs/sweep-study.md)
DEFAULT_SLO = "ttft:1000,tpot:45"
#: (sweep figure, name of its copy in docs/figures) per comparison
DOC_FIGURES = {
    "auto": {"sweep_latency.png": "sweep-study-latency.png", "sweep_throughput.png": "sweep-study-throughput.png"},
    "search": {"sweep_latency.png": "sweep-study-search-latency.png",
               "sweep_throughput.png": "sweep-study-search-throughput.png"},
}
#: seconds a stopped sweep gets to write sweep.json and stop its simulator before its process group is killed
STOP_GRACE_S = 30.0


class Stopped(Exception):
    """SIGINT or SIGTERM reached the script."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_stopped(signum: int, _frame: object) -> None:
    raise Stopped(signum)


def run_child(cmd: list[str], log_path: Path) -> tuple[int, float]:
    """Run one llmload command in its own session (a terminal's Ctrl-C reaches only this script, which forwards
    it); its output goes to ``log_path``. Returns (exit code, wall seconds)."""
    started = time.monotonic()
    with log_path.open("w") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait()
        except Stopped:
            stop_child(proc)
            raise
    return rc, time.monotonic() - started


def stop_child(proc: subprocess.Popen) -> None:
    """SIGTERM to the child's PID (llmload stops the point, writes sweep.json and stops its simulator); SIGKILL to
    its process group (its simulator included) if it is still there after :data:`STOP_GRACE_S`."""
    if proc.poll() is not None:
        return
    print(f"stopping PID {proc.pid} (SIGTERM)", flush=True)
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        print(f"PID {proc.pid} still running after {STOP_GRACE_S:g} s: SIGKILL to its process group", flush=True)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def llmload(*words: str) -> list[str]:
    return [sys.executable, "-m", "llmload.cli", *words]


def sweep_command(kind: str, profile: str, args: argparse.Namespace, out: Path) -> list[str]:
    """``llmload sweep`` for one profile: ``--auto N`` (judged against the SLO) or the SLO search."""
    loads = ["--auto", str(args.auto)] if kind == "auto" else ["--max-points", str(args.max_points)]
    return llmload("sweep", *loads, "--slo", args.slo, "--goodput-target", str(args.goodput_target),
                   "--precision", args.precision, "--sim-args", f"--profile {profile}",
                   "--num-prompts", str(args.num_prompts), "--seed", str(args.seed),
                   *(["--output-len", str(args.output_len)] if args.output_len else []),
                   "--output", str(out), "--disable-tqdm")


def rel(path: Path, work: Path) -> str:
    """A path as saved in study.json and compare.md: relative to the repository, or under ``WORK/`` (the scratch
    directory, gone after the run), never this machine's absolute paths."""
    path = path.resolve()
    for base, shown_as in ((work.resolve(), "WORK"), (REPO, "")):
        if path.is_relative_to(base):
            return str(Path(shown_as) / path.relative_to(base)) if shown_as else str(path.relative_to(base))
    return str(path)


def shown(cmd: list[str], work: Path) -> str:
    """The command as a reader types it (``llmload ...``), shell-quoted, with :func:`rel` paths."""
    import shlex

    words = cmd[3:] if cmd[1:3] == ["-m", "llmload.cli"] else cmd
    words = [rel(Path(w), work) if w.startswith("/") else w for w in words]
    return "llmload " + " ".join(shlex.quote(w) for w in words)


def keep(src: Path, dst: Path, names: list[str]) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for name in names:
        if (src / name).is_file():
            shutil.copyfile(src / name, dst / name)


def summary(sweep: Path) -> str:
    data = json.loads((sweep / "sweep.json").read_text())
    answer = data.get("answer") or {}
    ceiling = data.get("ceiling")
    limited = [r["index"] for r in data["points"] if r.get("client_limited")]
    text = f"ceiling {ceiling:.3g} req/s" if ceiling else "no ceiling"
    if answer:
        text += f"; answer {answer.get('value')} (bracket {answer.get('lower')}..{answer.get('upper')}, " \
                f"limited by {answer.get('limited_by')})"
    if limited:
        text += f"; client-limited points: {limited}"
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", type=Path, default=RESULTS, help="where the kept results go (default: %(default)s)")
    parser.add_argument("--work-dir", type=Path,
                        help="scratch directory for the sweeps' full outputs (default: a temporary one, deleted)")
    parser.add_argument("--num-prompts", type=int, default=200, help="ShareGPT prompts per point (default: 200)")
    parser.add_argument("--auto", type=int, default=4, help="open-loop rates of the auto sweep (default: 4)")
    parser.add_argument("--max-points", type=int, default=8, help="most points of a search (default: 8)")
    parser.add_argument("--slo", default=DEFAULT_SLO, help="the search's SLO (default: %(default)s)")
    parser.add_argument("--goodput-target", type=float, default=0.95, help="(default: %(default)s)")
    parser.add_argument("--precision", default="10%", help="the search's precision (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=1, help="(default: %(default)s)")
    parser.add_argument("--output-len", type=int,
                        help="fix every output length (default: the dataset's; --quick: 64)")
    parser.add_argument("--profiles", default=",".join(PROFILES),
                        help="comma-separated simulator profiles (default: all three)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke version: 40 prompts of 64 output tokens, --auto 2, --max-points 3; "
                             "docs/figures left alone "
                             "(default output: benchmarks/results/sweep_study-quick)")
    parser.add_argument("--compare-only", action="store_true",
                        help="run no sweep: compare the sweep.json files already in --output again (figures, "
                             "compare.md); study.json is left as it is")
    args = parser.parse_args()
    if args.quick:
        args.num_prompts, args.auto, args.max_points = 40, 2, 3
        args.output_len = args.output_len or 64
        if args.output == RESULTS:
            args.output = RESULTS.with_name("sweep_study-quick")
    profiles = [p.strip() for p in args.profiles.split(",") if p.strip()]
    unknown = [p for p in profiles if p not in PROFILES]
    if unknown:
        parser.error(f"unknown profile(s) {unknown}; choose from {list(PROFILES)}")
    signal.signal(signal.SIGTERM, _raise_stopped)
    signal.signal(signal.SIGINT, _raise_stopped)

    scratch = tempfile.TemporaryDirectory(prefix="sweep_study-") if args.work_dir is None else None
    work = Path(scratch.name) if scratch else args.work_dir
    work.mkdir(parents=True, exist_ok=True)
    args.output.mkdir(parents=True, exist_ok=True)
    study: dict = {"simulated": True, "settings": {k: rel(v, work) if isinstance(v, Path) else v
                                                    for k, v in vars(args).items()},
                   "steps": []}
    started = time.monotonic()
    failed = False
    try:
        for profile in [] if args.compare_only else profiles:
            for kind in ("auto", "search"):
                name = f"{profile}-{kind}"
                cmd = sweep_command(kind, profile, args, work / name)
                print(f"[{time.monotonic() - started:6.0f} s] {shown(cmd, work)}", flush=True)
                rc, wall = run_child(cmd, work / f"{name}.log")
                step = {"name": name, "command": shown(cmd, work), "exit_code": rc, "wall_s": round(wall, 1)}
                study["steps"].append(step)
                if (work / name / "sweep.json").is_file():
                    keep(work / name, args.output / name, ["sweep.json"])
                    step["summary"] = summary(work / name)
                    print(f"    exit {rc}, {wall:.0f} s: {step['summary']}", flush=True)
                else:
                    print(f"    exit {rc}, {wall:.0f} s: no sweep.json (log: {work / name}.log)", flush=True)
                # 3: the search found no rate meeting the SLO, still a result
                failed |= rc not in (0, 3)
        for kind in ("auto", "search"):
            sweeps = [args.output / f"{p}-{kind}" / "sweep.json" for p in profiles]
            sweeps = [s for s in sweeps if s.is_file()]
            if len(sweeps) < 2:
                continue
            out = work / f"compare-{kind}"
            title = f"The seed study as sweeps ({'--auto ' + str(args.auto) if kind == 'auto' else 'SLO search'}, " \
                    "SIMULATED profiles)"
            cmd = llmload("compare", *(rel(s, work) for s in sweeps), "--output", str(out),
                          "--labels", ",".join(s.parent.name.removesuffix(f"-{kind}") for s in sweeps),
                          "--title", title)
            print(f"[{time.monotonic() - started:6.0f} s] {shown(cmd, work)}", flush=True)
            rc, wall = run_child(cmd, work / f"compare-{kind}.log")
            study["steps"].append({"name": f"compare-{kind}", "command": shown(cmd, work), "exit_code": rc,
                                   "wall_s": round(wall, 1)})
            failed |= rc != 0
            to_docs = not args.quick and rc == 0 and len(sweeps) == len(PROFILES)
            # the figures are kept once: in docs/figures for the full study, beside compare.md otherwise
            keep(out, args.output / f"compare-{kind}", ["compare.md", "compare.csv"]
                 + ([] if to_docs else list(DOC_FIGURES[kind])))
            if to_docs:
                for src, dst in DOC_FIGURES[kind].items():
                    if (out / src).is_file():
                        shutil.copyfile(out / src, FIGURES / dst)
                        print(f"    figure: {(FIGURES / dst).relative_to(REPO)}", flush=True)
    except Stopped as exc:
        print(f"{exc}: study stopped; {args.output} holds the sweeps that finished", flush=True)
        study["interrupted"] = str(exc)
        return 128 + exc.signum
    finally:
        study["total_wall_s"] = round(time.monotonic() - started, 1)
        if not args.compare_only:
            (args.output / "study.json").write_text(json.dumps(study, indent=2) + "\n")
        print(f"total: {study['total_wall_s'] / 60:.1f} min; {args.output}", flush=True)
        if scratch is not None:
            scratch.cleanup()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
