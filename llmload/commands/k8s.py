"""Kubernetes manifests for a run, ready to apply: no hand-edited YAML.

'llmload k8s render' prints (or with --output writes as a kustomize directory) the objects of one deployment:
  headless (default)  a master Job running 'llmload bench --master' with the bench flags you give, N worker pods
                      as a Job, a headless Service for the master's port; the summary is in the master's log, the
                      result JSON and records on the results PVC; every pod ends when the test ends
  --webui             'locust -f' with the LLM tab as a Deployment + Service (port-forward 8089; login from the
                      Secret <name>-web-credentials), workers as a Deployment 'kubectl scale' resizes; the bench
                      flags become the LLMLOAD_* variables locust reads
Both: an options ConfigMap (target, model, tokenizer), the results PVC, non-root read-only containers, resource
requests, the API key from the Secret <name>-api-key as an environment variable only.

examples:
  llmload k8s render --workers 4 --base-url http://vllm.default.svc:8000 --model Qwen/Qwen3-8B \\
      --num-prompts 2000 --request-rate 20 | kubectl apply -f -
  llmload k8s render --workers 8 --base-url http://sglang:30000 --model M --tokenizer-claim tokenizers -o run1/
  llmload k8s render --webui --workers 2 --base-url http://vllm:8000 --model M --locustfile my_test.py

docs/kubernetes.md walks from 'docker build' to a collected result JSON.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from llmload.options import argtypes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="k8s_command", metavar="render", required=True)
    render = sub.add_parser("render", help="print the manifests of one deployment (bench flags go to the run)",
                            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    render.add_argument("--workers", type=argtypes.positive_int, default=4, help="worker pods (default: %(default)s)")
    render.add_argument("--base-url", required=True, help="the server, as the pods reach it (a Service URL)")
    render.add_argument("--model", required=True, help="the served model's name")
    render.add_argument("--tokenizer", help="tokenizer id or path (default: the model's id, downloaded with "
                                            "$HF_TOKEN from the Secret <name>-hf-token)")
    render.add_argument("--tokenizer-claim", metavar="PVC",
                        help="a PVC holding a tokenizer directory: mounted read-only at /tokenizer, nothing is "
                             "downloaded (HF_HUB_OFFLINE=1)")
    render.add_argument("--webui", action="store_true", help="the live web UI deployment instead of headless Jobs")
    render.add_argument("--locustfile", type=Path, metavar="FILE",
                        help="--webui: your locustfile, shipped in a ConfigMap (default: the image's sharegpt.py)")
    render.add_argument("--image", default="llmload:latest", help="the image (default: %(default)s)")
    render.add_argument("--name", default="llmload", help="prefix of every object's name (default: %(default)s)")
    render.add_argument("--namespace", help="metadata.namespace of every object (default: none, kubectl's)")
    render.add_argument("--master-port", type=argtypes.port, default=5557, help="(default: %(default)s)")
    render.add_argument("--web-port", type=argtypes.port, default=8089, help="(default: %(default)s)")
    render.add_argument("--results-size", default="1Gi", help="the results PVC's size (default: %(default)s)")
    render.add_argument("--worker-cpu", default="1", help="CPU per worker pod, request and limit (default: 1 core: "
                                                          "one load process)")
    render.add_argument("--output", "-o", type=Path, metavar="DIR",
                        help="write one file per object and a kustomization.yaml here instead of printing")


def run(args: argparse.Namespace) -> int:
    from llmload.k8s.cli import render_command

    return render_command(args, args.bench_flags)


def parse_args(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """Render's own flags; everything else is a bench flag for the run (checked by bench's parser)."""
    args, rest = parser.parse_known_args(argv)
    args.bench_flags = rest
    return args
