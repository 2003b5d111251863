"""Wire llmload into a ``locust -f`` run: options, the workload, record collection and the final summary.

A locustfile only needs ``from llmload.locust import ShareGPTUser``; importing it calls :func:`install` once.
"""

from __future__ import annotations

import sys
from typing import Any

from locust import events

from llmload.events import llm_events
from llmload.records import RequestRecord

_installed = False
#: records measured in this process
records: list[RequestRecord] = []
_workload_key: tuple | None = None


def install() -> None:
    global _installed
    if _installed:
        return
    _installed = True
    from llmload._compat import import_transformers
    from llmload.options import add_options

    # Import transformers now, before Locust forks --processes workers: a worker that spends seconds importing
    # inside test_start misses its heartbeats and the master declares it dead.
    import_transformers()
    events.init_command_line_parser.add_listener(add_options)
    events.init.add_listener(_on_init)
    events.test_start.add_listener(_on_test_start)
    events.test_stop.add_listener(_on_test_stop)
    events.quitting.add_listener(_on_quitting)
    llm_events.request_complete.add_listener(_collect)


#: records not yet shipped to the master (workers only)
_outbox: list[dict[str, Any]] = []
_worker_runner: Any = None
#: on a worker: how many workers share the prompts (Locust's WorkerRunner does not know; the master says)
_shard_count = 1
_samples: list[Any] = []


def _collect(record: RequestRecord, **_: Any) -> None:
    if _worker_runner is not None:
        _outbox.append(record.to_dict())
    else:
        records.append(record)


def _on_init(environment: Any, **_: Any) -> None:
    """Distributed ``locust -f``: workers ship records in batches; the master keeps them, and its quit waits
    for every worker's final batch (plain Locust quits 0.5 s after stop and drops what is still in flight)."""
    global _worker_runner
    from locust.runners import MasterRunner, WorkerRunner

    runner = environment.runner
    opts = environment.parsed_options
    if getattr(opts, "user_shape", "") and not isinstance(runner, WorkerRunner):
        from llmload.errors import LLMLoadError
        from llmload.shapes import parse_shape, user_shape_class

        try:
            shape = user_shape_class(parse_shape(opts.user_shape, "--user-shape"))()
        except LLMLoadError as exc:
            sys.stderr.write(f"llmload: error: {exc}\n")
            sys.exit(2)
        shape.runner = runner
        environment.shape_class = shape
    from locust.runners import LocalRunner

    if isinstance(runner, LocalRunner):
        # build the workload before Locust starts its run timer (-t), not inside the timed run
        from llmload.errors import LLMLoadError

        try:
            configure_users(environment)
        except LLMLoadError as exc:
            sys.stderr.write(f"llmload: error: {exc}\n")
            sys.exit(exc.exit_code)
    if isinstance(runner, WorkerRunner):
        import gevent

        _worker_runner = runner

        def total_users(user_count: int, **_: Any) -> None:
            # the master announces the test's total user count; open-loop users divide the rate by it
            if environment.parsed_options is not None:
                environment.parsed_options.num_users = user_count

        environment.events.spawning_complete.add_listener(total_users)

        def shard(msg: Any, **_: Any) -> None:
            global _shard_count
            _shard_count = max(1, int(msg.data.get("count", 1)))

        runner.register_message("llm_shard", shard)

        def ship_forever() -> None:
            while True:
                gevent.sleep(1.0)
                _ship()

        gevent.spawn(ship_forever)
    elif isinstance(runner, MasterRunner):
        from llmload.distributed import clock_offset, shift_record

        mine = clock_offset()

        def receive(msg: Any, **_: Any) -> None:
            shift = float(msg.data.get("clock", mine)) - mine
            for raw in msg.data.get("records", []):
                record = RequestRecord.from_dict(raw)
                shift_record(record, shift)
                record.worker = f"worker{runner.get_worker_index(msg.node_id)}"
                records.append(record)

        runner.register_message("llm_records", receive)

        def announce_shards(**_: Any) -> None:
            # sent before the spawn messages on the same ordered channel, so workers know it at test_start
            for client in runner.clients.values():
                runner.send_message("llm_shard", {"count": runner.worker_count}, client_id=client.id)

        environment.events.test_start.add_listener(announce_shards)
        original_quit = runner.quit

        def quit_after_final_batches() -> None:
            # stop() tells workers to stop and waits until each reports it stopped; each worker ships its
            # final batch (test_stop) before that report, on the same ordered channel.
            runner.stop()
            original_quit()

        runner.quit = quit_after_final_batches


def _ship() -> None:
    global _outbox
    if _worker_runner is None or not _outbox:
        return
    from llmload.distributed import clock_offset

    batch, _outbox = _outbox, []
    _worker_runner.send_message("llm_records", {"records": batch, "clock": clock_offset()})


def _on_test_stop(environment: Any, **_: Any) -> None:
    _ship()


def _is_master(environment: Any) -> bool:
    from locust.runners import MasterRunner

    return isinstance(environment.runner, MasterRunner)


def configure_users(environment: Any) -> None:
    """Build the workload from the parsed options and hand it to every LLM user class (once per set of
    options). Raises :class:`~llmload.errors.LLMLoadError` with a one-line message."""
    global _samples, _workload_key
    from llmload.arrivals import parse_think_time
    from llmload.errors import LLMLoadError
    from llmload.options import api_key
    from llmload.users import LLMUser
    from llmload.workload import Workload

    opts = environment.parsed_options
    host = (environment.host or "").rstrip("/")
    model = opts.model
    if not model and host:
        from llmload.bench.run import served_models

        try:
            served = served_models(host, api_key(opts))
            model = served[0] if served else ""
        except LLMLoadError:
            model = ""
    tokenizer_id = opts.tokenizer or model or "builtin"
    key = (opts.dataset_name, opts.dataset_path, opts.num_prompts, opts.seed, opts.max_tokens, tokenizer_id)
    think = parse_think_time(opts.think_time) if opts.think_time else None
    for cls in environment.user_classes:
        if issubclass(cls, LLMUser):
            cls.backend = opts.backend
            cls.endpoint = opts.endpoint or None
            cls.model = cls.model or model
            cls.ignore_eos = opts.ignore_eos
            cls.ttft_rule = opts.ttft_rule
            cls.api_key = api_key(opts)
            cls.max_concurrency = opts.max_concurrency or None
            cls.think = staticmethod(think) if think is not None else None
    if key != _workload_key:
        _samples = _build_samples(opts, tokenizer_id)
        _workload_key = key
    index = max(0, getattr(environment.runner, "worker_index", 0) or 0)
    count = _shard_count if _worker_runner is not None else 1
    workload = Workload(_samples, index % count, count)
    for cls in environment.user_classes:
        if issubclass(cls, LLMUser):
            cls.workload = workload


def _build_samples(opts: Any, tokenizer_id: str) -> list[Any]:
    from llmload._compat import import_transformers
    from llmload.datasets import load_samples
    from llmload.tokenizer import load_tokenizer

    import_transformers()
    tokenizer = load_tokenizer(tokenizer_id)
    options: dict[str, Any] = {}
    if opts.dataset_name == "sharegpt" and opts.max_tokens:
        options["fixed_output_len"] = opts.max_tokens
    elif opts.dataset_name == "random" and opts.max_tokens:
        options["output_len"] = opts.max_tokens
    elif opts.dataset_name == "custom":
        options["default_output_len"] = opts.max_tokens or 256
    return load_samples(opts.dataset_name, opts.dataset_path or None, tokenizer, opts.num_prompts, opts.seed,
                        **options)


def _on_test_start(environment: Any, **_: Any) -> None:
    """Options may have changed in the web UI's start form, and workers only now have the master's options."""
    from llmload.errors import LLMLoadError

    if _is_master(environment):
        return
    try:
        configure_users(environment)
    except LLMLoadError as exc:
        sys.stderr.write(f"llmload: error: {exc}\n")
        environment.process_exit_code = exc.exit_code
        if environment.runner is not None:
            environment.runner.quit()


def _on_quitting(environment: Any, **_: Any) -> None:
    if _worker_runner is not None or not records:
        return
    from llmload.metrics import compute_metrics
    from llmload.summary import format_summary

    done = [r for r in records if r.chunk_times]
    start = min(r.start for r in records)
    end = max((r.end or r.start) for r in done) if done else start
    metrics = compute_metrics(records, max(end - start, 1e-9), selected_metrics=("ttft", "tpot", "itl", "e2el"),
                              ttft_rule=environment.parsed_options.ttft_rule)
    summary = format_summary(metrics, backend_label=environment.parsed_options.backend)
    by_worker: dict[str, int] = {}
    for r in records:
        by_worker[r.worker] = by_worker.get(r.worker, 0) + 1
    if _is_master(environment):
        summary += "\n" + "\n".join(f"{'Records from ' + w + ':':<40} {n:<10}" for w, n in sorted(by_worker.items()))
    print(summary, file=sys.stderr, flush=True)
    path = environment.parsed_options.llm_records
    if path:
        from pathlib import Path

        from llmload.bench.results import write_records

        write_records(Path(path), records)
        print(f"llmload: wrote {len(records)} request records to {path}", file=sys.stderr, flush=True)
