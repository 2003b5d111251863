"""Every option's default lives in ``llmload/options/table.py``: code that reads an option with a fallback reads
it through ``options.option_value`` (or the parsed value itself), never ``getattr(opts, "dest", <a default>)``,
which would let the default drift from the table's (issue 21 found five such copies)."""

from __future__ import annotations

import ast
from pathlib import Path

from llmload.options import OPTIONS

ROOT = Path(__file__).resolve().parents[2]
DESTS = {o.dest for o in OPTIONS}
#: fallbacks that say "not given", not a default
NEUTRAL = (None, "", False, 0, ())


def repeated_defaults(source: str, where: str) -> list[str]:
    """``getattr(x, "dest", default)`` calls in ``source`` where ``dest`` is a table option and ``default`` is a
    real value (a literal other than None, "", False, 0, or any expression)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                and len(node.args) == 3):
            continue
        name, default = node.args[1], node.args[2]
        if not (isinstance(name, ast.Constant) and name.value in DESTS):
            continue
        if isinstance(default, ast.Constant) and default.value in NEUTRAL:
            continue
        found.append(f"{where}:{node.lineno}: getattr(..., {name.value!r}, {ast.unparse(default)})")
    return found


def test_no_module_repeats_an_option_default() -> None:
    found = []
    for path in sorted((ROOT / "llmload").rglob("*.py")):
        found += repeated_defaults(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    assert not found, "read these through llmload.options.option_value:\n" + "\n".join(found)


def test_the_check_finds_a_repeated_default() -> None:
    source = 'rate = getattr(opts, "request_rate", 1.0)\nname = getattr(opts, "model", "")\n'
    assert repeated_defaults(source, "x.py") == ["x.py:1: getattr(..., 'request_rate', 1.0)"]
