"""Replay ShareGPT prompts as streaming completions and time every token.

    locust -f locustfiles/sharegpt.py --host http://127.0.0.1:8000 --backend vllm --model my-model

Options (also LLMLOAD_* environment variables and the web UI's start form): llmload bench's workload, arrival
and metric options (--backend, --model, --endpoint, --dataset-name, --dataset-path, --num-prompts, --tokenizer,
--request-rate, --ignore-eos, --ttft-rule, ...) plus --arrival, --max-tokens, --user-shape, --llm-records;
docs/options.md lists them all. The API key: --api-key-file, $LLMLOAD_API_KEY or $OPENAI_API_KEY.
"""

from locust import run_single_user

from llmload.locust import ShareGPTUser


class ShareGPT(ShareGPTUser):
    pass


if __name__ == "__main__":
    run_single_user(ShareGPT)
