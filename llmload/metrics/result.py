"""The computed numbers of one run: :class:`Distribution` per latency list and :class:`BenchmarkMetrics`, with the
result JSON's keys in vLLM's order followed by llmload's own (``to_result_dict``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from llmload.common.choices import (  # noqa: F401  (re-exported; one spelling: llmload.common.choices)
    METRIC_NAMES,
    PERCENTILE_METRIC_NAMES,
    QUEUE_METRIC_NAMES,
    TTFT_RULES,
)
from llmload.metrics.distribution import Distribution, percentile_label  # noqa: F401  (re-exported)

if TYPE_CHECKING:
    from llmload.metrics.conversation_result import ConversationMetrics

#: the ``--save-detailed`` lists, as vLLM names them
DETAILED_KEYS = ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors")
#: keys of the top level that describe the whole run, so ``by_class`` entries leave them out
RUN_WIDE_KEYS = frozenset({"duration", "ttft_rule", "late_sends", "late_send_threshold_ms"})


@dataclass(slots=True)
class BenchmarkMetrics:
    """Everything the summary block and the result JSON report (formulas: :mod:`llmload.metrics`)."""

    duration: float
    completed: int
    failed: int
    cut_off: int
    total_requests: int
    #: prompt tokens over completed requests, vLLM's ``total_input_tokens``: the dataset's sum until
    #: :meth:`follow_vllm`, then the server's count where it reported one (today's vLLM; 0.7 keeps the dataset's)
    total_input: int
    total_output: int
    request_throughput: float
    #: None when no ``--goodput`` SLOs were given (vLLM writes null then)
    request_goodput: float | None
    output_throughput: float
    total_token_throughput: float
    max_output_tokens_per_s: float
    max_concurrent_requests: int
    ttft: Distribution
    tpot: Distribution
    itl: Distribution
    e2el: Distribution
    tpot_steady: Distribution
    queue_time: Distribution
    schedule_lag: Distribution
    late_sends: int
    late_send_threshold_ms: float
    selected_metrics: tuple[str, ...]
    selected_percentiles: tuple[float, ...]
    goodput_slos: dict[str, float] | None
    ttft_rule: str
    output_tokens_source: dict[str, int]
    prompt_tokens_mismatch: int
    prompt_tokens_server_minus_dataset: int
    #: the server's ``usage.prompt_tokens`` summed over completed requests (the dataset's length where a
    #: request had none); None when no completed request carried it
    total_input_server: int | None = None
    #: per record, in input order: counted output tokens (0 unless completed), as vLLM's ``actual_output_lens``
    output_lens: Sequence[int] = field(default_factory=list)
    #: failed and cut-off requests by kind (:data:`llmload.client.failures.KINDS`), most frequent first
    failures_by_kind: dict[str, int] = field(default_factory=dict)
    #: one error message per kind in ``failures_by_kind`` (the first one seen)
    failure_examples: dict[str, str] = field(default_factory=dict)
    #: SLOs (ms) of the user classes that have their own; they replace ``goodput_slos`` for that class
    class_slos: dict[str, dict[str, float]] = field(default_factory=dict)
    #: user class -> that class's metrics; empty unless the records carry more than one class
    by_class: dict[str, BenchmarkMetrics] = field(default_factory=dict)
    #: model (or LoRA adapter) -> the metrics of the requests that named it; empty unless they named several
    by_model: dict[str, BenchmarkMetrics] = field(default_factory=dict)
    #: turns, conversations, reasoning and prefix-cache numbers; None for a run with none of those
    #: (:mod:`llmload.metrics.conversations`)
    conversations: ConversationMetrics | None = None
    #: completed requests that met every SLO (``request_goodput`` is this over the duration); None without SLOs
    good_requests: int | None = None
    #: requests the client cancelled on purpose (``--cancel-rate``): neither completed nor failed
    cancelled: int = 0
    #: the dataset's prompt lengths summed over completed requests (vLLM 0.7's ``total_input_tokens``); None
    #: until :meth:`follow_vllm` decides which count ``total_input`` holds
    total_input_dataset: int | None = None
    #: ``max_concurrent_requests`` as vLLM 0.7 counted it (the most requests active in one 1-second bucket)
    max_concurrent_requests_per_second: int = 0
    #: ``--vllm-compat``: whose meanings the vLLM keys follow (None: today's vllm bench serve; "0.7")
    vllm_compat: str | None = None
    #: ``--slice-duration``: the slices' length (s) and one dict per slice (:mod:`llmload.metrics.slices`)
    slice_duration: float | None = None
    slices: list[dict[str, Any]] = field(default_factory=list)
    #: today's vLLM's client-side queue metrics asked for with ``--percentile-metrics`` (:data:`QUEUE_METRICS
    #: <llmload.metrics.definitions.QUEUE_METRICS>`), over completed requests; empty when none was
    client_queue: dict[str, Distribution] = field(default_factory=dict)
    #: ``--response-format``: completed requests whose answer was checked (None: the run asked for no response
    #: format), and those that parsed and matched the schema (``structured_output`` in the result JSON)
    structured_checked: int | None = None
    structured_valid: int = 0
    #: ``--tools``: tool calls in the completed answers (None: the run sent no tools and got none), and the
    #: answers with at least one (``tool_calls`` and ``tool_call_answers`` in the result JSON)
    tool_calls: int | None = None
    tool_call_answers: int = 0
    #: every request went to a pooling endpoint (embeddings, pooling, rerank): vLLM's pooling keys and summary
    pooling: bool = False
    #: vLLM's ``total_input_sequences`` (pooling: prompts embedded, documents ranked) over completed requests
    input_sequences: int = 0
    #: images sent with completed requests, and the bytes of their URLs
    images: int = 0
    image_bytes: int = 0
    #: completed requests whose send was timed (images or pooling inputs), their mean and longest send (ms)
    sends: int = 0
    send_mean_ms: float = 0.0
    send_max_ms: float = 0.0

    def follow_vllm(self, compat: str | None) -> None:
        """Take the meanings of the vLLM the run follows (docs/vllm-compat.md): today's ``vllm bench serve``
        counts input tokens from the server's ``usage.prompt_tokens`` where it reported them, so
        ``total_input`` (and ``total_token_throughput``) become that count; ``--vllm-compat 0.7`` keeps the
        dataset's. The dataset's sum stays in ``total_input_dataset`` either way; the parts follow too."""
        self.vllm_compat = compat
        if self.total_input_dataset is None:
            self.total_input_dataset = self.total_input
        if compat != "0.7" and self.total_input_server is not None:
            self.total_input = self.total_input_server
            self.total_token_throughput = (self.total_input + self.total_output) / self.duration
        for part in (*self.by_class.values(), *self.by_model.values()):
            part.follow_vllm(compat)

    @property
    def reported_max_concurrent(self) -> int:
        """``max_concurrent_requests`` as the vLLM the run follows counts it (today's exact peak; 0.7's bucket)."""
        return self.max_concurrent_requests_per_second if self.vllm_compat == "0.7" else self.max_concurrent_requests

    @property
    def structured_output(self) -> dict[str, Any] | None:
        """The result JSON's ``structured_output``: ``{requests, valid, valid_rate}`` over the completed requests
        whose answers were checked (``valid_rate`` None when there were none); None without a response format."""
        n = self.structured_checked
        if n is None:
            return None
        return {"requests": n, "valid": self.structured_valid, "valid_rate": self.structured_valid / n if n else None}

    @property
    def sent(self) -> int:
        """Requests sent (or due and cut off): completed + failed + cancelled + cut off."""
        return self.completed + self.failed + self.cancelled + self.cut_off

    def slos_ms(self) -> dict[str, Any] | None:
        """The SLOs as ``--goodput`` gave them: run-wide ``{metric: ms}``, plus ``{class: {metric: ms}}``."""
        slos: dict[str, Any] = dict(self.goodput_slos or {})
        slos.update({c: dict(s) for c, s in self.class_slos.items()})
        return slos or None

    def to_result_dict(self) -> dict[str, Any]:
        """The result JSON: vLLM's keys first (selected metrics only), then llmload's own keys (with
        ``conversations``, ``turns``, ``reasoning``, ``prefix_cache`` when the run has that data), then
        ``by_class`` when the run had more than one user class."""
        if self.pooling:
            return self._pooling_result_dict()
        result: dict[str, Any] = {
            "duration": self.duration,
            "completed": self.completed,
            "total_input_tokens": self.total_input,
            "total_output_tokens": self.total_output,
            "request_throughput": self.request_throughput,
            "request_goodput": self.request_goodput,
            "output_throughput": self.output_throughput,
            "total_token_throughput": self.total_token_throughput,
            "max_output_tokens_per_s": self.max_output_tokens_per_s,
            "max_concurrent_requests": self.reported_max_concurrent,
        }
        for name in METRIC_NAMES:
            if name in self.selected_metrics:
                result.update(getattr(self, name).keys(name))
        for name, dist in self.client_queue.items():
            result.update(dist.keys(name))
        result.update(self._own_keys())
        result.update(self.tpot_steady.keys("tpot_steady"))
        self._lag_keys(result)
        if self.conversations is not None:
            result.update(self.conversations.result_keys())
        if self.structured_checked is not None:
            result["structured_output"] = self.structured_output
        if self.tool_calls is not None:
            result["tool_calls"] = self.tool_calls
            result["tool_call_answers"] = self.tool_call_answers
        self._part_keys(result)
        return result

    def _pooling_result_dict(self) -> dict[str, Any]:
        """Today's ``vllm bench serve`` keys of a pooling run (no output tokens, TTFT, TPOT or ITL; E2EL, its default
        and only latency), then llmload's own."""
        result: dict[str, Any] = {
            "duration": self.duration,
            "completed": self.completed,
            "total_input_tokens": self.total_input,
            "total_input_sequences": self.input_sequences,
            "request_throughput": self.request_throughput,
            "input_sequence_throughput": self.input_sequences / self.duration,
            "total_token_throughput": self.total_token_throughput,
        }
        result.update(self.e2el.keys("e2el"))  # the one latency a pooling request has (a mixed run's selection aside)
        for name, dist in self.client_queue.items():
            result.update(dist.keys(name))
        result.update(self._own_keys())
        del result["ttft_rule"]  # nothing is streamed
        self._lag_keys(result)
        self._part_keys(result)
        return result

    def _part_keys(self, result: dict[str, Any]) -> None:
        """The breakdowns, last: ``by_class``, ``by_model`` and the slices, where the run has them."""
        if self.by_class:
            result["by_class"] = {c: m.class_result_dict() for c, m in self.by_class.items()}
        if self.by_model:
            result["by_model"] = {name: m.class_result_dict() for name, m in self.by_model.items()}
        if self.slice_duration:
            result["slice_duration"] = self.slice_duration
            result["slices"] = self.slices

    def _lag_keys(self, result: dict[str, Any]) -> None:
        result.update(self.queue_time.keys("queue_time", with_max=True))
        result.update(self.schedule_lag.keys("schedule_lag", with_max=True))
        result["late_sends"] = self.late_sends
        result["late_send_threshold_ms"] = self.late_send_threshold_ms

    def _media_keys(self) -> dict[str, Any]:
        """Images and send times, where the run had them (a text-only generation run's keys stay as they were)."""
        out: dict[str, Any] = {}
        if self.images:
            out["total_images"] = self.images
            out["total_image_bytes"] = self.image_bytes
        if self.sends:
            out["mean_request_send_ms"] = self.send_mean_ms
            out["max_request_send_ms"] = self.send_max_ms
        return out

    def _own_keys(self) -> dict[str, Any]:
        return {
            "failed": self.failed,
            "cancelled": self.cancelled,
            "cut_off": self.cut_off,
            "total_requests": self.total_requests,
            "sent": self.sent,
            "failures_by_kind": dict(self.failures_by_kind),
            "failure_examples": dict(self.failure_examples),
            "ttft_rule": self.ttft_rule,
            "output_tokens_source": dict(self.output_tokens_source),
            "prompt_tokens_mismatch": self.prompt_tokens_mismatch,
            "prompt_tokens_server_minus_dataset": self.prompt_tokens_server_minus_dataset,
            "total_input_tokens_server": self.total_input_server,
            "total_input_tokens_dataset": (self.total_input_dataset if self.total_input_dataset is not None
                                           else self.total_input),
            "goodput_slos_ms": self.slos_ms(),
            **self._media_keys(),
        }

    def class_result_dict(self) -> dict[str, Any]:
        """One ``by_class`` entry: the top level's per-request keys over this class's requests (the run's
        duration; schedule lag and the TTFT rule belong to the whole run and are left out)."""
        return {k: v for k, v in self.to_result_dict().items()
                if k not in RUN_WIDE_KEYS and not k.endswith("_schedule_lag_ms")}
