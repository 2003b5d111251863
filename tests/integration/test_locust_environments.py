"""``import llmload.locust`` only adds listeners to Locust's events; each Locust environment gets its own run,
so two environments in one process never share records."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from time import monotonic

import pytest

#: the listeners llmload adds: its options, and one per event it uses (the LLM tab adds init and test_start)
EXPECTED_LISTENERS = {"init_command_line_parser": 1, "init": 2, "test_start": 2, "test_stopping": 1,
                      "test_stop": 1, "quitting": 1}


def test_import_registers_listeners_only() -> None:
    script = textwrap.dedent("""
        import json, threading
        import gevent
        from locust import events
        names = [n for n in dir(events) if not n.startswith("_")]
        def counts():
            return {n: len(getattr(events, n)._handlers) for n in names if hasattr(getattr(events, n), "_handlers")}
        before, threads = counts(), threading.active_count()
        import llmload.locust
        from llmload.plugin import install
        from llmload.webui import install as install_tab
        install(); install_tab()  # again: nothing more
        after = counts()
        greenlets = [g for g in __import__("gc").get_objects() if isinstance(g, gevent.Greenlet)]
        print(json.dumps({"added": {n: after[n] - before[n] for n in after if after[n] != before[n]},
                          "threads": threading.active_count() - threads, "greenlets": len(greenlets)}))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    import json

    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report == {"added": EXPECTED_LISTENERS, "threads": 0, "greenlets": 0}, report


def _environment(host: str):
    """An environment with its own events (Locust's runners add listeners to their environment's events, so
    two runners on the global ones would drive each other's state), llmload installed on them."""
    from locust.argument_parser import get_parser
    from locust.env import Environment
    from locust.event import Events

    from llmload.locust import ShareGPTUser
    from llmload.plugin import install

    events = Events()
    install(events)

    class Chat(ShareGPTUser):
        pass

    options = get_parser(default_config_files=[]).parse_args(
        ["--headless", "--host", host, "--tokenizer", "builtin", "--num-prompts", "6", "--sharegpt-output-len", "5"])
    env = Environment(user_classes=[Chat], events=events, host=host, parsed_options=options)
    runner = env.create_local_runner()
    events.init.fire(environment=env, runner=runner, web_ui=None)
    return env


def _run_until_records(env, n: int, timeout: float = 60.0) -> None:
    import gevent

    env.runner.start(2, spawn_rate=100)
    deadline = monotonic() + timeout
    while len(env.llmload.records) < n and monotonic() < deadline:
        gevent.sleep(0.05)
    env.runner.stop()


def test_two_environments_do_not_share_records(start_sim) -> None:
    pytest.importorskip("locust")
    sim = start_sim("--ttft-ms", "5", "--itl-ms", "2")
    first, second = _environment(sim.url), _environment(sim.url)
    assert first.llmload is not second.llmload
    _run_until_records(first, 6)
    assert len(first.llmload.records) == 6 and all(r.success for r in first.llmload.records.records)
    assert len(second.llmload.records) == 0
    _run_until_records(second, 6)
    assert len(second.llmload.records) == 6
    assert len(first.llmload.records) == 6  # untouched by the second run
    assert {id(r) for r in first.llmload.records.records}.isdisjoint(id(r) for r in second.llmload.records.records)
    assert first.llmload.in_flight == second.llmload.in_flight == 0
