"""What one request measured (:class:`RequestRecord`) and the records file every way in writes
(:mod:`llmload.client.records.file`)."""

from llmload.client.records.record import RequestRecord

__all__ = ["RequestRecord"]
