"""Is the client the bottleneck? Watch this process's CPU, how late it reads arriving data, and the loop.

Token timestamps are the kernel's receive times (:mod:`llmload.client.transport`), so a busy client does not shift
them; it distorts ITLs only when it reads a stream so late that two chunks merge into one read, under one
timestamp (the later chunk's). The verdict counts exactly that, after the run, from the records: the share of
reads that brought two or more content events of one stream whose median gap is well above a millisecond
(:func:`merged_reads`). The transport's *read lag* (our read − kernel arrival), the loop's *stalls* (stretches of
work between two looks at the sockets, the longest with what ran in them: :mod:`llmload.client.transport.stalls`)
and a greenlet that sleeps ``interval`` (the loop's lag: how late greenlets run: sends, dispatch) say why. CPU
comes from ``psutil`` (a Locust dependency).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Sequence
from time import perf_counter
from typing import TYPE_CHECKING, Any

import gevent
import numpy as np
import psutil

from llmload.metrics.columns import joined
from llmload.metrics.definitions import LATE_SEND_MS, late_sends
from llmload.metrics.distribution import Distribution
from llmload.metrics.spill import Chunked, SpillColumn

if TYPE_CHECKING:
    from llmload.client.transport import Reactor

#: the client is called the bottleneck above these
CPU_LIMIT_PERCENT = 90.0
#: events of one stream that share one read are chunks that merged only where the stream's median gap is at
#: least this: a server that writes several events at once (far below a millisecond apart) is not the client
MERGE_MEDIAN_GAP_MS = 2.0
#: more than this share of such streams' reads merging chunks is a client that read too late: at 1 % the p99 ITL
#: is a whole gap off (A/B at 256 streams here: 0.004 % on an exact run, 2.9 % on one whose p99 ITL read 20 ms for 10)
MERGED_READ_LIMIT = 0.002
#: without kernel timestamps (TLS) a late read shifts the timestamps themselves: loop stalls longer than this
#: share of the median inter-token gap then make the client the bottleneck
STALL_SHARE_OF_ITL = 0.3
#: used when the ITL is not known yet
STALL_LIMIT_MS = 3.0
#: the CPU one process can run at and stay exact, with margin (at 256 streams here: exact at 45-59 % mean CPU, at
#: 512 streams, ~100 %, not): what the advice on --processes counts a process's capacity at
ACCURATE_CPU_PERCENT = 75.0
#: the client is late when its sends are (metrics.definitions.LATE_SEND_MS: the summary's "Late sends" too)
SCHEDULE_LAG_LIMIT_MS = LATE_SEND_MS
#: ...but only when more sends than this share were that late (and always more than one): in a short run the
#: p99 is its latest send, and one hiccup (a GC pause, the first send) is not a client that cannot keep up
LATE_SEND_SHARE = 0.01


class HealthMonitor:
    """Samples the loop lag and CPU while running; ``reactor`` is the one that reads the run's streams.

    Read lag is known only from a reactor: without one (or with no kernel-timestamped reads, as over TLS)
    ``read_lag_p99_ms`` is None and the verdict rests on CPU and the schedule lag.
    """

    def __init__(self, interval_s: float = 0.01, cpu_every_s: float = 1.0, *,
                 reactor: Reactor | None = None) -> None:
        self.reactor = reactor
        self.interval_s = interval_s
        self.cpu_every_s = cpu_every_s
        #: one sample every ``interval_s`` for as long as the run lasts: on disk past a size (a day is 8.6M)
        self.loop_lags_s: SpillColumn | list[float] = SpillColumn()
        self.cpu_percent: array[float] | list[float] = array("d")
        self._greenlets: list[gevent.Greenlet] = []
        self._process = psutil.Process()

    def start(self) -> None:
        if self.reactor is not None:
            self.reactor.reset_read_lag()
            self.reactor.stalls.reset()
            self.reactor.stalls.attribute(True)
        self._process.cpu_percent(None)
        self._greenlets = [gevent.spawn(self._watch_loop), gevent.spawn(self._watch_cpu)]

    def stop(self) -> None:
        gevent.killall(self._greenlets, block=True)
        if self.reactor is not None:
            self.reactor.stalls.attribute(False)

    def _watch_loop(self) -> None:
        while True:
            t = perf_counter()
            gevent.sleep(self.interval_s)
            self.loop_lags_s.append(max(0.0, perf_counter() - t - self.interval_s))

    def _watch_cpu(self) -> None:
        while True:
            gevent.sleep(self.cpu_every_s)
            self.cpu_percent.append(self._process.cpu_percent(None))

    def report(self, schedule_lags_s: Sequence[float] | Chunked | None = None) -> dict[str, Any]:
        if not self.cpu_percent:  # a run shorter than one sampling interval
            self.cpu_percent.append(self._process.cpu_percent(None))
        cpu = np.asarray(self.cpu_percent)
        loop = Distribution.of(_values(self.loop_lags_s), (50.0, 99.0))  # the one percentile rule (metrics)
        (_, loop_p50), (_, loop_p99) = loop.percentiles_ms
        out: dict[str, Any] = {
            "cpu_percent_mean": round(float(cpu.mean()), 1) if cpu.size else 0.0,
            "cpu_percent_max": round(float(cpu.max()), 1) if cpu.size else 0.0,
            "loop_lag_p50_ms": round(loop_p50, 3),
            "loop_lag_p99_ms": round(loop_p99, 3),
            "loop_lag_max_ms": round(loop.max_ms, 3) if loop.count else 0.0,
            **schedule_health(schedule_lags_s if schedule_lags_s is not None else ()),
        }
        out["read_lag_p99_ms"] = self.reactor.read_lag_percentile(99) if self.reactor is not None else None
        #: which reader read the streams: "compiled" (the C extension) or "python"
        out["reader"] = self.reactor.reader.name if self.reactor is not None else None
        if self.reactor is not None:
            out.update(self.reactor.stalls.summary())
        return judge(out)


def merge_health(workers: dict[str, dict[str, Any] | None], master: dict[str, Any]) -> dict[str, Any]:
    """A distributed run's client health: the busiest worker's CPU, loop and read lags (the verdict is made from
    these by :func:`judge`) over ``master``'s report, whose schedule lag stays (the master's leaves out requests
    re-assigned from dead workers, late on purpose); each worker's own report under ``per_worker``."""
    reports = {name: h for name, h in workers.items() if h}
    if not reports:
        return master
    merged = dict(master)
    for key in ("cpu_percent_mean", "cpu_percent_max", "loop_lag_p99_ms", "read_lag_p99_ms", "stall_p99_ms",
                "stall_max_ms"):
        values = [h[key] for h in reports.values() if h.get(key) is not None]
        if values:
            merged[key] = max(values)  # the busiest worker decides
    stalled = max(reports.items(), key=lambda item: item[1].get("stall_max_ms") or 0.0)
    if stalled[1].get("longest_stalls"):
        merged["longest_stalls"] = [dict(stall, worker=stalled[0]) for stall in stalled[1]["longest_stalls"]]
    kinds = sorted({h["reader"] for h in reports.values() if h.get("reader")})
    if kinds:
        merged["reader"] = kinds[0] if len(kinds) == 1 else "mixed: " + ", ".join(kinds)
    merged["per_worker"] = reports
    return merged


def reader_note() -> str | None:
    """The one line a run says where it reads with Python only because the compiled reader was not built; a
    :class:`ConfigError` where ``LLMLOAD_READER`` asks for what this installation does not have. Each way in
    calls it once, while it checks its options, before the run starts anything."""
    from llmload.client.transport import readers

    return readers.fallback_note()


def schedule_health(schedule_lags_s: Sequence[float] | Chunked) -> dict[str, Any]:
    """The schedule-lag part of a health report, from the lags a master collected from its records (a
    :class:`~llmload.metrics.spill.Chunked` source: read from disk)."""
    lags = schedule_lags_s if isinstance(schedule_lags_s, Chunked) else np.asarray(schedule_lags_s, dtype=float)
    p99 = Distribution.of(lags, (99.0,)).percentiles_ms[0][1]
    return {"schedule_lag_p99_ms": round(p99, 3), "late_sends": late_sends(lags), "sends": len(lags)}


def _values(column: SpillColumn | list[float]) -> Any:
    """A column's values for :meth:`Distribution.of`: in memory, or read from disk a chunk at a time."""
    return joined([column]) if isinstance(column, SpillColumn) else np.asarray(column, dtype=float)


def merged_reads(records: Iterable[Any]) -> dict[str, Any]:
    """How many reads of the run's streams brought two or more content events under one timestamp, among the
    successful streams whose median gap is at least :data:`MERGE_MEDIAN_GAP_MS` (every read of a stream gives
    its events one timestamp, so events with equal times came in one read).

    Returns ``merged_reads``, ``stream_reads`` (the reads of those streams) and ``merged_read_share``."""
    merged = reads = 0
    floor_s = MERGE_MEDIAN_GAP_MS / 1000.0
    for record in records:
        times = record.chunk_times
        if not record.success or len(times) < 3:
            continue
        gaps = np.diff(np.asarray(times, dtype=float))
        if float(np.median(gaps)) < floor_s:
            continue
        same = gaps == 0.0
        runs = int(np.count_nonzero(same[1:] & ~same[:-1])) + int(same[0])  # each run of equal times: one read
        merged += runs
        reads += len(times) - int(np.count_nonzero(same))
    return {"merged_reads": merged, "stream_reads": reads,
            "merged_read_share": round(merged / reads, 6) if reads else None}


def judge(health: dict[str, Any], median_itl_ms: float | None = None,
          records: Iterable[Any] | None = None) -> dict[str, Any]:
    """Decide (again) whether the client was the bottleneck, once the run's median ITL and records are known:
    its CPU, merged reads (from ``records``; a report without them keeps the counts it has), and for reads
    without kernel timestamps its loop stalls; in an open loop, late sends too."""
    if records is not None:
        health.update(merged_reads(records))
    reasons = []
    cpu = health.get("cpu_percent_mean") or 0.0
    if cpu > CPU_LIMIT_PERCENT:
        reasons.append(f"client CPU averaged {cpu:.0f}% (> {CPU_LIMIT_PERCENT:.0f}%)")
    share = health.get("merged_read_share")
    if share is not None and share > MERGED_READ_LIMIT:
        reasons.append(f"{100 * share:.2f}% of reads merged two or more chunks of a stream under one timestamp "
                       f"(> {100 * MERGED_READ_LIMIT:.1f}%: ITLs read whole gaps long)"
                       + _longest_stall_note(health))
    stall = health.get("stall_p99_ms")
    limit = STALL_LIMIT_MS if not median_itl_ms else max(1.0, STALL_SHARE_OF_ITL * median_itl_ms)
    if health.get("read_lag_p99_ms") is None and stall is not None and stall > limit:
        reasons.append(f"the loop looked at its sockets {stall:.1f} ms apart at p99 without kernel timestamps "
                       f"(> {limit:.1f} ms: token times are late)")
    sched = health.get("schedule_lag_p99_ms") or 0.0
    late, sends = health.get("late_sends"), health.get("sends")
    too_many_late = late is None or not sends or late > max(1, LATE_SEND_SHARE * sends)
    if sched > SCHEDULE_LAG_LIMIT_MS and too_many_late:
        detail = f", {late} of {sends} sends" if late is not None and sends else ""
        reasons.append(f"schedule lag p99 {sched:.1f} ms (> {SCHEDULE_LAG_LIMIT_MS:.0f} ms{detail})")
    health["bottleneck"] = bool(reasons)
    health["reason"] = "; ".join(reasons)
    return health


def advise_processes(health: dict[str, Any], output_tok_s: float, processes: int) -> dict[str, Any]:
    """Where the client was the bottleneck: what one process drives here at :data:`ACCURATE_CPU_PERCENT` CPU
    (``process_capacity_tok_s``, from this run's output tokens/s per process and the busiest process's mean CPU)
    and the ``processes_advised`` that would have carried this run's tokens/s at that CPU. Left out where more
    processes would not help (a run well below that CPU was held back by its loop, not by cores)."""
    cpu = health.get("cpu_percent_mean") or 0.0
    processes = max(1, processes)
    if not health.get("bottleneck") or output_tok_s <= 0 or cpu <= 0:
        return health
    capacity = output_tok_s / processes * ACCURATE_CPU_PERCENT / cpu
    advised = math.ceil(output_tok_s / capacity)
    if advised > processes:
        health["process_capacity_tok_s"] = round(capacity)
        health["process_capacity_cpu_percent"] = ACCURATE_CPU_PERCENT
        health["processes_advised"] = advised
    return health


def _longest_stall_note(health: dict[str, Any]) -> str:
    """``; the longest loop stall: 23.1 ms in <greenlet>`` where the report names one."""
    longest = health.get("longest_stalls") or []
    if not longest:
        return ""
    top = longest[0]
    ran = top.get("greenlets") or []
    what = f" in {ran[0]['what']}" if ran and ran[0]["ms"] >= top["ms"] / 2 else (
        " in garbage collection" if top.get("gc_ms", 0) >= top["ms"] / 2 else "")
    return f"; the longest loop stall {top['ms']:.1f} ms{what}"
