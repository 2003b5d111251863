"""``import llmload.locust`` only adds listeners to Locust's events; each Locust environment gets its own run,
so two environments in one process never share records."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from support import offline_env

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
                          "threads": threading.active_count() - threads, "greenlets": len(greenlets),
                          "transformers": "transformers" in __import__("sys").modules}))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    # transformers (~1 s of CPU) comes in only for a tokenizer that needs it, when the run loads it
    assert report == {"added": EXPECTED_LISTENERS, "threads": 0, "greenlets": 0, "transformers": False}, report


#: two environments in one child process (importing locust monkey-patches the interpreter with gevent, which
#: the test process must not inherit); prints what each environment recorded
_TWO_ENVIRONMENTS = r"""
import json, sys
from time import monotonic

import gevent
from locust.argument_parser import get_parser
from locust.env import Environment
from locust.event import Events

from llmload.locust import ShareGPTUser
from llmload.plugin import install


def environment(host):
    # its own events: Locust's runners add listeners to their environment's events, so two runners on the
    # global ones would drive each other's state
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


def run_until_records(env, n, timeout=60.0):
    env.runner.start(2, spawn_rate=100)
    deadline = monotonic() + timeout
    while len(env.llmload.records) < n and monotonic() < deadline:
        gevent.sleep(0.05)
    env.runner.stop()


def ids(env):
    # a record's request id and the instant it was sent name it (records are read back from the journal: new
    # objects each time, so id() would not)
    return [(r.request_id, r.start) for r in env.llmload.records.records]


first, second = environment(sys.argv[1]), environment(sys.argv[1])
out = {"same_state": first.llmload is second.llmload}
run_until_records(first, 6)
out["first_after_first"] = len(first.llmload.records)
out["first_ok"] = all(r.success for r in first.llmload.records.records)
out["second_after_first"] = len(second.llmload.records)
run_until_records(second, 6)
out["second_after_second"] = len(second.llmload.records)
out["first_after_second"] = len(first.llmload.records)
out["shared_records"] = len(set(ids(first)) & set(ids(second)))
out["in_flight"] = [first.llmload.in_flight, second.llmload.in_flight]
print(json.dumps(out))
"""


@pytest.mark.slow
def test_two_environments_do_not_share_records(start_sim) -> None:
    sim = start_sim("--ttft-ms", "5", "--itl-ms", "2")
    proc = subprocess.run([sys.executable, "-c", _TWO_ENVIRONMENTS, sim.url], capture_output=True, text=True,
                          timeout=120, env=offline_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"same_state": False, "first_after_first": 6, "first_ok": True, "second_after_first": 0,
                   "second_after_second": 6, "first_after_second": 6,  # untouched by the second run
                   "shared_records": 0, "in_flight": [0, 0]}, out


#: a worker's handling of Locust's spawn message: the master's options that are not Locust's own are kept, each
#: name tested against ``default_args_dict()``; prints how often Locust's parser was built for it
_SPAWN_OPTION_FILTER = r"""
import json
from locust import argument_parser

import llmload.locust  # noqa: F401  (installs llmload, as a locustfile's import does)

master_options = vars(argument_parser.get_parser(default_config_files=[]).parse_args(["--headless"]))
builds = []
setup = argument_parser.setup_parser_arguments
argument_parser.setup_parser_arguments = lambda *a, **k: (builds.append(1), setup(*a, **k))[1]
kept = {k: v for k, v in master_options.items() if k not in argument_parser.default_args_dict()}
first = argument_parser.default_args_dict()
first["users"] = "changed by a caller"
argument_parser.setup_parser_arguments = setup
fresh = argument_parser.get_empty_argument_parser()
setup(fresh)
fresh._default_config_files = {}
print(json.dumps({"options": len(master_options), "kept": len(kept), "builds": len(builds),
                  "same_defaults": argument_parser.default_args_dict() == vars(fresh.parse([]))}))
"""


def test_a_workers_spawn_message_builds_locusts_parser_once() -> None:
    """Locust rebuilt its whole parser per option name on each spawn message: with llmload's options, seconds
    on a busy machine, so --processes workers began the schedule late (llmload/plugin/locust_fixes.py)."""
    out = subprocess.run([sys.executable, "-c", _SPAWN_OPTION_FILTER], capture_output=True, text=True, timeout=120,
                         env=offline_env())
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["kept"] >= 100 and report["options"] > report["kept"], report  # llmload's options are kept
    assert report["builds"] <= 1, report
    assert report["same_defaults"], report  # the same answer, and a caller's change to its copy stays there


#: ``import_locust`` in a fresh process: how many times the installed distributions were read while Locust (and
#: gevent's monkey-patching) came in, and what was left behind
_IMPORT_LOCUST = r"""
import json, sys
from importlib import metadata

reads = []
distributions = metadata.distributions
metadata.distributions = lambda **k: (reads.append(1), distributions(**k))[1]
entry_points = metadata.entry_points
from llmload.processes.locust_import import import_locust

import_locust()
import gevent.monkey

print(json.dumps({"reads": len(reads), "locust": "locust" in sys.modules,
                  "patched": gevent.monkey.is_module_patched("socket"),
                  "restored": metadata.entry_points is entry_points}))
"""


def test_import_locust_reads_the_installed_distributions_once() -> None:
    """gevent looks up plugins for each module it patches; each lookup read every distribution again (~0.2 s of
    CPU at each bench, worker and sweep start)."""
    out = subprocess.run([sys.executable, "-c", _IMPORT_LOCUST], capture_output=True, text=True, timeout=120,
                         env=offline_env())
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report == {"reads": 1, "locust": True, "patched": True, "restored": True}, report
