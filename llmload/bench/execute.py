"""The main run of ``llmload bench``: in this process or on workers (``--processes``, ``--master``), with
progress, client-health sampling and a quiet garbage collector, ending in one :class:`Outcome`."""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from llmload.bench.console import log
from llmload.bench.plan import RunPlan
from llmload.common.errors import ConfigError, LLMLoadError
from llmload.core.run import Outcome, Run, send_share
from llmload.core.schedule import Schedule
from llmload.options.argtypes import AutoProcesses


def run_single(user: Any, run: Run, interrupts: Any, on_record: Any, journal: Any) -> Outcome:
    """The run in this process: :func:`llmload.core.run.send_share` over the whole schedule."""
    from llmload.core.dispatch import StopControl
    from llmload.core.sink import RecordList

    config = run.config
    assert isinstance(run.schedule, Schedule)
    sink = RecordList(journal)
    sink.listeners.append(on_record)
    control = StopControl(interrupts.stop, interrupts.force, config.stop_timeout)
    tally = send_share(run.schedule.entries, lambda _: user, sink, control=control,
                       max_concurrency=config.max_concurrency, closed_users=config.max_concurrency,
                       think=config.think)
    return Outcome(sink.kept.in_send_order(), tally.duration, tally.schedule_lags_s, run.planned - len(sink))


class DistributedSetup:
    """The master side: bind, start local workers for ``--processes``, wait for them, stop them after."""

    def __init__(self, args: argparse.Namespace, env: Any, token: str | None) -> None:
        self.args = args
        self.env = env
        self.token = token
        self.procs: list[Any] = []
        self.worker_logs: list[Any] = []
        self.result_workers: list[Any] = []
        #: the workers the runs go to, once :meth:`wait_for_workers` saw them connect
        self.clients: list[str] = []
        self.expected = 0

    def __enter__(self) -> DistributedSetup:
        try:
            return self._start()
        except BaseException:
            self.__exit__()
            raise

    def _start(self) -> DistributedSetup:
        import secrets
        import socket
        import subprocess
        import tempfile

        from llmload.distributed import BenchMaster
        from llmload.processes.children import child_env, start_child

        args = self.args
        expected = args.processes or args.expect_workers
        bind_host, bind_port = args.master_bind_host, args.master_bind_port
        if args.processes:
            # local workers: loopback only, and a fresh token so no other local process can take their place
            bind_host = "127.0.0.1"
            self.token = secrets.token_hex(16)
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                bind_port = probe.getsockname()[1]
        try:
            self.runner = self.env.create_master_runner(bind_host, bind_port)
        except Exception as exc:
            raise ConfigError(f"cannot bind the master to {bind_host}:{bind_port}: {exc}") from None
        self.bench = BenchMaster(self.runner, token=self.token, log=log)
        if args.processes:
            # the token goes through stdin: never on a command line (ps) or in the environment (ps e)
            cmd = [sys.executable, "-m", "llmload.cli", "bench", "--worker", "--master-host", "127.0.0.1",
                   "--master-port", str(bind_port), "--cluster-token-file", "-"]
            for _ in range(args.processes):
                # its stderr is kept (unnamed, gone with the run): a worker that dies says why
                errors = tempfile.TemporaryFile()  # noqa: SIM115 (closed in __exit__, after the workers)
                self.worker_logs.append(errors)
                proc = start_child(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=errors,
                                   env=child_env())
                self.procs.append(proc)
                assert proc.stdin is not None
                proc.stdin.write(self.token.encode() + b"\n")
                proc.stdin.close()
            chosen = (f"; --processes auto: {args.processes.cores} cores this process may use"
                      if isinstance(args.processes, AutoProcesses) else "")
            log(f"Started {args.processes} local worker processes (pids {' '.join(str(p.pid) for p in self.procs)})"
                + chosen)
        else:
            log(f"Master listening on {bind_host}:{bind_port}; waiting for {expected} workers "
                 f"(llmload bench --worker --master-host THIS_HOST --master-port {bind_port})")
        self.expected = expected
        return self

    def wait_for_workers(self) -> None:
        """Wait until the workers are connected (and authenticated): they start while the run is set up
        (simulator, workload, initial test), not after it. LLMLoadError (one line) when they do not come."""
        if self.clients:
            return
        args, expected = self.args, self.expected
        self.clients = self.bench.wait_for_workers(expected, args.expect_workers_max_wait, log,
                                                   check=self._local_workers_alive)
        if not self.clients:
            said = "; ".join(f"pid {proc.pid}: {line}" for proc, line in self._last_lines() if line)
            raise LLMLoadError(f"fewer than {expected} workers connected within {args.expect_workers_max_wait:g} s"
                               + (f" (local workers said: {said})" if said else ""))

    def _local_workers_alive(self) -> None:
        """LLMLoadError when a local worker process ended before the run: no use waiting for it."""
        for proc, line in self._last_lines():
            if proc.poll() is not None:
                raise LLMLoadError(f"local worker process {proc.pid} exited with code {proc.returncode} before "
                                   f"the run started" + (f": {line}" if line else ""))

    def _last_lines(self) -> list[tuple[Any, str]]:
        """Each local worker process and the last line it wrote to stderr."""
        out = []
        for proc, errors in zip(self.procs, self.worker_logs, strict=True):
            errors.seek(0)
            lines = [line.strip() for line in errors.read().decode(errors="replace").splitlines() if line.strip()]
            out.append((proc, lines[-1] if lines else ""))
        return out

    def run(self, run_config: dict[str, Any], schedule: Any, interrupts: Any, args: argparse.Namespace) -> Outcome:
        """One job on the connected workers, with ``args``' concurrency, stop timeout and think time (a sweep's
        point has its own)."""
        # a sweep runs one job after another: a worker lost during the last one gets no share of this one
        from llmload.distributed.master import alive_workers

        alive = alive_workers(self.runner)
        self.clients = [cid for cid in self.clients if cid in alive]
        if not self.clients:
            raise LLMLoadError("no worker is connected any more")
        result = self.bench.run(self.clients, run_config, schedule, args.max_concurrency,
                                interrupts.stop, args.stop_timeout, log, cut_event=interrupts.force,
                                think=args.think_time or None)
        self.result_workers = result.workers
        workers = [{"worker": f"worker{w.index}", "assigned": len(w.assigned), "dispatched": len(w.dispatched),
                    "records": w.records, "lost": w.lost} for w in result.workers]
        return Outcome(result.records, result.end - result.start, result.schedule_lags_s, result.unsent,
                        workers, result.lost)

    def __exit__(self, *exc: object) -> None:
        from llmload.processes.children import stop_child

        runner = getattr(self, "runner", None)
        if runner is not None:
            try:
                runner.quit()
            except Exception:
                pass
        for proc in self.procs:
            try:
                proc.wait(timeout=5)
            except Exception:
                stop_child(proc)
        for errors in self.worker_logs:
            errors.close()




@contextmanager
def quiet_gc() -> Iterator[None]:
    """A full garbage collection over everything set-up allocated can pause the loop for milliseconds, and
    every token timestamp with it: freeze what exists now and collect the young generation rarely."""
    gc.collect()
    gc.freeze()
    threshold = gc.get_threshold()
    gc.set_threshold(50_000, 50, 100)
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()


def open_master(plan: RunPlan, env: Any, interrupts: Any, stack: ExitStack) -> DistributedSetup | None:
    """A distributed run's master, bound, with its local workers (``--processes``) starting (all stopped when
    ``stack`` closes); :meth:`DistributedSetup.wait_for_workers` waits for them. None when the run is local."""
    interrupts.raise_if_interrupted()
    master = stack.enter_context(DistributedSetup(plan.args, env, plan.cluster_token)) if plan.distributed else None
    interrupts.raise_if_interrupted()
    return master


def execute(plan: RunPlan, run: Run, user: Any, env: Any, interrupts: Any, stack: ExitStack,
            master: DistributedSetup | None) -> tuple[Outcome, dict[str, Any]]:
    """Run the schedule (on ``master``'s workers when distributed) and return the outcome and client health."""
    from llmload.bench.progress import Progress
    from llmload.bench.setup import run_config
    from llmload.core.health import HealthMonitor
    from llmload.summary import format_run_header

    args = plan.args
    log("Starting main benchmark run..." if args.no_initial_test else
        "Initial test run completed. Starting main benchmark run...")
    print(format_run_header(args.request_rate, args.burstiness, args.max_concurrency,
                            ramp_up_strategy=args.ramp_up_strategy, ramp_up_start_rps=args.ramp_up_start_rps,
                            ramp_up_end_rps=args.ramp_up_end_rps), flush=True)
    from llmload.bench.observing import bench_observer
    from llmload.bench.outputs import open_journal
    from llmload.exporter.wiring import bench_exporter

    observer = bench_observer(plan, run.target.base_url, env, master, interrupts, run.target.built_in_sim)
    live = stack.enter_context(bench_exporter(plan, env, master, interrupts, log))
    progress = Progress(run.planned)
    on_record = live.chain(lambda record: (observer.on_record(record), progress.on_record(record)))
    health = HealthMonitor(reactor=user.pool.reactor)
    journal = open_journal(plan)
    from llmload.bench.vllm_extras import RunExtras

    extras = RunExtras(plan, run, user)
    extras.begin()
    interrupts.raise_if_interrupted()
    interrupts.start_run(args.stop_timeout)
    if not args.disable_tqdm:
        progress.start()
    try:
        with quiet_gc():
            # after quiet_gc's full collection (its pause is set-up's, not the run's: no stall to report)
            health.start()
            observer.begin()
            if master is None:
                outcome = run_single(user, run, interrupts, on_record, journal)
            else:
                master.bench.on_record, master.bench.journal = on_record, journal
                outcome = master.run(run_config(plan, run.target), run.schedule, interrupts, args)
    finally:
        outcome_extras = extras.end(interrupted=interrupts.signum is not None)
        observed = observer.finish()
        health.stop()
        if not args.disable_tqdm:
            progress.stop()
    outcome.observed, outcome.journal, outcome.extras = observed, journal, outcome_extras
    interrupts.start_report()
    # with --request-rate inf every request is due at once: how long spawning them took is not client lag
    report = health.report(outcome.schedule_lags_s if plan.config.spec.open_loop_lag_counts else None)
    if master is not None:
        from llmload.core.health import merge_health

        report = merge_health({w.name: w.health for w in master.result_workers}, report)
    outcome.interrupted_by = interrupts.signum
    return outcome, report
