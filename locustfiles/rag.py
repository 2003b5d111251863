"""A RAG stack under load: embed, rerank, then generate, as weighted user classes with their own SLOs
(docs/multimodal.md, "A RAG workload").

    locust -f locustfiles/rag.py --host http://127.0.0.1:8000 --headless -u 16 -t 2m \
        --dataset-name random-rerank --random-input-len 256 --random-batch-size 8 --num-prompts 4000

Every request takes one sample of the ``random-rerank`` dataset: a query and ``--random-batch-size`` documents.
``Embed`` embeds them (one ``/v1/embeddings`` request, the query and documents as a batch), ``Rerank`` ranks the
documents against the query (``/v1/rerank``), ``Generate`` streams an answer from ``/v1/chat/completions`` with the
documents as context and the query last. Each class keeps its own SLOs (its goodput in the result's ``by_class``):
pooling requests have no first token, so theirs are on end-to-end latency.
"""

from typing import ClassVar

from locust import run_single_user

from llmload.locust import ChatUser, EmbeddingsUser, RerankUser


class Embed(EmbeddingsUser):
    weight = 3
    goodput: ClassVar[dict[str, float]] = {"e2el": 500}


class Rerank(RerankUser):
    weight = 2
    goodput: ClassVar[dict[str, float]] = {"e2el": 800}


class Generate(ChatUser):
    weight = 1
    goodput: ClassVar[dict[str, float]] = {"ttft": 2000, "tpot": 100}


if __name__ == "__main__":
    run_single_user(Generate)
