"""The set-up steps of ``llmload bench``: the target (start the simulator, ask ``/v1/models``), the run on it
(:class:`llmload.core.run.Run`: workload and schedule), the user that sends, and the initial test request."""

from __future__ import annotations

import argparse
import shlex
from contextlib import ExitStack
from time import perf_counter
from typing import Any

from llmload.bench.console import log
from llmload.bench.plan import RunPlan
from llmload.common.errors import EndpointError
from llmload.common.urls import redact_url
from llmload.core.run import Run, Target


def start_target(plan: RunPlan, stack: ExitStack) -> Target:
    """The server: ``--base-url``, or the built-in simulator started now (stopped when ``stack`` closes)."""
    from llmload.processes.simproc import SimProcess

    args = plan.args
    base_url = plan.base_url
    if plan.use_sim:
        sim_args = ["--tokenizer", "builtin", *shlex.split(args.sim_args)]
        if args.model:
            sim_args += ["--model", args.model]
        if args.lora_modules and "--lora-modules" not in sim_args:
            sim_args += ["--lora-modules", ",".join(args.lora_modules)]  # it serves the adapters asked for
        log(f"No --base-url given: starting the built-in simulator (llmload sim {' '.join(sim_args)})")
        sim = stack.enter_context(SimProcess(sim_args))
        base_url = sim.url
        log(f"Simulator ready at {base_url} (pid {sim.pid}); it is stopped when the run ends")
    assert base_url is not None
    return Target.resolve(args, base_url, plan.api_key, built_in_sim=plan.use_sim)


def new_run(plan: RunPlan, target: Target) -> Run:
    """The run on ``target`` (:class:`llmload.core.run.Run`), saying what it loads on stderr."""
    return Run(plan.args, plan.config, target, log)


def run_config(plan: RunPlan, target: Target) -> dict[str, Any]:
    """What every process needs to build the user that sends (it travels to workers in their jobs)."""
    from llmload.core.settings import UserSettings

    settings = UserSettings.from_options(plan.args, model=target.model, api_key=plan.api_key,
                                         conversation=plan.config.conversation)
    return {"base_url": target.base_url, "user": settings.to_message()}


def make_user_class(run: dict[str, Any]) -> type:
    """A concrete LLM user class for one run's target (also rebuilt on workers from the master's config)."""
    from llmload.client.users import LLMUser
    from llmload.core.settings import UserSettings

    settings = UserSettings.from_message(run["user"])
    return type("BenchUser", (LLMUser,), {"abstract": False, "host": run["base_url"], **settings.attributes()})


def environment(user_class: type | None = None) -> Any:
    from locust.argument_parser import get_parser
    from locust.env import Environment

    from llmload.client.users import LLMUser

    options = get_parser(default_config_files=[]).parse_args(["--headless"])
    return Environment(user_classes=[user_class or LLMUser], parsed_options=options)


def initial_test(user: Any, sample: Any, base_url: str, args: argparse.Namespace) -> None:
    """One request before the run, as benchmark_serving does; says so while a silent server keeps it waiting."""
    import gevent

    log("Starting initial single prompt test run...")
    started = perf_counter()

    def still_waiting() -> None:
        every = 10.0
        while True:
            gevent.sleep(every)
            log(f"  initial test: no answer after {perf_counter() - started:.0f} s (gives up after "
                 f"--read-timeout {args.read_timeout:g} s without data)")
            every = 30.0

    ticker = gevent.spawn(still_waiting)
    try:
        probe = _until_ready(user, sample, float(getattr(args, "ready_check_timeout_sec", 0) or 0))
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


def _until_ready(user: Any, sample: Any, timeout_s: float) -> Any:
    """The initial test's record: one try, or with ``--ready-check-timeout-sec`` tries every ≤ 5 s until one
    succeeds or the time is up (vLLM's ready check: a server still loading its model is not an error yet)."""
    import gevent

    from llmload.core.schedule import INITIAL_TEST_ID, Scheduled

    if timeout_s > 0:
        log(f"Waiting for endpoint to become up in {timeout_s:g} seconds")
    deadline = perf_counter() + timeout_s
    while True:
        record = user.send(Scheduled(-1, 0.0, sample, INITIAL_TEST_ID))
        left = deadline - perf_counter()
        if record.success or left <= 0:
            return record
        last = (str(record.error or "").strip().splitlines() or [""])[-1]
        log(f"  Endpoint is not ready. Error={last!r}; trying again ({left:.0f} s left)")
        gevent.sleep(min(5.0, left))
