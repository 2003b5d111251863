"""The requests of a run and when each is due, computed identically on every process from the seed.

A :class:`Schedule` is finite: one entry per request, in send order, each with its global index, its offset in
seconds from the start of the run, its sample and its request id. Workers of a distributed run take their share
of the one global schedule (:meth:`Schedule.share`), so the same options send the same requests at the same
offsets whether the run is local or distributed (docs/design.md, "Schedule").

A :class:`LiveSchedule` is unbounded and steerable (the web UI's rate control): it draws the same unit-gamma
sequence as vLLM from the seed and maps it through the integrated rate, so a rate change applies from a given
offset on every process alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llmload.common.errors import ConfigError
from llmload.common.onread import OnRead
from llmload.datasets.base import SampleRequest, SamplesOnRead

#: the request id of the one request ``llmload bench`` sends before the run (never one of the run's ids); the
#: warm-ups and probes beside the run take it as a prefix
INITIAL_TEST_ID = "llmload-initial-test"


def is_measured(request_id: str) -> bool:
    """A request of the run itself, not the initial test, a warm-up or a probe (those are never cancelled)."""
    return not request_id.startswith(INITIAL_TEST_ID)


@dataclass(frozen=True)
class ScheduleSpec:
    """The arrival options of a run (``--request-rate``, ``--burstiness``, ramps, shapes, traces)."""

    request_rate: float = math.inf
    burstiness: float = 1.0
    seed: int = 0
    ramp_up_strategy: str | None = None
    ramp_up_start_rps: float | None = None
    ramp_up_end_rps: float | None = None
    constant_rate: bool = False
    rate_shape: str | None = None
    #: the samples carry their own arrival times (trace replay)
    trace: bool = False

    @property
    def open_loop_lag_counts(self) -> bool:
        """Whether schedule lag means anything: with ``--request-rate inf`` every request is due at once, and
        how long spawning them took is not client lag."""
        return not math.isinf(self.request_rate) or bool(self.rate_shape) or self.trace


@dataclass(frozen=True, slots=True)
class Scheduled:
    """One request of a run: what to send, when, and its id (the same in every way in)."""

    index: int
    offset: float
    sample: SampleRequest
    request_id: str
    #: the user class that sends it ('' : the run's only one)
    user_class: str = ""


def request_ids(samples: Sequence[SampleRequest], count: int) -> list[str]:
    """Ids for ``count`` requests cycling over ``samples``: the sample's own id (or its position), with
    ``#k`` appended to the k-th repeat of an id, so every request of a run has a distinct, deterministic id."""
    seen: dict[str, int] = {}
    ids = []
    for i in range(count):
        n = i % len(samples)
        base = samples[n].request_id or str(n)
        k = seen.get(base, 0)
        seen[base] = k + 1
        ids.append(repeat_id(base, k))
    return ids


def repeat_id(base: str, k: int) -> str:
    """The id of the ``k``-th repeat of ``base`` (0: ``base`` itself): how every request id of a run is made."""
    return base if k == 0 else f"{base}#{k}"


class IndexLookup:
    """A record's schedule index: the one it carries (``schedule_index``, every llmload worker's), else found by
    its conversation or request id in a table of ``schedule``'s ids made the first time a record comes without
    one (an older worker's); ``default`` when neither knows it. Both masters file records through it."""

    def __init__(self, schedule: Schedule | None = None) -> None:
        self._schedule = schedule
        self._ids: dict[str, int] | None = None

    def __call__(self, record: Any, default: int) -> int:
        index: int | None = record.schedule_index
        if index is not None:
            return index
        if self._ids is None:
            self._ids = self._schedule.index_of() if self._schedule is not None else {}
        return self._ids.get(record.conversation_id or record.request_id, default)


class RequestIds:
    """The run-wide id of request ``i`` of a run cycling over ``samples``, made when asked: exactly
    :func:`request_ids`' (the sample's own id or its position, ``#k`` appended to its k-th repeat), without a
    string kept per request. The k of request ``i`` at pool position ``p = i % len(samples)`` is its lap times how
    often its id is in the pool, plus how often it came earlier in the pool."""

    def __init__(self, samples: Sequence[SampleRequest]) -> None:
        self._samples = samples
        self._size = len(samples)
        self._mult: np.ndarray | None = None
        self._rank: np.ndarray | None = None
        if isinstance(samples, SamplesOnRead):
            return  # distinct ids, known without making a sample
        if any(s.request_id for s in samples):  # only own ids can repeat (positions never do among themselves)
            seen: dict[str, int] = {}
            rank = np.zeros(self._size, dtype=np.int32)
            for p in range(self._size):
                base = self.base(p)
                rank[p] = seen.get(base, 0)
                seen[base] = rank[p] + 1
            if any(n > 1 for n in seen.values()):
                self._rank = rank
                self._mult = np.fromiter((seen[self.base(p)] for p in range(self._size)), dtype=np.int32,
                                         count=self._size)

    def base(self, position: int) -> str:
        if isinstance(self._samples, SamplesOnRead):
            return self._samples.request_id(position)
        return self._samples[position].request_id or str(position)

    def repeats(self, indices: np.ndarray) -> np.ndarray:
        """The k of each of ``indices`` (int64; 0: the id is its base alone)."""
        positions, laps = indices % self._size, indices // self._size
        if self._mult is None or self._rank is None:
            return laps.astype(np.int64)
        return (laps * self._mult[positions] + self._rank[positions]).astype(np.int64)

    def __call__(self, index: int) -> str:
        position, lap = index % self._size, index // self._size
        k = lap if self._mult is None or self._rank is None else lap * int(self._mult[position]) + int(
            self._rank[position])
        return repeat_id(self.base(position), k)


class MadeOnRead(OnRead[Scheduled]):
    """Requests each made when it is read, not held: a schedule's (:class:`ScheduleEntries`) and a worker's compact
    job (:class:`~llmload.core.messages.JobRequests`)."""


class ScheduleEntries(MadeOnRead):
    """A schedule's requests, each made when read from its offset, its sample and the seed's draws: a run of
    millions of requests keeps 8 bytes a request (its offset) and a byte for its user class, not an object."""

    def __init__(self, samples: Sequence[SampleRequest], offsets: np.ndarray, class_names: Sequence[str],
                 class_picks: np.ndarray | None) -> None:
        self.samples = samples
        self.offsets = offsets
        self.class_names = tuple(class_names) or ("",)
        self.class_picks = class_picks
        self.ids = RequestIds(samples)

    def __len__(self) -> int:
        return int(self.offsets.size)

    def _made(self, i: int) -> Scheduled:
        name = self.class_names[int(self.class_picks[i])] if self.class_picks is not None else self.class_names[0]
        return Scheduled(i, float(self.offsets[i]), self.samples[i % len(self.samples)], self.ids(i), name)


@dataclass
class Schedule:
    """A finite run: ``entries[i]`` is due at ``offsets[i]`` seconds after the start (built ones make each entry
    when it is read: :class:`ScheduleEntries`)."""

    entries: Sequence[Scheduled]
    offsets: np.ndarray = field(repr=False)

    @classmethod
    def build(cls, spec: ScheduleSpec, samples: Sequence[SampleRequest],
              classes: Sequence[tuple[str, float]] = ()) -> Schedule:
        """The schedule ``spec`` gives for ``samples`` (see :func:`send_offsets`); ``classes`` are
        ``(user class name, weight)`` pairs for a mixed workload, assigned per request from the seed."""
        if not samples:
            raise ConfigError("the workload has no samples")
        offsets = np.asarray(send_offsets(spec, samples), dtype=float)
        names, picks = class_picks(classes, len(offsets), spec.seed)
        return cls(ScheduleEntries(samples, offsets, names, picks), offsets)

    def __len__(self) -> int:
        return len(self.entries)

    def __getitem__(self, index: int) -> Scheduled:
        return self.entries[index]

    def __iter__(self) -> Iterator[Scheduled]:
        return iter(self.entries)

    def share_indices(self, worker_index: int, worker_count: int) -> list[int]:
        """The global indices of worker ``worker_index`` of ``worker_count``'s requests (the one split rule,
        :func:`llmload.core.arrivals.share_for_worker`)."""
        from llmload.core.arrivals import share_for_worker

        return [int(i) for i in share_for_worker(self.offsets, worker_index, worker_count)]

    def share(self, worker_index: int, worker_count: int) -> list[Scheduled]:
        """Worker ``worker_index`` of ``worker_count``'s requests: every ``worker_count``-th, round robin."""
        return [self.entries[i] for i in self.share_indices(worker_index, worker_count)]

    def turn_total(self, turns: Callable[[SampleRequest], int]) -> int:
        """``turns`` summed over every request's sample, counted per pool sample (a run cycles over its pool)."""
        entries = self.entries
        if not isinstance(entries, ScheduleEntries):
            return sum(turns(e.sample) for e in entries)
        pool, n = entries.samples, len(entries)
        if isinstance(pool, SamplesOnRead):
            return n  # single requests: one each
        laps, rest = divmod(n, len(pool))
        return laps * sum(turns(s) for s in pool) + sum(turns(pool[p]) for p in range(rest))

    def index_of(self) -> dict[str, int]:
        """Request id -> global index (for records that do not carry their index: an older worker's)."""
        return {e.request_id: e.index for e in self.entries}


def send_offsets(spec: ScheduleSpec, samples: Sequence[SampleRequest]) -> np.ndarray:
    """The trace's own times, a rate shape, constant spacing, or vLLM's gamma schedule (exactly as
    benchmark_serving computes it from the seed; :mod:`llmload.core.arrivals`)."""
    from llmload.core.arrivals import constant_offsets, vllm_send_offsets

    if spec.trace:
        return np.asarray([s.arrival_s or 0.0 for s in samples], dtype=float)
    rng = np.random.RandomState(spec.seed)
    if spec.rate_shape:
        from llmload.shapes import parse_shape, rate_offsets

        offsets = rate_offsets(parse_shape(spec.rate_shape, "--rate-shape"), rng, spec.burstiness)
        if not len(offsets):
            raise ConfigError("--rate-shape gives no requests over its duration")
        return np.asarray(offsets, dtype=float)
    if spec.constant_rate:
        return constant_offsets(len(samples), spec.request_rate)
    return vllm_send_offsets(len(samples), spec.request_rate, spec.burstiness, rng=rng,
                             ramp_up_strategy=spec.ramp_up_strategy, ramp_up_start_rps=spec.ramp_up_start_rps,
                             ramp_up_end_rps=spec.ramp_up_end_rps)


def assign_classes(classes: Sequence[tuple[str, float]], count: int, seed: int) -> list[str]:
    """Which user class sends each request of a mixed workload: drawn by weight from its own stream of the
    seed (so adding classes does not move the send times). One class or none: ``''`` for every request."""
    names, picks = class_picks(classes, count, seed)
    return [names[0]] * count if picks is None else [names[k] for k in picks.tolist()]


def class_picks(classes: Sequence[tuple[str, float]], count: int, seed: int) -> tuple[tuple[str, ...],
                                                                                     np.ndarray | None]:
    """:func:`assign_classes` as the class names and one small int a request (None: every request has the
    first, or only, name)."""
    if len(classes) <= 1:
        return (classes[0][0] if classes else "",), None
    names = tuple(name for name, _ in classes)
    weights = np.asarray([max(0.0, float(w)) for _, w in classes])
    if weights.sum() <= 0:
        raise ConfigError("the user classes' weights add up to 0")
    rng = np.random.default_rng([seed, 0x11A])
    picks = rng.choice(len(names), size=count, p=weights / weights.sum())
    return names, picks.astype(np.int16 if len(names) < 1 << 15 else np.int64)


class LiveSchedule:
    """An unbounded open-loop schedule whose rate can change mid-run, the same on every process.

    Request ``i`` is due at ``t_i = R⁻¹(R(t_{i-1}) + g_i / b)`` where ``g_i ~ Gamma(b, 1)`` is drawn in order from
    ``RandomState(seed)`` (the draws vLLM scales by ``1 / (rate · b)``) and ``R(t) = ∫₀ᵗ rate`` is the integrated
    rate. At a constant rate that is vLLM's cumulative schedule before its normalisation. A change applies from
    the offset it names, so processes that hear of it before then agree on every later send time.
    """

    def __init__(self, samples: Sequence[SampleRequest], rate: float, burstiness: float = 1.0, seed: int = 0,
                 classes: Sequence[tuple[str, float]] = ()) -> None:
        if not samples:
            raise ConfigError("the workload has no samples")
        if not burstiness > 0:
            raise ConfigError(f"--burstiness must be > 0, got {burstiness}")
        self.samples = samples if isinstance(samples, SamplesOnRead) else list(samples)
        self.burstiness = float(burstiness)
        self.seed = seed
        self.classes = list(classes)
        self._rng = np.random.RandomState(seed)
        #: (from offset, rate) in offset order; the first starts at 0
        self.segments: list[tuple[float, float]] = [(0.0, float(rate))]
        self._ids: dict[str, int] = {}
        self._class_rng = np.random.default_rng([seed, 0x11A])
        self._index = 0
        self._units = 0.0  # R(t) of the last request
        self._next_units: float | None = None  # R(t) of the next one, once drawn

    @property
    def rate(self) -> float:
        return self.segments[-1][1]

    def set_rate(self, rate: float, from_offset: float) -> None:
        """Use ``rate`` (requests/s, 0 pauses) from ``from_offset`` seconds on; later changes replace earlier
        ones that start at or after it."""
        if not (rate >= 0 and math.isfinite(rate)):
            raise ConfigError(f"the open-loop rate must be a finite number >= 0, got {rate}")
        self.segments = [s for s in self.segments if s[0] < from_offset] or [(0.0, self.segments[0][1])]
        self.segments.append((max(0.0, float(from_offset)), float(rate)))

    def offset_at(self, units: float) -> float | None:
        """``R⁻¹(units)``: the offset where the integrated rate reaches ``units`` (None: the rate stays 0)."""
        done = 0.0
        for k, (start, rate) in enumerate(self.segments):
            end = self.segments[k + 1][0] if k + 1 < len(self.segments) else math.inf
            span = (end - start) * rate if rate > 0 else 0.0
            if rate > 0 and units <= done + span:
                return start + (units - done) / rate
            done += span
        return None

    def peek_units(self) -> float:
        """Draw (once) the next request's position on the integrated-rate axis."""
        if self._next_units is None:
            self._next_units = self._units + float(self._rng.standard_gamma(self.burstiness)) / self.burstiness
        return self._next_units

    def next_offset(self) -> float | None:
        """When the next request is due under the current segments (None: paused for good)."""
        return self.offset_at(self.peek_units())

    def take(self, offset: float) -> Scheduled:
        """Commit the next request at ``offset`` (from :meth:`next_offset`) and move on."""
        self._units = self.peek_units()
        self._next_units = None
        i = self._index
        self._index += 1
        sample = self.samples[i % len(self.samples)]
        base = sample.request_id or str(i % len(self.samples))
        k = self._ids.get(base, 0)
        self._ids[base] = k + 1
        name = ""
        if len(self.classes) > 1:
            weights = np.asarray([max(0.0, float(w)) for _, w in self.classes])
            name = self.classes[int(self._class_rng.choice(len(weights), p=weights / weights.sum()))][0]
        elif self.classes:
            name = self.classes[0][0]
        return Scheduled(i, offset, sample, repeat_id(base, k), name)
