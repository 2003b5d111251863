"""llmload's one option table: ``llmload bench`` and ``locust -f`` get the options both take under the same names,
types, choices and defaults; ``locust -f`` reads them from ``LLMLOAD_*``; secrets are flagged and the API key has
no command-line flag; the simulator names its tokenizer at ``/v1/models`` and ``describe_server`` reads it."""

from __future__ import annotations

import argparse
import base64
import copy
import json
import math
import os
import pickle
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from support import offline_env

from llmload.common.errors import ConfigError, EndpointError
from llmload.options import (
    GROUPS,
    OPTIONS,
    Scope,
    add_bench_arguments,
    api_key,
    normalize_options,
    option,
    options_for,
    prompt_count,
)
from llmload.options.docs import render

ROOT = Path(__file__).resolve().parents[2]
SHARED = [o for o in OPTIONS if o.scope == Scope.BOTH]
#: options Locust owns: llmload must leave them to Locust
LOCUST_OWNS = ("--host", "--processes", "--master", "--worker", "--master-host", "--master-port",
               "--master-bind-host", "--master-bind-port", "--expect-workers", "--expect-workers-max-wait",
               "--stop-timeout")
#: environment variables kept from before the table (tests and users set them)
ENV_EXCEPTIONS = {"llm_records": "LLMLOAD_RECORDS", "llm_result": "LLMLOAD_RESULT", "llm_web_credentials": "LLMLOAD_WEB_CREDENTIALS"}


#: what the Locust side parses, each (argv, environment), all in one child process (see ``locust_side``)
JOBS: dict[str, tuple[list[str], dict[str, str]]] = {
    "defaults": ([], {}),
    "env": ([], {"LLMLOAD_REQUEST_RATE": "5", "LLMLOAD_IGNORE_EOS": "true", "LLMLOAD_GOODPUT": "[ttft:500, tpot:50]",
                 "LLMLOAD_METRIC_PERCENTILES": "50,99", "LLMLOAD_RECORDS": "/nonexistent/r.jsonl",
                 "LLMLOAD_MAX_TOKENS": "7"}),
    "flag_over_env": (["--request-rate", "2"], {"LLMLOAD_REQUEST_RATE": "5"}),
    "bad_env": ([], {"LLMLOAD_REQUEST_RATE": "abc"}),
    "api_key_flag": (["--api-key", "sk-on-the-command-line"], {}),
    "api_key_abbreviated": (["--api-k", "sk-abbreviated"], {}),
    "max_tokens": (["--max-tokens", "16"], {}),
    "num_prompts": (["--num-prompts", "7"], {}),
    "trace": (["--dataset-name", "trace"], {}),
}

_CHILD = r"""
import base64, contextlib, io, json, os, pickle, sys

from locust.argument_parser import get_empty_argument_parser, setup_parser_arguments

from llmload.options import add_options


def parser(with_llmload=True):
    p = get_empty_argument_parser(add_help=True, default_config_files=[])
    setup_parser_arguments(p)
    if with_llmload:
        add_options(p)
    return p


def describe(a):
    t = a.type
    return {"flags": a.option_strings, "choices": None if a.choices is None else list(a.choices),
            "type": t and f"{getattr(t, '__module__', '')}.{t.__qualname__}", "nargs": a.nargs, "const": a.const,
            "metavar": a.metavar, "cls": type(a).__name__, "secret": getattr(a, "is_secret", False)}


jobs, base, results = json.load(sys.stdin), dict(os.environ), {}
for name, (argv, env) in jobs.items():
    os.environ.clear()
    os.environ.update({**base, **env})
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = parser().parse_args(argv)
        results[name] = {"code": 0, "ns": base64.b64encode(pickle.dumps(vars(ns))).decode(), "err": ""}
    except SystemExit as exc:
        results[name] = {"code": exc.code, "ns": None, "err": err.getvalue()}
p = parser()
info = {"actions": {a.dest: describe(a) for a in p._actions}, "web": sorted(p.args_included_in_web_ui),
        "secret_web": sorted(p.secret_args_included_in_web_ui),
        "locust_own": sorted(s for a in parser(False)._actions for s in a.option_strings)}
print(json.dumps({"jobs": results, "info": info}))
"""


@pytest.fixture(scope="module")
def locust_side() -> dict[str, Any]:
    """Locust 2.x's full parser (no config file read) with llmload's options, as ``init_command_line_parser``
    builds it, parsing :data:`JOBS`. In a child process: importing locust monkey-patches the interpreter with
    gevent, which the rest of the unit tests must not inherit."""
    env = offline_env({"PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))})
    env.pop("OPENAI_API_KEY", None)
    proc = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps(JOBS), capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    for job in data["jobs"].values():
        job["ns"] = argparse.Namespace(**pickle.loads(base64.b64decode(job["ns"]))) if job["ns"] else None
    return data


@pytest.fixture(autouse=True)
def _no_key_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LLMLOAD_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def bench_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="llmload bench")
    add_bench_arguments(parser)
    return parser


def describe(action: argparse.Action) -> dict[str, Any]:
    """The parts of an action both ways in must agree on (as the child describes Locust's)."""
    t = action.type
    return {"flags": action.option_strings, "choices": None if action.choices is None else list(action.choices),
            "type": t and f"{t.__module__}.{t.__qualname__}", "nargs": action.nargs, "const": action.const,
            "metavar": action.metavar, "cls": type(action).__name__}


def parsed(locust_side: dict[str, Any], job: str) -> argparse.Namespace:
    result = locust_side["jobs"][job]
    assert result["code"] == 0, result["err"]
    return result["ns"]


# -- the two ways in agree -----------------------------------------------------------------------------------


def test_every_shared_option_has_bench_s_default_in_locust(locust_side: dict[str, Any]) -> None:
    bench = vars(bench_parser().parse_args([]))
    locust = vars(parsed(locust_side, "defaults"))
    for o in SHARED:
        assert bench[o.dest] == locust[o.dest], (o.flag, bench[o.dest], locust[o.dest])
    assert math.isinf(locust["request_rate"]) and locust["num_prompts"] is None
    assert locust["max_concurrency"] is None and locust["percentile_metrics"] == ["ttft", "tpot", "itl"]


def test_shared_options_have_the_same_names_types_and_choices(locust_side: dict[str, Any]) -> None:
    bench = {a.dest: a for a in bench_parser()._actions}
    locust = locust_side["info"]["actions"]
    for o in SHARED:
        mine = describe(bench[o.dest])
        assert mine["flags"] == list(o.flags), o.flag
        assert {k: locust[o.dest][k] for k in mine} == mine, o.flag


def test_the_brief_s_locust_options_are_shared() -> None:
    wanted = """--backend --endpoint --model --model-selection --model-weights --lora-modules --lora-assignment
        --served-model-name --tokenizer --trust-remote-code --dataset-name --temperature --top-p --top-k --min-p
        --frequency-penalty --presence-penalty --repetition-penalty --logprobs --extra-body --header
        --request-id-prefix --response-format --insecure --vllm-compat --disable-shuffle --no-oversample --no-stream
        --skip-chat-template --chat-template-kwargs --random-batch-size --no-reranker --random-mm-base-items-per-request
        --random-mm-num-mm-items-range-ratio --random-mm-limit-mm-per-prompt --random-mm-bucket-config
        --skip-tokenizer-init --sonnet-input-len
        --sonnet-output-len --sonnet-prefix-len --spec-bench-output-len --spec-bench-category --hf-subset --hf-split
        --hf-name --hf-output-len
        --dataset-path --num-prompts --seed --sharegpt-output-len --input-len --output-len --random-input-len --random-output-len
        --random-range-ratio --random-prefix-len --custom-output-len --trace-format --time-scale --trace-start
        --trace-duration --trace-prompts --trace-block-size --timed-trace-sec-multiplier --timed-trace-label-timestamp
        --timed-trace-label-input-length --timed-trace-label-output-length --timed-trace-label-hash-ids --max-idle
        --stream-all --tools --tool-choice --tool-latency --max-tool-rounds --request-rate --burstiness --ramp-up-strategy --ramp-up-start-rps
        --ramp-up-end-rps --cancel-rate --cancel-after --constant-rate --rate-shape --max-concurrency --think-time --ignore-eos --ttft-rule
        --goodput --percentile-metrics --metric-percentiles --slice-duration --gpus --gpu-type --gpu-hour-cost --api-key-file --connect-timeout --read-timeout
        --request-timeout --prefix-repetition-prefix-len --prefix-repetition-suffix-len
        --prefix-repetition-num-prefixes --prefix-repetition-output-len --multi-turn --max-turns --history
        --max-context-tokens --context-policy --turn-think-time --reading-speed --session-header --system-prompt-len
        --keep-reasoning --server-metrics-url --server-metrics-interval --no-server-metrics --stop-on-saturation
        --saturation-window --prometheus-port --prometheus-host --prometheus-linger --cluster-token-file
        --gpu-metrics-url --energy-gpu-ids --energy-price-kwh --otlp-endpoint --mlflow-tracking-uri"""
    assert sorted(wanted.split()) == sorted(o.flag for o in SHARED)


def test_no_option_collides_with_locust_s_own(locust_side: dict[str, Any]) -> None:
    mine = {f for o in options_for(Scope.LOCUST) for f in o.flags}
    assert not set(locust_side["info"]["locust_own"]) & mine
    for flag in LOCUST_OWNS:
        assert flag in locust_side["info"]["locust_own"]
        assert {o.scope for o in OPTIONS if flag in o.flags} == {Scope.BENCH}, flag


def test_bench_keeps_its_help_groups_in_order() -> None:
    titles = [g.title for g in bench_parser()._action_groups][2:]
    assert titles == [title for key, title in GROUPS if key not in ("locust", "webui")]
    locust_only = {o.dest for o in options_for(Scope.LOCUST)} - {o.dest for o in options_for(Scope.BENCH)}
    assert not locust_only & {a.dest for a in bench_parser()._actions}
    assert locust_only == {"arrival", "max_tokens", "user_shape", "llm_records", "llm_result", "api_key", "llm_web_credentials"}


# -- environment variables -----------------------------------------------------------------------------------


def test_locust_reads_llmload_variables(locust_side: dict[str, Any]) -> None:
    opts = parsed(locust_side, "env")
    assert opts.request_rate == 5.0 and opts.ignore_eos is True and opts.goodput == ["ttft:500", "tpot:50"]
    assert opts.metric_percentiles == [50.0, 99.0] and opts.llm_records == "/nonexistent/r.jsonl"
    assert opts.max_tokens == 7
    assert parsed(locust_side, "flag_over_env").request_rate == 2.0


def test_a_bad_variable_is_a_usage_error(locust_side: dict[str, Any]) -> None:
    result = locust_side["jobs"]["bad_env"]
    assert result["code"] == 2 and "--request-rate: expected a number, got 'abc'" in result["err"]


def test_bench_reads_flags_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMLOAD_REQUEST_RATE", "5")
    monkeypatch.setenv("LLMLOAD_MODEL", "from-env")
    args = bench_parser().parse_args([])
    assert math.isinf(args.request_rate) and args.model is None


def test_variables_follow_the_convention_and_are_unique() -> None:
    seen = set()
    for o in options_for(Scope.LOCUST):
        if not o.cli:
            assert o.env_var is None, o.flag  # a form-only field: no variable either
            continue
        assert o.env_var == ENV_EXCEPTIONS.get(o.dest, "LLMLOAD_" + o.dest.upper()), o.flag
        assert o.env_var not in seen
        seen.add(o.env_var)
    assert {o.env_var for o in options_for(Scope.BENCH) if Scope.LOCUST not in o.scope} == {None}
    assert not seen & {"LLMLOAD_API_KEY", "LLMLOAD_CLUSTER_TOKEN", "LLMLOAD_DEBUG"}


# -- secrets -------------------------------------------------------------------------------------------------


def test_secrets_are_flagged(locust_side: dict[str, Any]) -> None:
    info = locust_side["info"]
    assert {o.dest for o in OPTIONS if o.secret} == {"api_key", "llm_web_credentials"}
    assert info["secret_web"] == ["api_key"]
    assert "llm_web_credentials" not in info["web"] and info["actions"]["llm_web_credentials"]["secret"]
    # nothing that reads a local file into a request, or runs a repository's code, from the web form
    assert not set(info["web"]) & {"api_key_file", "trust_remote_code"}
    assert {"api_key", "request_rate", "num_prompts", "arrival"} <= set(info["web"])


def test_no_api_key_on_the_command_line(locust_side: dict[str, Any]) -> None:
    refused = locust_side["jobs"]["api_key_flag"]
    assert refused["code"] == 2 and "--api-key-file" in refused["err"] and "LLMLOAD_API_KEY" in refused["err"]
    assert "sk-on-the-command-line" not in refused["err"]
    # not taken as an abbreviation of --api-key-file either (argparse's allow_abbrev)
    abbreviated = locust_side["jobs"]["api_key_abbreviated"]
    assert abbreviated["code"] == 2 and "sk-abbreviated" not in abbreviated["err"]


def test_api_key_order(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("sk-file\n")
    ns = argparse.Namespace
    assert api_key(ns(api_key_file=None)) is None
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    assert api_key(ns(api_key_file=None)) == "sk-openai"
    monkeypatch.setenv("LLMLOAD_API_KEY", "sk-llmload")
    assert api_key(ns(api_key_file=None)) == "sk-llmload"
    assert api_key(ns(api_key_file=str(key_file))) == "sk-file"
    assert api_key(ns(api_key_file=str(key_file), api_key="sk-typed-in-the-form")) == "sk-typed-in-the-form"
    assert api_key(ns(api_key_file=str(key_file), api_key="")) == "sk-file"


@pytest.mark.parametrize("content, message", [
    (None, "--api-key-file: cannot read {path}: No such file or directory"),
    ("  \n", "--api-key-file: {path} is empty"),
    ("sk-one\nsk-two\n", "--api-key-file: {path} holds more than one line; put only the key in it"),
    (b"\xff\xfe", "--api-key-file: {path} is not a text file"),
    ("dir", "--api-key-file: cannot read {path}: Is a directory"),
])
def test_api_key_file_errors_are_one_line(tmp_path: Path, content: str | bytes | None, message: str) -> None:
    path = tmp_path / "key"
    if content == "dir":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError) as exc:
        api_key(argparse.Namespace(api_key_file=str(path)))
    assert str(exc.value) == message.format(path=path)
    assert "sk-" not in str(exc.value)


# -- what the values mean ------------------------------------------------------------------------------------


def test_num_prompts_default_means_1000_or_200_against_the_simulator(locust_side: dict[str, Any]) -> None:
    bench = bench_parser()
    for default, seven, trace in ((bench.parse_args([]), bench.parse_args(["--num-prompts", "7"]),
                                   bench.parse_args(["--dataset-name", "trace"])),
                                  (parsed(locust_side, "defaults"), parsed(locust_side, "num_prompts"),
                                   parsed(locust_side, "trace"))):
        assert default.num_prompts is None
        assert prompt_count(default, simulator=False) == 1000 and prompt_count(default, simulator=True) == 200
        assert prompt_count(seven, simulator=True) == 7 and prompt_count(trace, simulator=True) is None


def test_max_tokens_is_locust_s_alias_for_the_output_length(locust_side: dict[str, Any]) -> None:
    assert not parsed(locust_side, "defaults").max_tokens
    assert parsed(locust_side, "max_tokens").max_tokens == 16
    assert not hasattr(bench_parser().parse_args([]), "max_tokens")


def test_normalize_options_retypes_the_web_form_s_strings(locust_side: dict[str, Any]) -> None:
    opts = copy.copy(parsed(locust_side, "defaults"))
    opts.num_prompts, opts.max_concurrency, opts.model, opts.request_rate = "12", "", "", "inf"
    normalize_options(opts)
    assert (opts.num_prompts, opts.max_concurrency, opts.model) == (12, None, None)
    assert math.isinf(opts.request_rate) and opts.arrival == "closed"
    for dest, bad, words in (("request_rate", "-1", "--request-rate: must be > 0 or inf"),
                             ("num_prompts", "x", "--num-prompts: expected an integer"),
                             ("arrival", "sometimes", "--arrival: expected one of closed, open")):
        opts = copy.copy(parsed(locust_side, "defaults"))
        setattr(opts, dest, bad)
        with pytest.raises(ConfigError, match=words):
            normalize_options(opts)


def test_every_option_is_declared_once() -> None:
    dests = [o.dest for o in OPTIONS]
    flags = [f for o in OPTIONS for f in o.flags]
    assert len(dests) == len(set(dests)) and len(flags) == len(set(flags))
    assert option("request_rate").default == math.inf
    with pytest.raises(KeyError):
        option("no_such_option")


def test_docs_page_is_generated_from_the_table() -> None:
    page = (ROOT / "docs" / "options.md").read_text()
    assert page == render(), "docs/options.md is stale: python -m llmload.options.docs > docs/options.md"
    for o in OPTIONS:
        assert f"`{o.flag}`" in page and (o.env_var is None or o.env_var in page)


# -- the simulator names its tokenizer -----------------------------------------------------------------------


@pytest.mark.slow
def test_simulator_names_its_tokenizer_and_describe_server_reads_it(start_sim) -> None:
    from llmload.core.target import describe_server
    from llmload.tokenizer import builtin_tokenizer_dir

    tokenizer_dir = str(builtin_tokenizer_dir())
    for flags, expected in ((("--tokenizer", tokenizer_dir), tokenizer_dir), ((), "builtin")):
        sim = start_sim(*flags)
        with urllib.request.urlopen(f"{sim.url}/v1/models", timeout=10) as resp:
            listed = json.loads(resp.read())["data"]
        assert [m["llmload_tokenizer"] for m in listed] == [expected]
        info = describe_server(sim.url, None, timeout=10)
        assert info.models == [m["id"] for m in listed] and info.tokenizer == expected and info.is_simulator


def test_describe_server_keeps_served_models_messages() -> None:
    import socket

    from llmload.core.target import describe_server

    with socket.socket() as refuser:  # bound, not listening: connections are refused
        refuser.bind(("127.0.0.1", 0))
        port = refuser.getsockname()[1]
        with pytest.raises(EndpointError, match=rf"^cannot reach the server at http://u:\*\*\*@127\.0\.0\.1:{port}: "):
            describe_server(f"http://u:secret@127.0.0.1:{port}", None, timeout=5)


def test_processes_auto_counts_the_cores_this_process_may_use() -> None:
    import os
    import pickle

    from llmload.options.argtypes import ArgumentTypeError, auto_processes, process_count

    assert [auto_processes(n) for n in (1, 2, 3, 4, 16)] == [1, 2, 2, 3, 15]
    auto = process_count("auto")
    assert auto == auto_processes(len(os.sched_getaffinity(0))) and auto.cores == len(os.sched_getaffinity(0))
    assert pickle.loads(pickle.dumps(auto)) == int(auto)  # a copy is the count it chose, as a plain int
    assert process_count("3") == 3
    for bad in ("0", "x", "-1"):
        with pytest.raises(ArgumentTypeError):
            process_count(bad)
