"""Every flag of today's ``vllm bench serve`` the drop-in issue names, as its scripts write it, parses with
``llmload bench``'s parser to vLLM's meaning (dest and value), and the vLLM-internal ones are refused with exit 2
and one line saying why. Where the flags land (the request, the run) is checked at the simulator by
tests/integration/test_vllm_flags.py, test_vllm_run_control.py and test_vllm_datasets_run.py."""

from __future__ import annotations

import argparse

import pytest

from llmload.options import add_bench_arguments

#: (argv as a vllm bench serve script writes it, dest, the value vLLM's meaning gives)
ACCEPTED = [
    (["--input-len", "512"], "input_len", 512),
    (["--output-len", "64"], "output_len", 64),
    (["--header", "X-A=1", "X-B=2"], "header", ["X-A=1", "X-B=2"]),
    (["--extra-body", '{"top_p": 0.9}'], "extra_body", '{"top_p": 0.9}'),
    (["--temperature", "0"], "temperature", 0.0),
    (["--top-p", "0.9"], "top_p", 0.9),
    (["--top-k", "20"], "top_k", 20),
    (["--min-p", "0.1"], "min_p", 0.1),
    (["--frequency-penalty", "0.5"], "frequency_penalty", 0.5),
    (["--presence-penalty", "0.5"], "presence_penalty", 0.5),
    (["--repetition-penalty", "1.1"], "repetition_penalty", 1.1),
    (["--logprobs", "3"], "logprobs", 3),
    (["--request-id-prefix", "bench-1-"], "request_id_prefix", "bench-1-"),
    (["--insecure"], "insecure", True),
    (["--num-warmups", "5"], "num_warmups", 5),
    (["--ready-check-timeout-sec", "600"], "ready_check_timeout_sec", 600),
    (["--probe-request-rate", "2"], "probe_request_rate", 2.0),
    (["--append-result"], "append_result", True),
    (["--percentile-metrics", "ttft,tpot,itl,e2el,client_queue_time,e2el_including_client_queue"],
     "percentile_metrics", ["ttft", "tpot", "itl", "e2el", "client_queue_time", "e2el_including_client_queue"]),
    (["--metric-percentiles", "50,90,99"], "metric_percentiles", [50.0, 90.0, 99.0]),
    (["--dataset-name", "timed_trace", "--timed-trace-sec-multiplier", "0.001"], "timed_trace_sec_multiplier",
     0.001),
    (["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1", "--ramp-up-end-rps", "8"], "ramp_up_strategy",
     "linear"),
    (["--lora-modules", "a", "b", "--lora-assignment", "round-robin"], "lora_assignment", "round-robin"),
    (["--goodput", "ttft:500", "tpot:50"], "goodput", ["ttft:500", "tpot:50"]),
    (["--save-result", "--save-detailed", "--result-dir", "out", "--result-filename", "r.json"], "result_filename",
     "r.json"),
    (["--metadata", "gpu=h100"], "metadata", ["gpu=h100"]),
    (["--random-range-ratio", '{"input": 0.1, "output": 0.2}'], "random_range_ratio", (0.1, 0.2)),
    (["--no-oversample"], "no_oversample", True),
    (["--disable-shuffle"], "disable_shuffle", True),
    (["--no-stream"], "no_stream", True),
    (["--skip-chat-template"], "skip_chat_template", True),
    (["--skip-tokenizer-init"], "skip_tokenizer_init", True),
    (["--random-batch-size", "1"], "random_batch_size", 1),
    (["--dataset-name", "sonnet", "--sonnet-input-len", "300"], "sonnet_input_len", 300),
    (["--sonnet-output-len", "50"], "sonnet_output_len", 50),
    (["--sonnet-prefix-len", "100"], "sonnet_prefix_len", 100),
    (["--dataset-name", "burstgpt"], "dataset_name", "burstgpt"),
    (["--dataset-name", "spec_bench", "--spec-bench-output-len", "64"], "spec_bench_output_len", 64),
    (["--spec-bench-category", "math"], "spec_bench_category", "math"),
    (["--dataset-name", "hf", "--hf-split", "test"], "hf_split", "test"),
    (["--hf-subset", "default"], "hf_subset", "default"),
    (["--hf-name", "philschmid/mt-bench"], "hf_name", "philschmid/mt-bench"),
    (["--hf-output-len", "32"], "hf_output_len", 32),
    # vLLM's multimodal and pooling benchmarks (docs/multimodal.md), as its docs write them
    (["--dataset-name", "random-mm", "--random-mm-base-items-per-request", "2"], "random_mm_base_items_per_request",
     2),
    (["--random-mm-num-mm-items-range-ratio", "0.5"], "random_mm_num_mm_items_range_ratio", 0.5),
    (["--random-mm-limit-mm-per-prompt", '{"image": 3, "video": 0}'], "random_mm_limit_mm_per_prompt",
     {"image": 3, "video": 0}),
    (["--random-mm-bucket-config", "{(224, 224, 1): 1.0}"], "random_mm_bucket_config", {(224, 224, 1): 1.0}),
    (["--random-mm-bucket-config", '{"(256, 256, 1)": 0.5, "(720, 1280, 1)": 0.5}'], "random_mm_bucket_config",
     {(256, 256, 1): 0.5, (720, 1280, 1): 0.5}),
    (["--backend", "openai-embeddings", "--endpoint", "/v1/embeddings"], "backend", "openai-embeddings"),
    (["--backend", "vllm-rerank", "--dataset-name", "random-rerank"], "dataset_name", "random-rerank"),
    (["--random-batch-size", "8"], "random_batch_size", 8),
    (["--no-reranker"], "no_reranker", True),
]
REFUSED = ["--profile", "--plot-timeline", "--plot-dataset-stats", "--use-beam-search", "--enable-multimodal-chat",
           "--tokenizer-mode"]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="llmload bench")
    add_bench_arguments(p)
    return p


@pytest.mark.parametrize(("argv", "dest", "value"), ACCEPTED, ids=[a[0][0] for a in ACCEPTED])
def test_vllm_flag_parses_to_its_meaning(argv: list[str], dest: str, value: object) -> None:
    parsed = parser().parse_args(argv)
    got = getattr(parsed, dest)
    assert (list(got) if isinstance(got, tuple) and isinstance(value, list) else got) == value


@pytest.mark.parametrize("flag", REFUSED)
def test_vllm_internal_flag_is_one_line_exit_2(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parser().parse_args([flag] if flag != "--tokenizer-mode" else [flag, "mistral"])
    assert exc.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1 and f"{flag} is a vLLM-internal flag" in errors[0]


@pytest.mark.parametrize(("argv", "message"), [
    (["--probe-request-rate", "1"], "--probe-request-rate is a llmload bench flag"),
    (["--num-warmups", "2"], "--num-warmups: use the sweep's own --warmup N"),
    (["--append-result"], "--append-result: a sweep writes one result JSON per point"),
])
def test_sweep_refuses_the_bench_only_run_control(argv: list[str], message: str) -> None:
    import subprocess

    from support import llmload_command, offline_env

    done = subprocess.run([*llmload_command(), "sweep", "--request-rates", "1,2", *argv], capture_output=True,
                          text=True, timeout=60, env=offline_env())
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and message in errors[0] and "Traceback" not in done.stderr
