"""The ``llmload`` command line: parse, dispatch to one command module, print one-line errors.

Each command lives in ``llmload/commands/<name>.py`` with ``add_arguments(parser)`` and ``run(args) -> int``.
Only the chosen command's module is imported, so ``llmload --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from llmload import __version__

#: command name -> one-line help; the module is ``llmload.commands.<name>``.
COMMANDS: dict[str, str] = {
    "bench": "benchmark a server headlessly (a drop-in for vLLM's benchmark_serving.py; the simulator by default)",
    "sweep": "run a workload at a series of loads; find the highest rate or concurrency that meets an SLO",
    "sim": "run the simulated OpenAI-compatible LLM engine (the default benchmark target)",
    "report": "report on one run: HTML with figures, headline table, automatic findings",
    "compare": "compare runs side by side: overlaid figures, table with relative differences, findings",
    "k8s": "Kubernetes manifests for a run: headless master/worker Jobs or the live web UI (llmload k8s render)",
    "ui": "Locust's web UI with the LLM tab (live TTFT/TPOT, tokens/s, rate steering); the simulator by default",
}


def _top_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="llmload",
        description="Distributed load generator for LLM inference servers, built on Locust.",
        epilog="Run 'llmload COMMAND --help' for a command's options. "
        "Set LLMLOAD_DEBUG=1 to see tracebacks.",
    )
    parser.add_argument("--version", action="version", version=f"llmload {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for name, help_text in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def _command_parser(name: str) -> tuple[argparse.ArgumentParser, object]:
    module = importlib.import_module(f"llmload.commands.{name}")
    parser = argparse.ArgumentParser(
        prog=f"llmload {name}",
        description=(module.__doc__ or COMMANDS[name]).strip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    module.add_arguments(parser)
    return parser, module


def main(argv: list[str] | None = None) -> int:
    entry_point = argv is None
    if entry_point:
        from llmload.common.urls import mask_process_title

        mask_process_title(sys.argv)  # a user:password@ URL must not stay visible to other users in ps
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        parser = _top_parser()
        args = parser.parse_args(argv)  # prints help/version or a usage error and exits
        parser.print_help()
        return 2
    name = argv[0]
    parser, module = _command_parser(name)
    # a command that passes flags through (k8s render: bench's) parses them itself
    parse = getattr(module, "parse_args", None)
    args = parse(parser, argv[1:]) if parse else parser.parse_args(argv[1:])
    code = run_reporting_errors(module.run, args, parser)
    if entry_point:
        # The process ends now, normally (atexit handlers, logging's flush, module teardown), with every file
        # written and every child stopped. Freezing the heap keeps the interpreter's last collections from
        # walking every object a run made: they would free nothing that matters, and took ~150 ms of the
        # ~180 ms an exit cost (a suite starts hundreds of these processes).
        import gc

        gc.freeze()
    return code


def run_reporting_errors(func, args, parser: argparse.ArgumentParser) -> int:
    """Run a command; turn our errors into one line on stderr and an exit code."""
    from llmload.common.errors import ConfigError, LLMLoadError

    try:
        return int(func(args) or 0)
    except ConfigError as exc:
        if os.environ.get("LLMLOAD_DEBUG"):
            raise
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except LLMLoadError as exc:
        if os.environ.get("LLMLOAD_DEBUG"):
            raise
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt as exc:
        print(f"{parser.prog}: interrupted", file=sys.stderr)
        return int(getattr(exc, "exit_code", 130))


if __name__ == "__main__":
    sys.exit(main())
