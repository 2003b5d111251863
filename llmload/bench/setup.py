"""The set-up steps of ``llmload bench``: the target (start the simulator, ask ``/v1/models``), the workload
(tokenizer, samples, schedule), the user that sends, and the initial test request."""

from __future__ import annotations

import argparse
import shlex
from contextlib import ExitStack
from dataclasses import dataclass
from time import perf_counter
from typing import Any

from llmload.bench.console import log
from llmload.bench.plan import SIM_PROMPTS, RunPlan
from llmload.errors import DatasetError, EndpointError
from llmload.urls import redact_url


@dataclass(frozen=True)
class Target:
    """The server a run measures."""

    base_url: str
    model: str
    tokenizer_id: str
    #: the built-in simulator started for this run
    built_in_sim: bool
    #: llmload's simulator (built in, or found at --base-url)
    simulator: bool

    @property
    def shown(self) -> str:
        """How results name the target (credentials never shown)."""
        return "llmload-sim" if self.built_in_sim else redact_url(self.base_url)


@dataclass(frozen=True)
class Workload:
    tokenizer: Any
    samples: list[Any]
    schedule: Any


def start_target(plan: RunPlan, stack: ExitStack) -> Target:
    """The server: ``--base-url``, or the built-in simulator started now (stopped when ``stack`` closes)."""
    from llmload.simproc import SimProcess

    args = plan.args
    base_url = plan.base_url
    if plan.use_sim:
        sim_args = ["--tokenizer", "builtin", *shlex.split(args.sim_args)]
        if args.model:
            sim_args += ["--model", args.model]
        log(f"No --base-url given: starting the built-in simulator (llmload sim {' '.join(sim_args)})")
        sim = stack.enter_context(SimProcess(sim_args))
        base_url = sim.url
        log(f"Simulator ready at {base_url} (pid {sim.pid}); it is stopped when the run ends")
    assert base_url is not None
    from llmload.target import resolve_target

    model, hint, simulator = resolve_target(args, base_url, plan.api_key)
    tokenizer_id = args.tokenizer or ("builtin" if plan.use_sim else hint or model)
    return Target(base_url, model, tokenizer_id, plan.use_sim, simulator or plan.use_sim)


def load_workload(plan: RunPlan, target: Target, extra: int = 0) -> Workload:
    """Tokenizer, samples and the run's schedule; ``extra`` more samples first (a sweep's warm-up)."""
    from llmload._compat import import_transformers
    from llmload.core.schedule import Schedule
    from llmload.core.workload import dataset_options
    from llmload.datasets import load_samples
    from llmload.tokenizer import BUILTIN, load_counting_tokenizer

    args = plan.args
    num_prompts = plan.num_prompts
    if target.simulator and args.num_prompts is None and args.dataset_name != "trace":
        num_prompts = SIM_PROMPTS  # a running llmload sim: the same default as the built-in one
    if num_prompts and extra:
        num_prompts += extra
    log(f"Loading tokenizer {target.tokenizer_id!r} and {num_prompts or 'all'} prompts from the "
        f"{args.dataset_name} dataset")
    if target.tokenizer_id != BUILTIN:
        import_transformers()
    tokenizer = load_counting_tokenizer(target.tokenizer_id, trust_remote_code=args.trust_remote_code)
    samples = load_samples(args.dataset_name, args.dataset_path, tokenizer, num_prompts, args.seed,
                           **dataset_options(args))
    if num_prompts and len(samples) < num_prompts:
        log(f"warning: the dataset gave {len(samples)} usable prompts, fewer than --num-prompts {num_prompts}")
    if not samples:
        raise DatasetError("the dataset gave no usable prompts")
    return Workload(tokenizer, samples, Schedule.build(plan.spec, samples))


def run_config(plan: RunPlan, target: Target) -> dict[str, Any]:
    """What every process needs to build the user that sends (it travels to workers in their jobs)."""
    from llmload.core.settings import UserSettings

    settings = UserSettings.from_options(plan.args, model=target.model, api_key=plan.api_key,
                                         conversation=plan.conversation)
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
