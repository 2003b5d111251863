"""``llmload k8s render``: flags -> :class:`~llmload.k8s.settings.Settings` -> manifests on stdout or in a
directory. Every problem is a one-line error (exit 2) before anything is printed or written."""

from __future__ import annotations

import argparse
import re
import sys

from llmload.common.errors import ConfigError
from llmload.k8s.flags import check_bench_flags, stop_timeout, ui_environment
from llmload.k8s.render import manifests, to_yaml, write_directory
from llmload.k8s.settings import Settings

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?$")


def settings_from(args: argparse.Namespace, flags: list[str]) -> Settings:
    if not _DNS_LABEL.match(args.name):
        raise ConfigError(f"--name {args.name!r}: lower-case letters, digits and '-', at most 42 characters")
    if not args.base_url.startswith(("http://", "https://")):
        raise ConfigError(f"--base-url must start with http:// or https://, got {args.base_url!r}")
    given = {} if args.webui else check_bench_flags(flags)
    return Settings(workers=args.workers, base_url=args.base_url.rstrip("/"), model=args.model,
                    tokenizer=args.tokenizer, tokenizer_claim=args.tokenizer_claim, image=args.image,
                    name=args.name, namespace=args.namespace, bench_args=tuple(flags),
                    master_port=args.master_port, web_port=args.web_port,
                    stop_timeout=stop_timeout(given, Settings.stop_timeout), results_size=args.results_size,
                    worker_cpu=args.worker_cpu)


def render_command(args: argparse.Namespace, flags: list[str]) -> int:
    settings = settings_from(args, flags)
    locustfile = None
    if args.locustfile is not None:
        if not args.webui:
            raise ConfigError("--locustfile is for --webui (the headless run is llmload bench: use bench flags)")
        try:
            locustfile = args.locustfile.read_text()
        except OSError as exc:
            raise ConfigError(f"--locustfile {args.locustfile}: {exc.strerror or exc}") from None
    ui_env = ui_environment(flags) if args.webui else None
    docs = manifests(settings, ui=args.webui, ui_env=ui_env, locustfile=locustfile)
    if args.output is None:
        sys.stdout.write(to_yaml(docs))
        return 0
    try:
        written = write_directory(args.output, docs)
    except OSError as exc:
        raise ConfigError(f"--output {args.output}: {exc.strerror or exc}") from None
    print(f"Wrote {len(written) - 1} manifests and kustomization.yaml to {args.output} "
          f"(kubectl apply -k {args.output})", file=sys.stderr)
    return 0
