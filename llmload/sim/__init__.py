"""The simulated LLM inference engine behind ``llmload sim``.

An OpenAI-compatible (plus SGLang, TGI and TensorRT-LLM native) streaming server whose timing comes from a
continuous-batching model or from fixed per-request times. It is the default benchmark target, the ground
truth for llmload's own measurement tests (``--trace-file``), and cheap enough never to be the bottleneck.

    config.py     SimConfig and the named timing profiles
    engine.py     the timing models: continuous batching and fixed timing (pure, no I/O)
    prefix_cache.py  vLLM-style prefix cache: chained block keys, LRU, the last-token rule
    text.py       deterministic generated text
    requests.py   parse and validate a request body into a GenRequest
    errors.py     the error answers (vLLM's 400/404/501 bodies)
    chat.py       render chat messages into the engine's prompt, with their image parts
    images.py     image parts: size from the header, Qwen2-VL's token count, the multimodal cache
    pooling.py    the pooling routes' bodies (/v1/embeddings, /pooling, rerank) and their token counts
    pooling_wire.py  their JSON answers: deterministic embeddings and rerank scores
    structured.py, schema.py  structured output: JSON for a response_format at the requested length
    tools.py      tool calls: tools and tool_choice, which call a request makes, what its tokens are
    wire.py       render each dialect's stream events and JSON responses
    typed_wire.py the typed-event APIs (Responses, Messages): their stream events and JSON responses
    faults.py     seeded fault selection
    loop.py       the epoll event loop with timerfd deadlines
    power.py      the simulated GPUs' power model (pure): energy, power cap, utilisation, memory, temperature
    metrics/      /metrics: vLLM's and SGLang's names, the workers' shared counters, --engine-trace; /dcgm/metrics
    server/       HTTP handling, streams, the trace file, worker processes (a package)
"""
