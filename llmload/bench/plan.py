"""``llmload bench``'s validated run configuration: every flag checked, and every combination, before the first
request (exit 2 for a usage error); docs/reliability.md lists what is checked."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from llmload.bench.console import log
from llmload.common.errors import ConfigError
from llmload.common.urls import redact_url, secrets_in
from llmload.core.cancel import cancel_plan_from
from llmload.core.models import model_mix_from
from llmload.core.run import RunConfig
from llmload.core.workload import replays_trace
from llmload.options import api_key, cluster_token


def base_url(args: argparse.Namespace) -> str | None:
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


def parse_metadata(items: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--metadata: expected KEY=VALUE, got {item!r}")
        out[key] = value
    return out


class RunPlan:
    """What the flags say, checked before anything starts (every usage error is found here: exit 2). The
    steps of a run read their settings from it (``plan.args`` holds the flags themselves); nothing changes it
    after it is built."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.base_url = base_url(args)
        # gevent comes with it: imported when a run is planned, not for --help
        from llmload.core.health import reader_note

        if note := reader_note():  # (a bad LLMLOAD_READER is refused here, first)
            log(f"llmload: {note}")
        self.api_key = api_key(args)
        self.metadata = parse_metadata(args.metadata)
        backend = args.backend
        #: what the options decide for every way in (arrivals checked, SLOs parsed, conversations checked)
        self.config = RunConfig.from_options(args)
        if self.config.backend != backend:
            log(f"--multi-turn sends chat messages: using --backend {self.config.backend} instead of {backend}")
        self.distributed = bool(args.processes or args.master)
        if args.master and not args.expect_workers:
            raise ConfigError("--master needs --expect-workers N (N >= 1)")
        self.use_sim = self.base_url is None
        trace = replays_trace(args)
        if args.dataset_name in ("trace", "custom") and not args.dataset_path:
            what = "an Azure/BurstGPT CSV or a JSONL trace" if trace else "a JSONL file"
            raise ConfigError(f"--dataset-name {args.dataset_name} needs --dataset-path ({what})")
        # hf: a directory or a cached hub id too (the dataset says which, before the first request)
        if args.dataset_name == "weka_trace":
            if not args.dataset_path or not Path(args.dataset_path).exists():
                raise ConfigError(f"--dataset-name weka_trace needs --dataset-path: a folder of WEKA / Claude Code "
                                  f".json traces or a .jsonl file of them ({args.dataset_path or 'none given'})")
        elif args.dataset_path and args.dataset_name != "hf" and not Path(args.dataset_path).is_file():
            raise ConfigError(f"--dataset-path {args.dataset_path}: no such file")
        if trace and (args.rate_shape or args.constant_rate):
            raise ConfigError("a trace brings its own arrival times: drop --rate-shape/--constant-rate")
        cancel_plan_from(args)  # a bad spec: one line, exit 2, now
        model_mix_from(args)
        if args.think_time and not args.max_concurrency:
            raise ConfigError("--think-time needs --max-concurrency N (the number of closed-loop users)")
        if args.rate_shape:
            from llmload.shapes import parse_shape

            parse_shape(args.rate_shape, "--rate-shape")
        if args.fail_on_slo is not None and not self.config.goodput:
            raise ConfigError("--fail-on-slo needs --goodput SLOs to judge against")
        self.save = bool(args.save_result or args.save_detailed or args.append_result)
        if self.save:
            check_writable(Path(args.result_dir))
            if args.records_format == "parquet":
                try:
                    import pyarrow  # noqa: F401
                except ImportError:
                    raise ConfigError("--records-format parquet needs pyarrow: pip install pyarrow") from None
        self.cluster_token = cluster_token(args)
        if args.master and not self.cluster_token and not is_loopback(args.master_bind_host) and (
                self.api_key or (self.base_url and secrets_in(self.base_url))):
            raise ConfigError(
                f"--master binds {args.master_bind_host!r} and workers would receive the API key: set a cluster "
                "token (LLMLOAD_CLUSTER_TOKEN or --cluster-token-file) on the master and the workers, or bind "
                "--master-bind-host 127.0.0.1")
        self._check_extras(args)
        self._frozen = True

    def _check_extras(self, args: argparse.Namespace) -> None:
        """Server metrics and saturation, llmload's own /metrics."""
        if args.no_server_metrics and args.server_metrics_url:
            raise ConfigError("--no-server-metrics and --server-metrics-url contradict each other: drop one")
        if args.server_metrics_url and not args.server_metrics_url.startswith(("http://", "https://")):
            raise ConfigError(f"--server-metrics-url {redact_url(args.server_metrics_url)}: expected http(s)://...")
        if args.stop_on_saturation and args.think_time:
            raise ConfigError("--stop-on-saturation judges an open loop; a closed loop (--think-time) cannot "
                              "pile requests up")
        self.prometheus = prometheus_endpoint(args)

    def with_changes(self, **changes: Any) -> RunPlan:
        """This plan with some flags changed (a sweep's point: another rate, concurrency or file name). What
        was validated and bound once (the result dir, the cluster token, the Prometheus port) is kept; the run's
        configuration is decided again (arrivals checked, schedule spec rebuilt)."""
        args = argparse.Namespace(**{**vars(self.args), **changes})
        derived = object.__new__(RunPlan)
        derived.__dict__.update(self.__dict__)
        derived.__dict__.update(args=args, config=RunConfig.from_options(args), metadata=dict(self.metadata),
                                save=bool(args.save_result or args.save_detailed or args.append_result))
        return derived

    def __setattr__(self, name: str, value: object) -> None:
        if getattr(self, "_frozen", False):
            raise AttributeError(f"a RunPlan is frozen once validated (tried to set {name})")
        super().__setattr__(name, value)


def prometheus_endpoint(args: argparse.Namespace) -> Any:
    """``--prometheus-port``'s listening socket (:mod:`llmload.exporter`), bound now: a busy port is a usage error
    before anything is sent; None when off (and prometheus_client is not even imported)."""
    if args.prometheus_port is None and not args.prometheus_linger:
        return None
    from llmload.exporter.wiring import bind_from_options

    return bind_from_options(args)


def check_writable(directory: Path) -> None:
    """Create ``--result-dir`` and write a probe file, so an unwritable place fails now, not after the run."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / f".llmload-probe-{os.getpid()}"
        probe.write_bytes(b"probe")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"--result-dir {directory}: cannot write there ({exc.strerror or exc})") from None


def is_loopback(host: str) -> bool:
    return host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")
