"""Custom prompts from JSONL: one ``{"prompt": str, "output_len"?: int, "images"?: [path or URL, ...]}`` object per
line.

``images``: local files (absolute, or relative to the JSONL file's folder) are read and sent as ``data:`` URLs, remote
and ``data:`` URLs are sent as they are (docs/multimodal.md); a missing or unreadable file, or one that is not an
image, is one line and exit 2 before the first request.

Blank lines are skipped; ``output_len`` defaults to the value passed in (``--custom-output-len``).
Rows are used in file order, cycling is the caller's business; ``num_prompts`` caps the count.
"""

from __future__ import annotations

from pathlib import Path

from llmload.common.errors import DatasetError
from llmload.datasets.base import SampleRequest, Tokenizer, jsonl_objects, read_text, token_len
from llmload.datasets.images import image_url

DEFAULT_OUTPUT_LEN = 256


def sample_custom(
    path: str | Path,
    tokenizer: Tokenizer,
    num_prompts: int | None = None,
    *,
    default_output_len: int = DEFAULT_OUTPUT_LEN,
) -> list[SampleRequest]:
    """The first ``num_prompts`` rows of a JSONL file (all rows when ``None``)."""
    path = Path(path)
    lines = read_text(path).splitlines()
    out: list[SampleRequest] = []
    for lineno, row in jsonl_objects(path, lines):
        if num_prompts is not None and len(out) >= num_prompts:
            break
        prompt = row.get("prompt")
        if not isinstance(prompt, str) or not prompt:
            raise DatasetError(f"{path}:{lineno}: missing or empty string key 'prompt'")
        output_len = row.get("output_len", default_output_len)
        if isinstance(output_len, bool) or not isinstance(output_len, int) or output_len < 1:
            raise DatasetError(
                f"{path}:{lineno}: 'output_len' must be a positive integer, got {output_len!r}"
            )
        out.append(
            SampleRequest(
                prompt=prompt,
                prompt_len=token_len(tokenizer, prompt),
                expected_output_len=output_len,
                request_id=str(row.get("id", f"{path.name}:{lineno}")),
                images=_images(path, lineno, row.get("images")),
            )
        )
    if not out:
        raise DatasetError(f'{path}: no prompts (expected JSONL lines like {{"prompt": "..."}})')
    return out


def _images(path: Path, lineno: int, given: object) -> list[str] | None:
    """A row's ``images`` as request URLs; None for a row without."""
    if given is None:
        return None
    if not isinstance(given, list) or not all(isinstance(s, str) and s for s in given):
        raise DatasetError(f"{path}:{lineno}: 'images' must be a list of file paths or URLs")
    try:
        return [image_url(source, path.parent) for source in given] or None
    except DatasetError as exc:
        raise DatasetError(f"{path}:{lineno}: {exc}") from None
