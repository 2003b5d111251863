"""The client side of one request: the Locust users that send it (:mod:`.users`), the stream reader that times it
(:mod:`.reader`), the record it leaves (:mod:`.records`), how it failed (:mod:`.failures`), llmload's events
(:mod:`.events`), the wire dialects (:mod:`.backends`, :mod:`.sse`) and the HTTP transport (:mod:`.transport`).

Nothing is imported here: the simulator uses the dialects without gevent, and ``import llmload.client.backends``
must stay that cheap. docs/design.md, "Architecture", has the layers.
"""
