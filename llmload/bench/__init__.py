"""``llmload bench``: a headless benchmark run in-process on the run core (:mod:`llmload.core`), llmload's LLM user and gevent.

    dispatch.py   open-loop sends on an absolute clock, one greenlet per request, bounded concurrency
    health.py     the client's own CPU and event-loop lag: was the client the bottleneck?
    progress.py   the progress line on stderr
    results.py    result JSON (vLLM's keys) and the per-request records file
"""
