"""Orchestrate one ``llmload bench`` run: target, workload, schedule, dispatch, metrics, outputs."""

from __future__ import annotations

import argparse
import gc
import math
import os
import shlex
import sys
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path
from time import perf_counter
from typing import Any

from llmload.errors import ConfigError, DatasetError, EndpointError, LLMLoadError
from llmload.metrics import parse_goodput
from llmload.options import api_key
from llmload.urls import redact_url, secrets_in

#: environment variable holding the token workers must prove they know (docs/distributed.md)
CLUSTER_TOKEN_ENV = "LLMLOAD_CLUSTER_TOKEN"


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _base_url(args: argparse.Namespace) -> str | None:
    if args.base_url:
        if args.host or args.port:
            raise ConfigError("give either --base-url or --host/--port, not both")
        if not args.base_url.startswith(("http://", "https://")):
            raise ConfigError(f"--base-url must start with http:// or https://, got {redact_url(args.base_url)!r}")
        from urllib.parse import urlsplit

        try:
            parts = urlsplit(args.base_url)
            parts.port  # noqa: B018  (raises ValueError for a bad port)
        except ValueError as exc:
            raise ConfigError(f"--base-url {redact_url(args.base_url)!r}: {exc}") from None
        if not parts.hostname:
            raise ConfigError(f"--base-url {redact_url(args.base_url)!r} has no host")
        return args.base_url.rstrip("/")
    if args.host or args.port:
        return f"http://{args.host or '127.0.0.1'}:{args.port or 8000}"
    return None


def _parse_list(text: str, flag: str, cast: type) -> list:
    try:
        return [cast(x.strip()) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"{flag}: cannot parse {text!r}") from None


def _parse_metadata(items: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--metadata: expected KEY=VALUE, got {item!r}")
        out[key] = value
    return out


def _resolve_target(args: argparse.Namespace, base_url: str,
                    api_key: str | None) -> tuple[str, str | None, bool]:
    """The model (``--model``, else the server's first), the tokenizer the server names (``llmload sim`` says
    which it uses) and whether it is the simulator, asking ``/v1/models`` only when model or tokenizer is
    not given."""
    from llmload.target import describe_server

    model = args.model
    if model and args.tokenizer:
        return model, None, False
    try:
        info = describe_server(base_url, api_key, timeout=min(args.read_timeout, 30.0))
    except EndpointError:
        if not model:
            raise
        return model, None, False  # a server without /v1/models: the model's own tokenizer
    if not model and not info.models:
        raise EndpointError(f"{redact_url(base_url)}/v1/models lists no model; pass --model")
    return model or info.models[0], info.tokenizer, info.is_simulator


def make_user_class(run: dict[str, Any]) -> type:
    """A concrete LLM user class for one run's target (also rebuilt on workers from the master's config)."""
    from llmload.users import LLMUser

    return type(
        "BenchUser",
        (LLMUser,),
        {
            "abstract": False,
            "host": run["base_url"],
            "backend": run["backend"],
            "endpoint": run["endpoint"],
            "model": run["model"],
            "ignore_eos": run["ignore_eos"],
            "ttft_rule": run["ttft_rule"],
            "api_key": run.get("api_key"),
            "connection_timeout": float(run.get("connect_timeout") or 30.0),
            "network_timeout": float(run.get("read_timeout") or 600.0),
            "request_timeout": run.get("request_timeout"),
        },
    )


def _environment(user_class: type | None = None) -> Any:
    from locust.argument_parser import get_parser
    from locust.env import Environment

    from llmload.users import LLMUser

    options = get_parser(default_config_files=[]).parse_args(["--headless"])
    return Environment(user_classes=[user_class or LLMUser], parsed_options=options)


def run_worker(args: argparse.Namespace) -> int:
    """``llmload bench --worker``: connect to a master and run what it sends until it quits.

    SIGINT/SIGTERM while connecting exits at once; during a job the worker stops like a master's stop (requests in
    flight get the run's ``--stop-timeout``, a second signal cuts them off), ships its records and exits 130/143.
    """
    import gevent

    from llmload.distributed import BenchWorker
    from llmload.interrupts import Interrupted, RunInterrupts, exit_code

    token = _cluster_token(args)
    env = _environment()
    where = f"{args.master_host}:{args.master_port}"
    with RunInterrupts(_log) as interrupts:
        _log(f"llmload worker: connecting to the master at {where}")
        try:
            runner = env.create_worker_runner(args.master_host, args.master_port)
        except (Interrupted, SystemExit) as exc:
            # Locust turns a Ctrl-C while connecting into sys.exit(1)
            if interrupts.signum is not None:
                _log(f"interrupted while connecting to the master at {where}")
                return exit_code(interrupts.signum)
            raise LLMLoadError(f"cannot connect to the master at {where}") from exc
        except ConnectionError:
            raise EndpointError(f"no master answered at {where} (is it running? --master-host/--master-port)") from None
        worker = BenchWorker(runner, lambda run: make_user_class(run)(env), token=token, log=_log)
        _log(f"llmload worker connected to {where}; waiting for the master")
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
    if args.worker:
        return run_worker(args)
    # Locust monkey-patches the standard library with gevent on import: do it before anything else runs
    # (urllib, ssl and huggingface_hub imported first would stay unpatched).
    import locust  # noqa: F401

    from llmload.interrupts import Interrupted, RunInterrupts

    plan = _Plan(args)
    with RunInterrupts(_log) as interrupts:
        try:
            return _bench(args, plan, interrupts)
        except Interrupted as exc:
            _log(f"{exc}: stopped during start-up, before the benchmark started; nothing was measured")
            return exc.exit_code


class _Plan:
    """What the flags say, checked before anything starts (every usage error is found here: exit 2)."""

    def __init__(self, args: argparse.Namespace) -> None:
        from llmload.arrivals import parse_think_time, validate_arrivals

        self.base_url = _base_url(args)
        self.api_key = api_key(args)
        self.goodput = parse_goodput(args.goodput)
        self.percentiles = args.metric_percentiles
        self.selected = args.percentile_metrics
        self.metadata = _parse_metadata(args.metadata)
        validate_arrivals(args.request_rate, args.burstiness, args.ramp_up_strategy, args.ramp_up_start_rps,
                          args.ramp_up_end_rps)
        self.distributed = bool(args.processes or args.master)
        if args.master and not args.expect_workers:
            raise ConfigError("--master needs --expect-workers N (N >= 1)")
        self.use_sim = self.base_url is None
        self.num_prompts = args.num_prompts or (SIM_PROMPTS if self.use_sim else 1000)
        if args.dataset_name in ("trace", "custom") and not args.dataset_path:
            what = "an Azure/BurstGPT CSV or a JSONL trace" if args.dataset_name == "trace" else "a JSONL file"
            raise ConfigError(f"--dataset-name {args.dataset_name} needs --dataset-path ({what})")
        if args.dataset_path and not Path(args.dataset_path).is_file():
            raise ConfigError(f"--dataset-path {args.dataset_path}: no such file")
        if args.dataset_name == "trace":
            self.num_prompts = args.num_prompts  # None: the whole window
            if args.rate_shape or args.constant_rate:
                raise ConfigError("a trace brings its own arrival times: drop --rate-shape/--constant-rate")
        if args.think_time and not args.max_concurrency:
            raise ConfigError("--think-time needs --max-concurrency N (the number of closed-loop users)")
        self.think = parse_think_time(args.think_time) if args.think_time else None
        if args.rate_shape:
            from llmload.shapes import parse_shape

            parse_shape(args.rate_shape, "--rate-shape")
        if args.fail_on_slo is not None and not self.goodput:
            raise ConfigError("--fail-on-slo needs --goodput SLOs to judge against")
        self.save = bool(args.save_result or args.save_detailed)
        if self.save:
            _check_writable(Path(args.result_dir))
            if args.records_format == "parquet":
                try:
                    import pyarrow  # noqa: F401
                except ImportError:
                    raise ConfigError("--records-format parquet needs pyarrow: pip install pyarrow") from None
        self.cluster_token = _cluster_token(args)
        if args.master and not self.cluster_token and not _is_loopback(args.master_bind_host) and (
                self.api_key or (self.base_url and secrets_in(self.base_url))):
            raise ConfigError(
                f"--master binds {args.master_bind_host!r} and workers would receive the API key: set a cluster "
                "token (LLMLOAD_CLUSTER_TOKEN or --cluster-token-file) on the master and the workers, or bind "
                "--master-bind-host 127.0.0.1")


def _check_writable(directory: Path) -> None:
    """Create ``--result-dir`` and write a probe file, so an unwritable place fails now, not after the run."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / f".llmload-probe-{os.getpid()}"
        probe.write_bytes(b"probe")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"--result-dir {directory}: cannot write there ({exc.strerror or exc})") from None


def _cluster_token(args: argparse.Namespace) -> str | None:
    path = getattr(args, "cluster_token_file", None)
    if path:
        try:
            token = (sys.stdin.read() if path == "-" else Path(path).read_text()).strip()
        except OSError as exc:
            raise ConfigError(f"--cluster-token-file: cannot read {path}: {exc.strerror}") from None
        if not token:
            raise ConfigError(f"--cluster-token-file: {path} is empty")
        return token
    return os.environ.get(CLUSTER_TOKEN_ENV) or None


def _is_loopback(host: str) -> bool:
    return host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")


def _bench(args: argparse.Namespace, plan: _Plan, interrupts: Any) -> int:
    from llmload._compat import import_transformers
    from llmload.bench.health import HealthMonitor
    from llmload.bench.progress import Progress
    from llmload.datasets import load_samples
    from llmload.simproc import SimProcess
    from llmload.summary import format_run_header
    from llmload.tokenizer import load_tokenizer

    base_url = plan.base_url
    use_sim = plan.use_sim
    num_prompts = plan.num_prompts
    with ExitStack() as stack:
        if use_sim:
            sim_args = ["--tokenizer", "builtin", *shlex.split(args.sim_args)]
            if args.model:
                sim_args += ["--model", args.model]
            _log(f"No --base-url given: starting the built-in simulator (llmload sim {' '.join(sim_args)})")
            sim = stack.enter_context(SimProcess(sim_args))
            base_url = sim.url
            _log(f"Simulator ready at {base_url} (pid {sim.pid}); it is stopped when the run ends")
        assert base_url is not None

        model, hint, simulator = _resolve_target(args, base_url, plan.api_key)
        if simulator and args.num_prompts is None and args.dataset_name != "trace":
            num_prompts = SIM_PROMPTS  # a running llmload sim: the same default as the built-in one
        tokenizer_id = args.tokenizer or ("builtin" if use_sim else hint or model)
        _log(f"Loading tokenizer {tokenizer_id!r} and {num_prompts or 'all'} prompts from the {args.dataset_name} "
             "dataset")
        import_transformers()
        tokenizer = load_tokenizer(tokenizer_id, trust_remote_code=args.trust_remote_code)
        samples = load_samples(args.dataset_name, args.dataset_path, tokenizer, num_prompts, args.seed,
                               **_dataset_options(args))
        if num_prompts and len(samples) < num_prompts:
            _log(f"warning: the dataset gave {len(samples)} usable prompts, fewer than --num-prompts {num_prompts}")
        if not samples:
            raise DatasetError("the dataset gave no usable prompts")

        from llmload.core.schedule import Schedule

        schedule = Schedule.build(schedule_spec(args), samples)
        run_config = {
            "base_url": base_url, "backend": args.backend, "endpoint": args.endpoint,
            "model": args.served_model_name or model, "ttft_rule": args.ttft_rule,
            # a trace fixes every output length: force it with max_tokens + ignore_eos
            "ignore_eos": args.ignore_eos or args.dataset_name == "trace",
            "api_key": plan.api_key,
            "connect_timeout": args.connect_timeout, "read_timeout": args.read_timeout,
            "request_timeout": args.request_timeout,
        }
        env = _environment(make_user_class(run_config))
        user = env.user_classes[0](env)

        if args.no_initial_test:
            _log("Skipping the initial test request (--no-initial-test)")
        else:
            _initial_test(user, samples[0], base_url, args)
        user._pool.close()

        master = None
        if plan.distributed:
            master = stack.enter_context(_DistributedSetup(args, env, plan.cluster_token))
        _log("Starting main benchmark run..." if args.no_initial_test else
             "Initial test run completed. Starting main benchmark run...")
        print(format_run_header(args.request_rate, args.burstiness, args.max_concurrency,
                                ramp_up_strategy=args.ramp_up_strategy, ramp_up_start_rps=args.ramp_up_start_rps,
                                ramp_up_end_rps=args.ramp_up_end_rps), flush=True)

        progress = Progress(len(schedule))
        health = HealthMonitor(reactor=user._pool.reactor)
        interrupts.start_run(args.stop_timeout)
        if not args.disable_tqdm:
            progress.start()
        health.start()
        # A full garbage collection over everything set-up allocated can pause the loop for milliseconds,
        # and every token timestamp with it: freeze what exists now and collect the young generation rarely.
        gc.collect()
        gc.freeze()
        gc_threshold = gc.get_threshold()
        gc.set_threshold(50_000, 50, 100)
        try:
            if master is None:
                outcome = _run_single(user, schedule, args, interrupts, plan.think, progress.on_record)
            else:
                master.bench.on_record = progress.on_record
                outcome = master.run(run_config, schedule, interrupts)
        finally:
            gc.set_threshold(*gc_threshold)
            gc.unfreeze()
            health.stop()
            if not args.disable_tqdm:
                progress.stop()
        interrupts.start_report()

    # with --request-rate inf every request is due at once: how long spawning them took is not client lag
    health_report = health.report(outcome.schedule_lags_s if schedule_spec(args).open_loop_lag_counts else None)
    if master is not None:
        health_report = master.bench.merged_health(master.result_workers, health_report)
    outcome.interrupted_by = interrupts.signum
    return _report(args, plan, outcome, schedule, tokenizer, tokenizer_id, model,
                   redact_url(base_url) if not use_sim else "llmload-sim", health_report)


def _initial_test(user: Any, sample: Any, base_url: str, args: argparse.Namespace) -> None:
    """One request before the run, as benchmark_serving does; says so while a silent server keeps it waiting."""
    import gevent

    _log("Starting initial single prompt test run...")
    started = perf_counter()

    def still_waiting() -> None:
        every = 10.0
        while True:
            gevent.sleep(every)
            _log(f"  initial test: no answer after {perf_counter() - started:.0f} s (gives up after "
                 f"--read-timeout {args.read_timeout:g} s without data)")
            every = 30.0

    ticker = gevent.spawn(still_waiting)
    try:
        from llmload.core.schedule import INITIAL_TEST_ID, Scheduled

        probe = user.send(Scheduled(-1, 0.0, sample, INITIAL_TEST_ID))
    finally:
        ticker.kill()
    if probe.success:
        return
    kind = getattr(probe, "failure_kind", "")
    hint = {
        "read_timeout": f"the server sent nothing for --read-timeout {args.read_timeout:g} s",
        "request_timeout": f"the request took longer than --request-timeout {args.request_timeout:g} s"
        if args.request_timeout else "",
        "connect": "check --base-url (or --host/--port) and that the server is up",
    }.get(kind) or "check --base-url, --backend, --endpoint and --model"
    raise EndpointError(f"initial test request to {redact_url(base_url)}{user._path} failed: {probe.error} ({hint})")


class _Outcome:
    """What a run produced, single-process or distributed."""

    def __init__(self, records: list, duration: float, schedule_lags_s: list[float], unsent: int,
                 workers: list[dict[str, Any]] | None = None, lost: int = 0) -> None:
        self.records = records
        self.duration = duration
        self.schedule_lags_s = schedule_lags_s
        self.unsent = unsent
        self.workers = workers
        self.lost = lost
        #: the signal that stopped the run early (None: it ran to the end)
        self.interrupted_by: int | None = None


def _run_single(user: Any, schedule: Any, args: argparse.Namespace, interrupts: Any, think: Any,
                on_record: Any) -> _Outcome:
    from llmload.core.dispatch import RequestQueue, StopControl, run_closed_loop, run_open_loop
    from llmload.core.sink import RecordList

    sink = RecordList()
    sink.listeners.append(on_record)
    control = StopControl(interrupts.stop, interrupts.force, args.stop_timeout)
    if think is not None:
        tally = run_closed_loop(RequestQueue(schedule.entries), lambda _u: user, args.max_concurrency, think, sink,
                                control=control)
    else:
        tally = run_open_loop(schedule, lambda _r: user, sink, max_concurrency=args.max_concurrency,
                              control=control)
    return _Outcome(sink.records, tally.duration, tally.schedule_lags_s, len(schedule) - len(sink.records))


class _DistributedSetup:
    """The master side: bind, start local workers for ``--processes``, wait for them, stop them after."""

    def __init__(self, args: argparse.Namespace, env: Any, token: str | None) -> None:
        self.args = args
        self.env = env
        self.token = token
        self.procs: list[Any] = []
        self.result_workers: list[Any] = []

    def __enter__(self) -> _DistributedSetup:
        try:
            return self._start()
        except BaseException:
            self.__exit__()
            raise

    def _start(self) -> _DistributedSetup:
        import secrets
        import socket
        import subprocess

        from llmload.children import child_env, start_child
        from llmload.distributed import BenchMaster

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
        self.bench = BenchMaster(self.runner, token=self.token, log=_log)
        if args.processes:
            # the token goes through stdin: never on a command line (ps) or in the environment (ps e)
            cmd = [sys.executable, "-m", "llmload.cli", "bench", "--worker", "--master-host", "127.0.0.1",
                   "--master-port", str(bind_port), "--cluster-token-file", "-"]
            for _ in range(args.processes):
                proc = start_child(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, env=child_env())
                self.procs.append(proc)
                assert proc.stdin is not None
                proc.stdin.write(self.token.encode() + b"\n")
                proc.stdin.close()
            _log(f"Started {args.processes} local worker processes (pids {' '.join(str(p.pid) for p in self.procs)})")
        else:
            _log(f"Master listening on {bind_host}:{bind_port}; waiting for {expected} workers "
                 f"(llmload bench --worker --master-host THIS_HOST --master-port {bind_port})")
        self.clients = self.bench.wait_for_workers(expected, args.expect_workers_max_wait, _log)
        if not self.clients:
            raise LLMLoadError(f"fewer than {expected} workers connected within {args.expect_workers_max_wait:g} s")
        return self

    def run(self, run_config: dict[str, Any], schedule: Any, interrupts: Any) -> _Outcome:
        result = self.bench.run(self.clients, run_config, schedule, self.args.max_concurrency,
                                interrupts.stop, self.args.stop_timeout, _log, cut_event=interrupts.force,
                                think=self.args.think_time or None)
        self.result_workers = result.workers
        workers = [{"worker": f"worker{w.index}", "assigned": len(w.assigned), "dispatched": len(w.dispatched),
                    "records": w.records, "lost": w.lost} for w in result.workers]
        return _Outcome(result.records, result.end - result.start, result.schedule_lags_s, result.unsent,
                        workers, result.lost)

    def __exit__(self, *exc: object) -> None:
        from llmload.children import stop_child

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


def schedule_spec(args: argparse.Namespace) -> Any:
    """The arrival options of ``args`` (:class:`~llmload.core.schedule.ScheduleSpec`)."""
    from llmload.core.schedule import ScheduleSpec

    return ScheduleSpec(request_rate=args.request_rate, burstiness=args.burstiness, seed=args.seed,
                        ramp_up_strategy=args.ramp_up_strategy, ramp_up_start_rps=args.ramp_up_start_rps,
                        ramp_up_end_rps=args.ramp_up_end_rps, constant_rate=bool(args.constant_rate),
                        rate_shape=args.rate_shape or None, trace=args.dataset_name == "trace")


def _dataset_options(args: argparse.Namespace) -> dict[str, Any]:
    if args.dataset_name == "sharegpt":
        return {"fixed_output_len": args.sharegpt_output_len}
    if args.dataset_name == "random":
        return {"input_len": args.random_input_len, "output_len": args.random_output_len,
                "range_ratio": args.random_range_ratio, "prefix_len": args.random_prefix_len}
    if args.dataset_name == "trace":
        return {"trace_format": args.trace_format, "time_scale": args.time_scale, "trace_start": args.trace_start,
                "trace_duration": args.trace_duration, "prompt_path": args.trace_prompts}
    return {"default_output_len": args.custom_output_len}


def _report(args: argparse.Namespace, plan: _Plan, outcome: _Outcome, samples: list, tokenizer: Any,
            tokenizer_id: str, model: str, target: str, health_report: dict[str, Any]) -> int:
    """Print the summary, write the result JSON and records, and choose the exit code (docs/reliability.md)."""
    from llmload.bench.health import judge
    from llmload.interrupts import exit_code, signal_name
    from llmload.metrics import compute_metrics

    records = sorted(outcome.records, key=lambda r: r.intended_send or 0.0)
    for r in records:
        if r.output_tokens_source == "pending":
            r.output_tokens = len(tokenizer(r.generated_text, add_special_tokens=False).input_ids)
            r.output_tokens_source = "tokenizer"
    metrics = compute_metrics(records, max(outcome.duration, 1e-9), goodput_slos=plan.goodput,
                              selected_percentiles=plan.percentiles, selected_metrics=plan.selected,
                              ttft_rule=args.ttft_rule, schedule_lags_s=outcome.schedule_lags_s)
    health_report = judge(health_report, metrics.itl.median_ms)
    interrupted = outcome.interrupted_by is not None
    _print_summary(args, metrics, outcome, health_report)

    wrote = True
    if plan.save:
        wrote = _save(args, plan, outcome, metrics, records, samples, tokenizer_id, model, target, health_report)
    if interrupted:
        _log(f"Interrupted by {signal_name(outcome.interrupted_by)}: the result above is partial")
        return exit_code(outcome.interrupted_by)
    if not metrics.completed:
        _log("error: no request completed")
        return 1
    if not wrote:
        return 1
    return _threshold_exit(args, metrics)


def _print_summary(args: argparse.Namespace, metrics: Any, outcome: _Outcome, health_report: dict[str, Any]) -> None:
    from llmload.interrupts import signal_name
    from llmload.summary import format_summary

    print(format_summary(metrics, backend_label=args.backend, request_rate=args.request_rate,
                         burstiness=args.burstiness, max_concurrency=args.max_concurrency,
                         client_health=health_report), flush=True)
    if outcome.interrupted_by is not None:
        print(f"{'Interrupted by:':<40} {signal_name(outcome.interrupted_by):<10}")
    if outcome.unsent:
        print(f"{'Not sent (run stopped early):':<40} {outcome.unsent:<10}")
    if outcome.workers is not None:
        print(f"{'Workers:':<40} {len(outcome.workers):<10}")
        for w in outcome.workers:
            status = "LOST" if w["lost"] else "ok"
            print(f"{'  ' + w['worker'] + ' records (' + status + '):':<40} {w['records']:<10}")
        print(f"{'Lost with dead workers:':<40} {outcome.lost:<10}")
    sys.stdout.flush()


def _save(args: argparse.Namespace, plan: _Plan, outcome: _Outcome, metrics: Any, records: list, samples: list,
          tokenizer_id: str, model: str, target: str, health_report: dict[str, Any]) -> bool:
    """Write the result JSON, then the records; a failure of one is one line on stderr and never stops the
    other. Returns whether both were written."""
    from llmload.bench.results import default_filename, records_path, write_json, write_records
    from llmload.interrupts import signal_name
    from llmload.metrics import detailed_lists

    now = datetime.now()
    data: dict[str, Any] = {
        "date": now.strftime("%Y%m%d-%H%M%S"),
        "backend": args.backend,
        "endpoint_type": args.backend,
        "label": args.label,
        "model_id": model,
        "tokenizer_id": tokenizer_id,
        "num_prompts": len(samples),
        "dataset_name": args.dataset_name,
        "base_url": target,
        **plan.metadata,
        "request_rate": "inf" if math.isinf(args.request_rate) else args.request_rate,
        "burstiness": args.burstiness,
        "max_concurrency": args.max_concurrency,
        **metrics.to_result_dict(),
        "client_health": health_report,
        "not_sent": outcome.unsent,
        "interrupted": outcome.interrupted_by is not None,
        "interrupt_signal": signal_name(outcome.interrupted_by) if outcome.interrupted_by is not None else None,
    }
    if outcome.workers is not None:
        data["workers"] = outcome.workers
        data["lost_with_workers"] = outcome.lost
    if args.save_detailed:
        data.update(detailed_lists(records, metrics))
    label = args.label or args.backend
    filename = args.result_filename or default_filename(label, args.request_rate, args.max_concurrency, model, now)
    path = Path(args.result_dir) / filename
    rec_path = records_path(path, args.records_format)
    ok = True
    try:
        write_json(path, data)
    except OSError as exc:
        _log(f"error: cannot write the result JSON {path}: {exc.strerror or exc}")
        ok = False
    try:
        write_records(rec_path, records, args.records_format)
    except OSError as exc:
        _log(f"error: cannot write every record to {rec_path}: {exc.strerror or exc} (the lines written are "
             "complete records)")
        return False
    if ok:
        _log(f"Saved result to {path} and {len(records)} request records to {rec_path}")
    return ok


def _threshold_exit(args: argparse.Namespace, metrics: Any) -> int:
    """``--fail-on-error-rate`` / ``--fail-on-slo``: exit 3 when the run completed but missed the bar."""
    sent = max(1, metrics.sent)
    if args.fail_on_error_rate is not None:
        failed = metrics.failed + metrics.cut_off
        if failed / sent > args.fail_on_error_rate:
            _log(f"error: {failed} of {metrics.sent} requests failed ({failed / sent:.1%}), above "
                 f"--fail-on-error-rate {args.fail_on_error_rate:g}")
            return THRESHOLD_MISSED
    if args.fail_on_slo is not None and metrics.request_goodput is not None:
        good = round(metrics.request_goodput * metrics.duration)
        if good / sent < args.fail_on_slo:
            _log(f"error: {good} of {metrics.sent} requests met every --goodput SLO ({good / sent:.1%}), below "
                 f"--fail-on-slo {args.fail_on_slo:g}")
            return THRESHOLD_MISSED
    return 0


SIM_PROMPTS = 200
#: exit code of a run that completed but missed --fail-on-error-rate or --fail-on-slo
THRESHOLD_MISSED = 3
