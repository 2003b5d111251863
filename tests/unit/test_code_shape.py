"""Protects the code-size rule: no module under llmload/ over 400 lines, no function over 60 lines unless
its docstring says it is "long on purpose" (and why).

Long modules and functions hide several jobs in one place; the limit makes a split the default and a long
function a stated decision. ``python tests/unit/test_code_shape.py`` lists every violation, the allow-listed
files included.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "llmload"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
JUSTIFIED = "long on purpose"
"""A function whose docstring contains this phrase (any case) may be longer; the sentence says why."""

#: modules exempt from the rule (none: every module follows it)
ALLOW_LIST: tuple[str, ...] = ()


@dataclass(frozen=True)
class Violation:
    path: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


def allow_listed(path: str) -> bool:
    return any(fnmatch(path, pattern) for pattern in ALLOW_LIST)


def module_paths() -> list[str]:
    """Every module of the package, as a repository-relative POSIX path."""
    return sorted(p.relative_to(ROOT).as_posix() for p in PACKAGE.rglob("*.py"))


def violations(path: str) -> list[Violation]:
    """The module's length and each over-long, unjustified function (methods and nested ones included)."""
    source = (ROOT / path).read_text(encoding="utf-8")
    found: list[Violation] = []
    lines = len(source.splitlines())
    if lines > MAX_MODULE_LINES:
        found.append(Violation(path, 1, f"module has {lines} lines (max {MAX_MODULE_LINES})"))
    for node in ast.walk(ast.parse(source, filename=path)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        length = (node.end_lineno or node.lineno) - node.lineno + 1
        if length > MAX_FUNCTION_LINES and JUSTIFIED not in (ast.get_docstring(node) or "").lower():
            found.append(
                Violation(
                    path,
                    node.lineno,
                    f"{node.name}() has {length} lines (max {MAX_FUNCTION_LINES}, "
                    f"or say why in its docstring with {JUSTIFIED!r})",
                )
            )
    return found


CHECKED = [p for p in module_paths() if not allow_listed(p)]


@pytest.mark.parametrize("path", CHECKED)
def test_module_and_functions_are_short(path: str) -> None:
    found = violations(path)
    assert not found, "\n".join(map(str, found))


def test_the_checker_finds_long_code(tmp_path: Path) -> None:
    """The rule itself: a long module, a long function, and a long function that says why."""
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    source = (
        f"def long():\n{body}\n\n"
        f'def justified():\n    """Long on purpose: one table."""\n{body}\n' + "\n" * MAX_MODULE_LINES
    )
    module = tmp_path / "long.py"
    module.write_text(source)
    found = [v.what for v in violations(str(module))]  # an absolute path: ROOT / path is that path
    assert len(found) == 2
    assert found[0].startswith("module has")
    assert found[1].startswith("long() has")


if __name__ == "__main__":
    every = [v for p in module_paths() for v in violations(p)]
    for v in every:
        print(f"{v}{'  [allow-listed]' if allow_listed(v.path) else ''}")
    sys.exit(1 if any(not allow_listed(v.path) for v in every) else 0)
