"""Orchestrate one ``llmload bench`` run: target, workload, schedule, dispatch, metrics, outputs."""

from __future__ import annotations

import argparse
import gc
import math
import os
import shlex
import signal
import sys
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path
from typing import Any

from llmload.errors import ConfigError, EndpointError, LLMLoadError
from llmload.metrics import parse_goodput


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _api_key(args: argparse.Namespace) -> str | None:
    if args.api_key_file:
        try:
            key = Path(args.api_key_file).read_text().strip()
        except OSError as exc:
            raise ConfigError(f"--api-key-file: cannot read {args.api_key_file}: {exc.strerror}") from None
        if not key:
            raise ConfigError(f"--api-key-file: {args.api_key_file} is empty")
        return key
    return os.environ.get("OPENAI_API_KEY") or None


def _base_url(args: argparse.Namespace) -> str | None:
    if args.base_url:
        if args.host or args.port:
            raise ConfigError("give either --base-url or --host/--port, not both")
        if not args.base_url.startswith(("http://", "https://")):
            raise ConfigError(f"--base-url must start with http:// or https://, got {args.base_url!r}")
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


def served_models(base_url: str, api_key: str | None) -> list[str]:
    import urllib.error
    import urllib.request

    import orjson

    request = urllib.request.Request(f"{base_url}/v1/models")
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            data = orjson.loads(resp.read())
    except urllib.error.HTTPError as exc:
        raise EndpointError(f"{base_url}/v1/models answered HTTP {exc.code}; pass --model") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise EndpointError(f"cannot reach the server at {base_url}: {reason}") from None
    except ValueError:
        raise EndpointError(f"{base_url}/v1/models did not return JSON; pass --model") from None
    return [m.get("id", "") for m in data.get("data", []) if isinstance(m, dict)]


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
        },
    )


def _environment(user_class: type | None = None) -> Any:
    from locust.argument_parser import get_parser
    from locust.env import Environment

    from llmload.users import LLMUser

    options = get_parser(default_config_files=[]).parse_args(["--headless"])
    return Environment(user_classes=[user_class or LLMUser], parsed_options=options)


def run_worker(args: argparse.Namespace) -> int:
    """``llmload bench --worker``: connect to a master and run what it sends until it quits."""
    import gevent  # noqa: F401  (Locust's monkey-patching first)

    from llmload.distributed import BenchWorker

    env = _environment()
    runner = env.create_worker_runner(args.master_host, args.master_port)
    BenchWorker(runner, lambda run: make_user_class(run)(env))
    _log(f"llmload worker connected to {args.master_host}:{args.master_port}; waiting for the master")
    runner.greenlet.join()
    return 0


def run_bench(args: argparse.Namespace) -> int:
    if args.worker:
        return run_worker(args)
    # Locust monkey-patches the standard library with gevent on import: do it before anything else runs.
    import gevent

    from llmload._compat import import_transformers
    from llmload.arrivals import parse_think_time, validate_arrivals
    from llmload.bench.health import HealthMonitor
    from llmload.bench.progress import Progress
    from llmload.datasets import load_samples
    from llmload.events import llm_events
    from llmload.simproc import SimProcess
    from llmload.summary import format_run_header
    from llmload.tokenizer import load_tokenizer

    base_url = _base_url(args)
    api_key = _api_key(args)
    goodput = parse_goodput(args.goodput)
    percentiles = _parse_list(args.metric_percentiles, "--metric-percentiles", float)
    selected = _parse_list(args.percentile_metrics, "--percentile-metrics", str)
    metadata = _parse_metadata(args.metadata)
    validate_arrivals(args.request_rate, args.burstiness, args.ramp_up_strategy, args.ramp_up_start_rps,
                      args.ramp_up_end_rps)
    distributed = bool(args.processes or args.master)
    if args.processes is not None and args.processes < 1:
        raise ConfigError("--processes must be at least 1")
    use_sim = base_url is None
    num_prompts = args.num_prompts or (SIM_PROMPTS if use_sim else 1000)
    if args.dataset_name == "trace":
        if not args.dataset_path:
            raise ConfigError("--dataset-name trace needs --dataset-path (an Azure/BurstGPT CSV or a JSONL trace)")
        num_prompts = args.num_prompts  # None: the whole window
    if args.think_time and not args.max_concurrency:
        raise ConfigError("--think-time needs --max-concurrency N (the number of closed-loop users)")
    think = parse_think_time(args.think_time) if args.think_time else None

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

        model = args.model
        if not model:
            served = served_models(base_url, api_key)
            if not served:
                raise EndpointError(f"{base_url}/v1/models lists no model; pass --model")
            model = served[0]
        tokenizer_id = args.tokenizer or ("builtin" if use_sim else model)
        _log(f"Loading tokenizer {tokenizer_id!r} and {num_prompts or 'all'} prompts from the {args.dataset_name} "
             "dataset")
        import_transformers()
        tokenizer = load_tokenizer(tokenizer_id, trust_remote_code=args.trust_remote_code)
        samples = load_samples(args.dataset_name, args.dataset_path, tokenizer, num_prompts, args.seed,
                               **_dataset_options(args))
        if num_prompts and len(samples) < num_prompts:
            _log(f"warning: the dataset gave {len(samples)} usable prompts, fewer than --num-prompts {num_prompts}")
        if not samples:
            raise LLMLoadError("the dataset gave no usable prompts")

        samples, offsets = _schedule(args, samples)
        run_config = {
            "base_url": base_url, "backend": args.backend, "endpoint": args.endpoint,
            "model": args.served_model_name or model, "ttft_rule": args.ttft_rule,
            # a trace fixes every output length: force it with max_tokens + ignore_eos
            "ignore_eos": args.ignore_eos or args.dataset_name == "trace",
            "api_key": api_key,
        }
        env = _environment(make_user_class(run_config))
        user = env.user_classes[0](env)

        _log("Starting initial single prompt test run...")
        probe = user.send(samples[0])
        if not probe.success:
            raise EndpointError(
                f"initial test request to {base_url}{user._path} failed: {probe.error}. "
                "Check --base-url, --backend, --endpoint and --model."
            )
        user._pool.close()

        master = None
        if distributed:
            master = stack.enter_context(_DistributedSetup(args, env))
        _log("Initial test run completed. Starting main benchmark run...")
        print(format_run_header(args.request_rate, args.burstiness, args.max_concurrency,
                                ramp_up_strategy=args.ramp_up_strategy, ramp_up_start_rps=args.ramp_up_start_rps,
                                ramp_up_end_rps=args.ramp_up_end_rps), flush=True)

        progress = Progress(len(samples))
        health = HealthMonitor()
        stop = gevent.event.Event()

        def on_interrupt() -> None:
            if stop.is_set():
                return
            _log(f"\nInterrupted: no new requests; those in flight get {args.stop_timeout:g} s, then are cut off")
            stop.set()

        gevent.signal_handler(signal.SIGINT, on_interrupt)
        gevent.signal_handler(signal.SIGTERM, on_interrupt)
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
                llm_events.request_complete.add_listener(progress.on_record)
                try:
                    outcome = _run_single(user, samples, offsets, args, stop, think)
                finally:
                    llm_events.request_complete.remove_listener(progress.on_record)
            else:
                master.bench.on_record = progress.on_record
                outcome = master.run(run_config, samples, offsets, stop)
        finally:
            gc.set_threshold(*gc_threshold)
            gc.unfreeze()
            health.stop()
            if not args.disable_tqdm:
                progress.stop()

    # with --request-rate inf every request is due at once: how long spawning them took is not client lag
    open_loop = not math.isinf(args.request_rate) or args.rate_shape or args.dataset_name == "trace"
    health_report = health.report(outcome.schedule_lags_s if open_loop else None)
    if master is not None:
        health_report = master.bench.merged_health(master.result_workers, health_report)
    return _report(args, outcome, samples, tokenizer, tokenizer_id, model, base_url if not use_sim else "llmload-sim",
                   health_report, goodput, percentiles, selected, metadata)


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


def _run_single(user: Any, samples: list, offsets: Any, args: argparse.Namespace, stop: Any,
                think: Any = None) -> _Outcome:
    from llmload.bench.dispatch import run_closed_loop, run_open_loop

    if think is not None:
        result = run_closed_loop(user.new_record, user.send, samples, args.max_concurrency, think, stop_event=stop,
                                 stop_timeout=args.stop_timeout)
        return _Outcome(result.records, result.duration, [], len(samples) - len(result.records))
    result = run_open_loop(user.new_record, user.send, samples, offsets, max_concurrency=args.max_concurrency,
                           stop_event=stop, stop_timeout=args.stop_timeout)
    return _Outcome(result.records, result.duration, result.schedule_lags_s, len(samples) - len(result.records))


class _DistributedSetup:
    """The master side: bind, start local workers for ``--processes``, wait for them, stop them after."""

    def __init__(self, args: argparse.Namespace, env: Any) -> None:
        self.args = args
        self.env = env
        self.procs: list[Any] = []
        self.result_workers: list[Any] = []

    def __enter__(self) -> _DistributedSetup:
        import socket
        import subprocess

        from llmload.distributed import BenchMaster

        args = self.args
        expected = args.processes or args.expect_workers
        if not expected or expected < 1:
            raise ConfigError("--master needs --expect-workers N (N >= 1)")
        bind_host, bind_port = args.master_bind_host, args.master_bind_port
        if args.processes:
            bind_host = "127.0.0.1"
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                bind_port = probe.getsockname()[1]
        try:
            self.runner = self.env.create_master_runner(bind_host, bind_port)
        except Exception as exc:
            raise ConfigError(f"cannot bind the master to {bind_host}:{bind_port}: {exc}") from None
        self.bench = BenchMaster(self.runner)
        if args.processes:
            cmd = [sys.executable, "-m", "llmload.cli", "bench", "--worker", "--master-host", "127.0.0.1",
                   "--master-port", str(bind_port)]
            for _ in range(args.processes):
                self.procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                                   start_new_session=True))
            _log(f"Started {args.processes} local worker processes (pids {' '.join(str(p.pid) for p in self.procs)})")
        else:
            _log(f"Master listening on {bind_host}:{bind_port}; waiting for {expected} workers "
                 f"(llmload bench --worker --master-host THIS_HOST --master-port {bind_port})")
        self.clients = self.bench.wait_for_workers(expected, args.expect_workers_max_wait, _log)
        if not self.clients:
            raise LLMLoadError(f"fewer than {expected} workers connected within {args.expect_workers_max_wait:g} s")
        return self

    def run(self, run_config: dict[str, Any], samples: list, offsets: Any, stop: Any) -> _Outcome:
        result = self.bench.run(self.clients, run_config, samples, offsets, self.args.max_concurrency, stop,
                                self.args.stop_timeout, _log)
        self.result_workers = result.workers
        workers = [{"worker": f"worker{w.index}", "assigned": len(w.assigned), "dispatched": len(w.dispatched),
                    "records": w.records, "lost": w.lost} for w in result.workers]
        return _Outcome(result.records, result.end - result.start, result.schedule_lags_s, result.unsent,
                        workers, result.lost)

    def __exit__(self, *exc: object) -> None:
        try:
            self.runner.quit()
        except Exception:
            pass
        for proc in self.procs:
            try:
                proc.wait(timeout=5)
            except Exception:
                proc.kill()
                proc.wait()


def _schedule(args: argparse.Namespace, samples: list) -> tuple[list, Any]:
    """Send offsets for the samples: the trace's own times, a rate shape, constant spacing, or vLLM's
    gamma schedule (exactly as benchmark_serving computes it from the seed)."""
    import numpy as np

    from llmload.arrivals import constant_offsets, vllm_send_offsets

    if args.dataset_name == "trace":
        if args.rate_shape or args.constant_rate:
            raise ConfigError("a trace brings its own arrival times: drop --rate-shape/--constant-rate")
        return samples, np.asarray([s.arrival_s or 0.0 for s in samples])
    rng = np.random.RandomState(args.seed)
    if args.rate_shape:
        from llmload.shapes import parse_shape, rate_offsets

        offsets = rate_offsets(parse_shape(args.rate_shape, "--rate-shape"), rng, args.burstiness)
        if not len(offsets):
            raise ConfigError("--rate-shape gives no requests over its duration")
        return [samples[i % len(samples)] for i in range(len(offsets))], offsets
    if args.constant_rate:
        return samples, constant_offsets(len(samples), args.request_rate)
    return samples, vllm_send_offsets(len(samples), args.request_rate, args.burstiness, rng=rng,
                                      ramp_up_strategy=args.ramp_up_strategy,
                                      ramp_up_start_rps=args.ramp_up_start_rps,
                                      ramp_up_end_rps=args.ramp_up_end_rps)


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


def _report(args: argparse.Namespace, outcome: _Outcome, samples: list, tokenizer: Any, tokenizer_id: str,
            model: str, target: str, health_report: dict[str, Any], goodput: Any, percentiles: list,
            selected: list, metadata: dict[str, str]) -> int:
    from llmload.bench.health import judge
    from llmload.bench.results import default_filename, records_path, write_json, write_records
    from llmload.metrics import compute_metrics, detailed_lists
    from llmload.summary import format_summary

    records = sorted(outcome.records, key=lambda r: r.intended_send or 0.0)
    for r in records:
        if r.output_tokens_source == "pending":
            r.output_tokens = len(tokenizer(r.generated_text, add_special_tokens=False).input_ids)
            r.output_tokens_source = "tokenizer"
    metrics = compute_metrics(records, max(outcome.duration, 1e-9), goodput_slos=goodput,
                              selected_percentiles=percentiles, selected_metrics=selected,
                              ttft_rule=args.ttft_rule, schedule_lags_s=outcome.schedule_lags_s)
    health_report = judge(health_report, metrics.itl.median_ms)
    print(format_summary(metrics, backend_label=args.backend, request_rate=args.request_rate,
                         burstiness=args.burstiness, max_concurrency=args.max_concurrency,
                         client_health=health_report), flush=True)
    if outcome.unsent:
        print(f"{'Not sent (run stopped early):':<40} {outcome.unsent:<10}")
    if outcome.workers is not None:
        print(f"{'Workers:':<40} {len(outcome.workers):<10}")
        for w in outcome.workers:
            status = "LOST" if w["lost"] else "ok"
            print(f"{'  ' + w['worker'] + ' records (' + status + '):':<40} {w['records']:<10}")
        print(f"{'Lost with dead workers:':<40} {outcome.lost:<10}")
    if metrics.failed:
        errors: dict[str, int] = {}
        for r in records:
            if not r.success and not r.cut_off:
                errors[r.error] = errors.get(r.error, 0) + 1
        for message, n in sorted(errors.items(), key=lambda kv: -kv[1])[:3]:
            _log(f"  {n} failed: {message}")

    if args.save_result or args.save_detailed:
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
            **metadata,
            "request_rate": "inf" if math.isinf(args.request_rate) else args.request_rate,
            "burstiness": args.burstiness,
            "max_concurrency": args.max_concurrency,
            **metrics.to_result_dict(),
            "client_health": health_report,
            "not_sent": outcome.unsent,
        }
        if outcome.workers is not None:
            data["workers"] = outcome.workers
            data["lost_with_workers"] = outcome.lost
        if args.save_detailed:
            data.update(detailed_lists(records, metrics))
        label = args.label or args.backend
        filename = args.result_filename or default_filename(label, args.request_rate, args.max_concurrency, model, now)
        path = Path(args.result_dir) / filename
        write_json(path, data)
        rec_path = records_path(path, args.records_format)
        write_records(rec_path, records, args.records_format)
        _log(f"Saved result to {path} and {len(records)} request records to {rec_path}")
    return 0 if metrics.completed else 1


SIM_PROMPTS = 200
