"""One run's lifecycle, the same object under every way in (docs/design.md, "Run lifecycle")::

    config    RunConfig.from_options(options)   the options decided once: schedule spec, SLOs, metrics, loop
    target    Target.resolve(...)               the server: URL, model, tokenizer, whether it is llmload's sim
    load      Run.load()   -> Workload          the tokenizer and the samples (the prompt count decided here)
    plan      Run.plan()   -> Schedule           (the web UI: a steerable LiveSchedule); Schedule.share per worker
    start     send_share()                       this process's part: open loop, or closed loop with think time
    drain     StopControl                        stop, --stop-timeout, cut (core/dispatch.py)
    finish    Run.finish(outcome) -> Measured    records in send order, pending outputs counted, the metrics

``llmload bench`` (one process, or its ``--processes`` / ``--master`` workers), each point of ``llmload sweep``,
``locust -f`` (Locust's events call the steps: plugin/run.py) and ``llmload ui`` (``locust -f`` with the web UI)
drive this; what differs between them is how they start processes and where they print.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from llmload.client.records import RequestRecord
from llmload.common.errors import DatasetError, LLMLoadError
from llmload.common.urls import redact_url
from llmload.core.conversation import ConversationPolicy, request_count
from llmload.core.dispatch import RequestQueue, StopControl, Tally, run_closed_loop, run_open_loop
from llmload.core.modalities import check_samples
from llmload.core.outcome import finish_records
from llmload.core.schedule import LiveSchedule, Schedule, Scheduled, ScheduleSpec
from llmload.core.shaping import shaping_from
from llmload.core.sink import RecordSink
from llmload.core.workload import (
    chat_backend_for_conversations,
    check_conversation_options,
    check_dataset_flags,
    dataset_options,
    replays_sessions,
    replays_trace,
    schedule_spec,
)
from llmload.datasets.base import SamplesOnRead
from llmload.metrics.cost import Deployment, deployment_from
from llmload.metrics.spill import Chunked
from llmload.options import option_value

Log = Callable[[str], None]


def _quiet(_line: str) -> None:
    """A log that says nothing."""


@dataclass(frozen=True)
class RunConfig:
    """What the options decide for every way in, once: checked (ConfigError, one line) before the first request.

    ``think``: the closed loop's ``--think-time`` spec (None: open loop, or Locust's own users); ``backend`` is
    the dialect actually spoken (``--multi-turn`` switches vLLM's completions to chat)."""

    spec: ScheduleSpec
    goodput: dict[str, float] | None
    percentiles: tuple[float, ...]
    metrics: tuple[str, ...]
    ttft_rule: str
    backend: str
    conversation: ConversationPolicy | None
    think: str | None
    max_concurrency: int | None
    stop_timeout: float
    #: the GPUs behind the server (``--gpus``, ``--gpu-type``, ``--gpu-hour-cost``): per GPU and cost
    deployment: Deployment = field(default_factory=Deployment)
    #: ``--slice-duration``: seconds per time slice of the result (None: no slices)
    slice_duration: float | None = None
    #: ``--vllm-compat``: whose meanings the vLLM keys follow (None: today's vllm bench serve)
    vllm_compat: str | None = None

    @classmethod
    def from_options(cls, options: Any, *, live: bool = False) -> RunConfig:
        """The run's configuration from parsed options (bench's argparse namespace or Locust's: one table,
        :mod:`llmload.options`). ``--multi-turn`` with a completions dialect sets ``options.backend`` to chat.
        ``live``: the web UI's steerable schedule, which takes the rate and burstiness only (the start form's
        ramp-up select always holds a choice), so only those are checked."""
        from llmload.core.arrivals import parse_think_time, validate_arrivals
        from llmload.core.parts import part_seconds
        from llmload.metrics import parse_goodput
        from llmload.metrics.spill import spill_threshold

        spill_threshold()  # LLMLOAD_SPILL_AFTER, if set, is a number: said now, not at the first value
        part_seconds()  # LLMLOAD_PART_S likewise
        spec = schedule_spec(options)
        if live:
            validate_arrivals(spec.request_rate, spec.burstiness)
        else:
            validate_arrivals(spec.request_rate, spec.burstiness, spec.ramp_up_strategy, spec.ramp_up_start_rps,
                              spec.ramp_up_end_rps)
        goodput = getattr(options, "goodput", None)
        if isinstance(goodput, str):  # Locust's web form gives a string back
            goodput = goodput.split()
        chat = chat_backend_for_conversations(options)
        if chat is not None:
            options.backend = chat
        think = getattr(options, "think_time", "") or None
        if think:
            parse_think_time(think)  # a bad spec fails here, not at the first request
        shaping_from(options)  # a bad --extra-body or --header too
        check_dataset_flags(options)
        return cls(spec=spec, goodput=parse_goodput(goodput) if goodput else None,
                   percentiles=tuple(options.metric_percentiles), metrics=reported_metrics(options, spec),
                   ttft_rule=options.ttft_rule, backend=options.backend,
                   conversation=check_conversation_options(options), think=think,
                   max_concurrency=getattr(options, "max_concurrency", None) or None,
                   stop_timeout=float(getattr(options, "stop_timeout", 0.0) or 0.0),
                   deployment=deployment_from(options),
                   slice_duration=float(getattr(options, "slice_duration", None) or 0.0) or None,
                   vllm_compat=getattr(options, "vllm_compat", None) or None)


def batches_prompts(options: Any) -> bool:
    """``--num-prompts`` counts prompts (or rerank documents) put several to a request: the dataset gives fewer
    requests than that, and that is no reason to fill up with repeats."""
    return option_value(options, "dataset_name") == "random-rerank" or int(option_value(options,
                                                                                       "random_batch_size")) > 1


def oversamples(options: Any) -> bool:
    """Fill a short dataset up to ``--num-prompts`` (today's vLLM's default): not with ``--no-oversample``, a
    trace (its window is the workload) or whole conversations (sampled by their own rules)."""
    return not (getattr(options, "no_oversample", False) or replays_trace(options) or replays_sessions(options)
                or getattr(options, "multi_turn", False) or batches_prompts(options))


def oversample(samples: Sequence[Any], count: int, seed: int) -> list[Any]:
    """``samples`` then repeats of them drawn with ``random.Random(seed).choice`` up to ``count``, as vLLM
    oversamples (each repeat gets its own request id from the schedule: ``#k`` appended)."""
    import random

    rng = random.Random(seed)
    return [*samples, *(rng.choice(samples) for _ in range(count - len(samples)))]


def reported_metrics(options: Any, spec: ScheduleSpec) -> tuple[str, ...]:
    """``--percentile-metrics`` as today's ``vllm bench serve`` applies it: ``client_queue_time`` only with
    ``--max-concurrency`` (no other wait exists), ``e2el_including_client_queue`` only with it and a finite
    ``--request-rate``; a name that does not apply is left out, as vLLM does."""
    limited = bool(getattr(options, "max_concurrency", None))
    applies = {"client_queue_time": limited,
               "e2el_including_client_queue": limited and math.isfinite(spec.request_rate)}
    names = tuple(name for name in options.percentile_metrics if applies.get(name, True))
    if _pooling(options):  # vLLM's pooling runs: E2EL only, the default
        names = tuple(n for n in names if n not in ("ttft", "tpot", "itl")) or ("e2el",)
    return names


def _pooling(options: Any) -> bool:
    from llmload.client.backends import get_backend

    return get_backend(option_value(options, "backend")).pooling


@dataclass(frozen=True)
class Target:
    """The server a run measures."""

    base_url: str
    model: str
    tokenizer_id: str
    #: llmload's simulator (started for this run, or found at the URL)
    simulator: bool = False
    #: the simulator was started for this run
    built_in_sim: bool = False
    #: the simulator's timing profile (``llmload sim --profile``), as it says at ``/v1/models``
    sim_profile: str | None = None

    @property
    def shown(self) -> str:
        """How results name the target (credentials never shown)."""
        return "llmload-sim" if self.built_in_sim else redact_url(self.base_url)

    @classmethod
    def resolve(cls, options: Any, base_url: str, api_key: str | None, *, built_in_sim: bool = False,
                lenient: bool = False) -> Target:
        """Ask ``/v1/models`` which model to name and which tokenizer it hints at (llmload's sim says so).
        The tokenizer: ``--tokenizer``, else ``builtin`` for the simulator started here, else the server's
        hint, else the model. ``lenient`` (``locust -f``): a server that cannot answer leaves the model as
        given, and its first request says what is wrong."""
        from llmload.core.target import Resolved, resolve_target

        given = (getattr(options, "model", "") or "").split(",")[0].strip()
        try:
            found = resolve_target(options, base_url, api_key, ask=built_in_sim) if base_url else Resolved(given)
        except LLMLoadError:
            if not lenient:
                raise
            found = Resolved(given)
        tokenizer_id = (getattr(options, "tokenizer", "") or ("builtin" if built_in_sim else "") or found.tokenizer
                        or found.model or "builtin")
        return cls(base_url, found.model, tokenizer_id, found.simulator or built_in_sim, built_in_sim,
                   found.profile)


@dataclass(frozen=True)
class Workload:
    """What a run sends, before it is scheduled."""

    tokenizer: Any
    tokenizer_id: str
    model: str
    samples: Sequence[Any]

    def result_keys(self) -> dict[str, int]:
        """A KV-cache trace's own reuse for the result JSON (the prompt tokens in blocks an earlier request of the
        workload began with, from its ``hash_ids``; docs/arrivals.md, "Mooncake traces"; for agentic sessions,
        each session's calls in turn order: docs/agentic.md); empty for others."""
        if isinstance(self.samples, SamplesOnRead):
            return {}  # made when read: single requests, neither sessions nor trace caches
        sessions = [s.session for s in self.samples if getattr(s, "session", None) is not None]
        if sessions:  # agentic sessions: each trace's own reuse, over all of its calls
            return {"trace_prefix_reuse_tokens": sum(a.ideal_reuse_tokens for a in sessions),
                    "trace_prompt_tokens": sum(p.prompt_len for a in sessions for p in a.prompts.values())}
        reusable = [s.trace_cached_tokens for s in self.samples if getattr(s, "trace_cached_tokens", None) is not None]
        if not reusable:
            return {}
        return {"trace_prefix_reuse_tokens": sum(reusable), "trace_prompt_tokens": sum(s.prompt_len for s in self.samples)}


@dataclass
class Outcome:
    """What a run produced, in one process or over workers: every record, how long it ran, the schedule lags
    that count as the client's, what was never sent, and (distributed) each worker's part and what was lost
    with dead workers."""

    records: Sequence[RequestRecord]
    duration: float
    schedule_lags_s: Sequence[float] | Chunked | None
    unsent: int
    workers: list[dict[str, Any]] | None = None
    lost: int = 0
    #: the signal that stopped the run early (None: it ran to the end)
    interrupted_by: int | None = None
    #: the server's scraped metrics and the saturation verdict (:class:`llmload.core.observe.Observed`)
    observed: Any = None
    #: where the records were written as they arrived (:class:`llmload.client.records.journal.RecordJournal`)
    journal: Any = None
    #: today's vLLM's keys measured beside the requests: probes, rate changes, spec decoding
    #: (:class:`llmload.bench.vllm_extras.RunExtras`)
    extras: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Measured:
    """A finished run's records (in send order, outputs counted) and its metrics."""

    records: Sequence[RequestRecord]
    metrics: Any


@dataclass
class Run:
    """One run: its configuration, target, workload and schedule, through load → plan → finish.

    ``log`` says what loading does (bench prints it; ``locust -f`` logs it)."""

    options: Any
    config: RunConfig
    target: Target
    log: Log = _quiet
    workload: Workload | None = None
    schedule: Schedule | LiveSchedule | None = None
    #: the prompts asked for (None: a trace's whole window), decided by :meth:`load`
    num_prompts: int | None = field(default=None, init=False)

    def load(self, extra: int = 0) -> Workload:
        """The tokenizer and samples (``extra`` more first: a sweep's warm-up; a sweep's points are built with
        their session's ``workload`` instead). DatasetError/TokenizerError: one line."""
        from llmload.datasets import load_samples
        from llmload.options import prompt_count
        from llmload.tokenizer import load_counting_tokenizer

        opts, target = self.options, self.target
        num_prompts = self.num_prompts = prompt_count(opts, simulator=target.simulator)
        if num_prompts and extra:
            num_prompts += extra
        self.log(f"Loading tokenizer {target.tokenizer_id!r} and {num_prompts or 'all'} prompts from the "
                 f"{opts.dataset_name} dataset")
        tokenizer = load_counting_tokenizer(target.tokenizer_id,
                                            trust_remote_code=bool(getattr(opts, "trust_remote_code", False)))
        samples = load_samples(opts.dataset_name, getattr(opts, "dataset_path", None) or None, tokenizer,
                               num_prompts, int(option_value(opts, "seed")), **dataset_options(opts))
        if batches_prompts(opts):
            self.log(f"{num_prompts} prompts (rerank: documents) go {len(samples)} requests of up to "
                     f"{option_value(opts, 'random_batch_size')}")
        elif num_prompts and samples and len(samples) < num_prompts:
            if oversamples(opts):
                self.log(f"The dataset gave {len(samples)} usable prompts: {num_prompts - len(samples)} repeats "
                         f"drawn by --seed fill --num-prompts {num_prompts} (--no-oversample: send only those)")
                samples = oversample(samples, num_prompts, int(option_value(opts, "seed")))
            else:
                self.log(f"warning: the dataset gave {len(samples)} usable prompts, fewer than --num-prompts "
                         f"{num_prompts}")
        if not samples:
            raise DatasetError("the dataset gave no usable prompts")
        check_samples(samples, opts.backend)
        self.workload = Workload(tokenizer, target.tokenizer_id, target.model, samples)
        if reuse := self.workload.result_keys():
            reusable, total = reuse["trace_prefix_reuse_tokens"], reuse["trace_prompt_tokens"]
            self.log(f"The trace's own prefix reuse (its hash_ids): {reusable} of {total} prompt tokens "
                     f"({100.0 * reusable / max(1, total):.1f} %) are in blocks an earlier request began with")
        return self.workload

    def plan(self, samples: Sequence[Any] | None = None, classes: Sequence[tuple[str, float]] = (),
             live: bool = False) -> Schedule | LiveSchedule:
        """The schedule of the loaded samples (or ``samples``: a sweep point's), each request drawn a user class
        from ``classes`` (``(name, weight)``, ``locust -f``); ``live``: the web UI's steerable schedule."""
        assert self.workload is not None, "load() comes before plan()"
        chosen = samples if samples is not None else self.workload.samples
        if not isinstance(chosen, SamplesOnRead):
            chosen = list(chosen)
        spec = self.config.spec
        if live:
            rate = spec.request_rate if spec.request_rate != float("inf") else 1.0
            self.schedule = LiveSchedule(chosen, rate, spec.burstiness, spec.seed, list(classes))
        else:
            self.schedule = Schedule.build(spec, chosen, list(classes))
        return self.schedule

    @property
    def planned(self) -> int:
        """Requests the schedule holds (every turn of a conversation is one)."""
        return request_count(self.schedule) if isinstance(self.schedule, Schedule) else 0

    def finish(self, outcome: Outcome, class_slos: dict[str, dict[str, float]] | None = None) -> Measured:
        """The records in send order with their pending outputs counted, and the metrics, by the run's SLOs
        (``class_slos``: a locustfile's per-class ``goodput``), percentiles and TTFT rule."""
        from llmload.metrics import compute_metrics

        records = finish_records(outcome.records, self.workload.tokenizer if self.workload else None)
        config = self.config
        metrics = compute_metrics(records, max(outcome.duration, 1e-9), goodput_slos=config.goodput,
                                  selected_percentiles=config.percentiles, selected_metrics=config.metrics,
                                  ttft_rule=config.ttft_rule, schedule_lags_s=outcome.schedule_lags_s,
                                  class_slos=class_slos, slice_duration_s=config.slice_duration,
                                  vllm_compat=config.vllm_compat)
        if getattr(self.options, "response_format", None) and metrics.structured_checked is None:
            metrics.structured_checked = 0  # asked for, though no answer came to check: the result says so
        if getattr(self.options, "tools", None) and metrics.tool_calls is None:
            metrics.tool_calls = 0  # tools were sent and no answer called one: the result says so
        return Measured(records, metrics)


def send_share(requests: Iterable[Scheduled], sender: Callable[[Any], Any], sink: RecordSink, *,
               control: StopControl, max_concurrency: int | None = None, closed_users: int | None = None,
               think: str | None = None, start_at: float | None = None,
               skip: Callable[[Scheduled], bool] | None = None,
               on_dispatch: Callable[[Scheduled], None] | None = None) -> Tally:
    """Send this process's part of a run: the open loop on the schedule's offsets, or with ``think`` (a
    ``--think-time`` spec) ``closed_users`` closed-loop users taking the requests in turn. ``sender`` gives the
    user that sends (given the request in the open loop, the user's number in the closed loop). The one choice
    between them for ``llmload bench`` and its workers (``locust -f``'s closed loop is Locust's users)."""
    import gevent

    if think is not None:
        from time import perf_counter

        from llmload.core.arrivals import parse_think_time

        if start_at is not None:
            gevent.sleep(max(0.0, start_at - perf_counter()))
        return run_closed_loop(RequestQueue(list(requests)), sender, max(1, closed_users or 1),
                               parse_think_time(think), sink, control=control, on_dispatch=on_dispatch)
    return run_open_loop(requests, sender, sink, max_concurrency=max_concurrency, control=control,
                         start_at=start_at, skip=skip, on_dispatch=on_dispatch)
