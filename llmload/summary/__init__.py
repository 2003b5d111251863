"""The printed result block (:mod:`llmload.summary.block`): vLLM's layout, then llmload's lines, the conversation
blocks (:mod:`llmload.summary.conversations`) and the per-class block, and the run's accounting
(:mod:`llmload.summary.accounting`), in the line formats of :mod:`llmload.summary.lines`."""

from llmload.summary.accounting import format_accounting
from llmload.summary.block import (
    failure_lines,
    format_class_block,
    format_llmload_block,
    format_run_header,
    format_summary,
    format_vllm_block,
)
from llmload.summary.lines import EXAMPLE_CHARS, WIDTH, float_line, heading, int_line
from llmload.summary.vllm_sections import format_failed_requests

__all__ = ["EXAMPLE_CHARS", "WIDTH", "failure_lines", "float_line", "format_accounting", "format_class_block", "format_failed_requests",
           "format_llmload_block",
           "format_run_header", "format_summary", "format_vllm_block", "heading", "int_line"]
