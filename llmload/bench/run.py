"""Orchestrate one ``llmload bench`` run as named steps on a validated :class:`~llmload.bench.plan.RunPlan`:
target -> workload and schedule -> probe -> execute -> one outcome -> metrics -> outputs.
docs/design.md has the architecture; docs/reliability.md the exit codes and what each signal does when."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, NoReturn

from llmload.bench.console import log
from llmload.bench.outputs import THRESHOLD_MISSED, Finished, report
from llmload.bench.plan import RunPlan
from llmload.bench.setup import (
    environment,
    initial_test,
    make_user_class,
    new_run,
    run_config,
    start_target,
)
from llmload.common.errors import EndpointError, LLMLoadError
from llmload.core.run import Run
from llmload.options import CLUSTER_TOKEN_ENV, cluster_token

__all__ = ["CLUSTER_TOKEN_ENV", "THRESHOLD_MISSED", "make_user_class", "run_bench", "run_worker"]


def run_worker(args: argparse.Namespace) -> int:
    """``llmload bench --worker``: connect to a master and run what it sends until it quits.

    SIGINT/SIGTERM while connecting exits at once; during a job the worker stops like a master's stop (requests in
    flight get the run's ``--stop-timeout``, a second signal cuts them off), ships its records and exits 130/143.
    """
    import gevent

    from llmload.distributed import BenchWorker
    from llmload.processes.interrupts import Interrupted, RunInterrupts, exit_code

    token = cluster_token(args)
    env = environment()
    where = f"{args.master_host}:{args.master_port}"
    with RunInterrupts(log) as interrupts:
        log(f"llmload worker: connecting to the master at {where}")
        try:
            runner = env.create_worker_runner(args.master_host, args.master_port)
        except (Interrupted, SystemExit) as exc:
            # Locust turns a Ctrl-C while connecting into sys.exit(1)
            if interrupts.signum is not None:
                log(f"interrupted while connecting to the master at {where}")
                return exit_code(interrupts.signum)
            raise LLMLoadError(f"cannot connect to the master at {where}") from exc
        except ConnectionError:
            raise EndpointError(f"no master answered at {where} (is it running? --master-host/--master-port)") from None
        worker = BenchWorker(runner, lambda run: make_user_class(run)(env), token=token, log=log)
        log(f"llmload worker connected to {where}; waiting for the master")
        interrupts.start_run(None)

        def on_signal() -> None:
            interrupts.stop.wait()
            worker.leave()
            while worker.busy:  # its job drains, ships its records and says llm_done
                if interrupts.force.wait(0.1):
                    worker.cut_event.set()
            runner.greenlet.kill(block=False)

        watcher = gevent.spawn(on_signal)
        runner.greenlet.join()
        watcher.kill()
    return exit_code(interrupts.signum) if interrupts.signum is not None else 0


def run_bench(args: argparse.Namespace) -> int:
    """``llmload bench``: validate everything, set up, initial test, run, report; see docs/reliability.md
    for the exit codes and what each signal does when."""
    from llmload.processes.locust_import import import_locust

    # Locust monkey-patches the standard library with gevent on import: do it before anything else runs
    # (urllib, ssl and huggingface_hub imported first would stay unpatched).
    import_locust()
    if args.worker:
        return run_worker(args)

    plan = RunPlan(args)
    return with_interrupts(lambda interrupts: _bench(plan, interrupts), "before the benchmark started")


def with_interrupts(body: Callable[[Any], int], start_up: str) -> int:
    """``body(interrupts)`` with SIGINT/SIGTERM handled for its lifetime (:mod:`llmload.processes.interrupts`); a signal
    during start-up ends it with one line saying nothing was measured (``start_up``: before what)."""
    from llmload.processes.interrupts import Interrupted, RunInterrupts

    with RunInterrupts(log) as interrupts:
        try:
            return body(interrupts)
        except Interrupted as exc:
            log(f"{exc}: stopped during start-up, {start_up}; nothing was measured")
            abandon(exc.exit_code)
    raise AssertionError("unreachable")  # pragma: no cover


def abandon(code: int) -> NoReturn:
    """End the process after a start-up signal, without interpreter finalization. The signal's exception was
    raised wherever the main greenlet was, possibly inside a lock (logging's): finalizing then tears gevent's hub
    down under callbacks that wait for that lock ('greenlet is being finalized' tracebacks). Every child is
    stopped by now (the ``with`` blocks that own them have exited) and nothing was measured."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _bench(plan: RunPlan, interrupts: Any) -> int:
    """The steps of a run; everything started here (simulator, workers) is stopped when the block ends."""
    with ExitStack() as stack:
        from llmload.bench.execute import execute

        ready = set_up(plan, interrupts, stack)
        outcome, health = execute(plan, ready.run, ready.user, ready.env, interrupts, stack, ready.master)
    return report(Finished(plan, ready.run, outcome, health))


@dataclass(frozen=True)
class Ready:
    """A run set up and checked, before its first measured request: what ``llmload bench`` and ``llmload
    sweep`` share."""

    run: Run
    env: Any
    user: Any
    master: Any


def set_up(plan: RunPlan, interrupts: Any, stack: ExitStack, extra: int = 0) -> Ready:
    """Master and local workers (distributed), the target, the run's workload (``extra`` more samples: a sweep's
    warm-up) and schedule, the user, the initial test, the workers connected. The master binds and its local
    workers start first: they import and connect while the simulator starts and the workload loads
    (benchmarks/startup.py); the user class comes once the target is known."""
    from llmload.bench.execute import open_master

    env = environment()
    master = open_master(plan, env, interrupts, stack)
    target = start_target(plan, stack)
    interrupts.raise_if_interrupted()  # a signal held while the simulator's process forked
    run = new_run(plan, target)
    run.load(extra=extra)
    run.plan()
    env.user_classes = [make_user_class(run_config(plan, target))]
    user = env.user_classes[0](env)
    probe(plan, user, run)
    if master is not None:
        master.wait_for_workers()
        interrupts.raise_if_interrupted()
    return Ready(run, env, user, master)


def probe(plan: RunPlan, user: Any, run: Any) -> None:
    """The initial test request (unless ``--no-initial-test``) and the warm-ups (``--num-warmups``) with the
    run's first sample."""
    from llmload.core.session import single_request

    args = plan.args
    first = single_request(run.workload.samples[0])
    if args.no_initial_test:
        log("Skipping the initial test request (--no-initial-test)")
    else:
        initial_test(user, first, run.target.base_url, args)
    if getattr(args, "num_warmups", 0):
        from llmload.core.probes import warm_up

        log(f"Warming up with {args.num_warmups} requests...")
        failed = warm_up(user.send, first, args.num_warmups, args.max_concurrency)
        log("Warmup run completed." + (f" ({failed} of them failed)" if failed else ""))
    user.pool.close()
