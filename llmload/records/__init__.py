"""What one request measured (:class:`RequestRecord`) and the records file every way in writes
(:mod:`llmload.records.file`)."""

from llmload.records.record import RequestRecord

__all__ = ["RequestRecord"]
