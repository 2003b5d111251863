"""Protects the layers: the import graph, read from the code, against docs/design.md's table "Modules and what
they may import", so that neither can drift from the other.

Every ``import`` of llmload under ``llmload/`` counts: the ones inside functions (they run) and the ones under
``if TYPE_CHECKING:`` (a loop in the types is a loop in the design); a module that takes names from its own
package's ``__init__`` (``from llmload.plugin import tell``) while that ``__init__`` imports it is a loop too (a
submodule named that way, ``from llmload.options import table``, is an import of the submodule). A *unit* is a top-level package (``core`` for
``llmload/core/``) or module (``cli``), or, inside ``llmload/client/`` (the client side, which spans layers), one
of its modules or subpackages (``client.transport``). For each row of the table the test holds: the units its code
imports are exactly the ones the row lists, none of them is one it must not import, the units import one another
without a cycle and so do the modules; no module imports another's private names; no module lies loose beside
the packages (only ``__init__``, ``__main__`` and ``cli``). The layer picture in docs/design.md is this graph's,
and is checked too.

``python tests/unit/test_layers.py`` prints the graph and the picture to paste.
"""

from __future__ import annotations

import ast
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "llmload"
DESIGN = ROOT / "docs" / "design.md"
TABLE_HEADING = "### Modules and what they may import"
PICTURE_START = "<!-- layers: python tests/unit/test_layers.py -->"
PICTURE_END = "<!-- /layers -->"
#: the root package's own unit (``llmload/__init__.py``: ``from llmload import __version__``)
ROOT_UNIT = "llmload"
#: packages that group units of several layers: each of their modules and subpackages is a unit of its own
#: (``client.users``, ``client.transport``); the package's ``__init__`` is the unit ``client``
SPLIT_PACKAGES = frozenset({"client"})
#: the only modules allowed directly in llmload/, beside its packages
TOP_MODULES = frozenset({"__init__", "__main__", "cli"})


@dataclass(frozen=True)
class Import:
    """One import statement of llmload in a module (``target``: the module it loads)."""

    module: str
    target: str
    line: int
    names: tuple[str, ...] = ()


@dataclass(frozen=True)
class Rule:
    """A row of the table: the units it covers, what they import, what they must not."""

    units: frozenset[str]
    imports: frozenset[str]
    forbidden: frozenset[str]
    anything_else_forbidden: bool


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def unit_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 2 and parts[1] in SPLIT_PACKAGES:
        return f"{parts[1]}.{parts[2]}"
    return parts[1] if len(parts) > 1 else ROOT_UNIT


def imports_in(module: str, source: str, modules: set[str], is_package: bool = False) -> list[Import]:
    """Every import of llmload in ``source`` (the text of ``module``), resolved to the modules it loads."""
    tree = ast.parse(source)
    found: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [Import(module, alias.name, node.lineno) for alias in node.names
                      if alias.name.split(".")[0] == "llmload"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            if target.split(".")[0] != "llmload":
                continue
            names = tuple(alias.name for alias in node.names)
            submodules = [f"{target}.{n}" for n in names if f"{target}.{n}" in modules]
            found += [Import(module, sub, node.lineno) for sub in submodules]
            if len(submodules) < len(names):  # names of the package's __init__ itself
                found.append(Import(module, target, node.lineno, tuple(n for n in names if f"{target}.{n}"
                                                                         not in modules)))
    return found


def resolve(target: str, modules: set[str]) -> str:
    """The module an import loads (``llmload.x.y`` may name a function of ``llmload.x``)."""
    while target not in modules and "." in target:
        target = target.rsplit(".", 1)[0]
    return target


def code_imports() -> list[Import]:
    modules = all_modules()
    names = set(modules)
    out: list[Import] = []
    for module, path in modules.items():
        out += imports_in(module, path.read_text(encoding="utf-8"), names, path.name == "__init__.py")
    return [Import(i.module, resolve(i.target, names), i.line, i.names) for i in out]


def unit_graph(found: list[Import]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for i in found:
        a, b = unit_of(i.module), unit_of(i.target)
        graph[a]
        if a != b:
            graph[a].add(b)
    for module in all_modules():
        graph[unit_of(module)]
    return dict(graph)


def _names(cell: str) -> set[str]:
    return {n.strip().rstrip("/").removesuffix(".py") for n in re.findall(r"`([^`]+)`", cell)}


def read_rules(text: str) -> list[Rule]:
    """The table under :data:`TABLE_HEADING`: ``| units | job | imports | must not import |`` rows."""
    section = text.split(TABLE_HEADING, 1)[1].split("\n#", 1)[0]
    rules = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[0].startswith("`"):
            continue
        rules.append(Rule(frozenset(_names(cells[0])), frozenset(_names(cells[2])), frozenset(_names(cells[3])),
                          "anything else" in cells[3]))
    return rules


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def violations(graph: dict[str, set[str]], rules: list[Rule]) -> list[str]:
    """Everything where the code and the table disagree, one line each."""
    out: list[str] = []
    rule_of: dict[str, Rule] = {}
    for rule in rules:
        for unit in rule.units:
            if unit in rule_of:
                out.append(f"{unit}: in two rows of the table")
            rule_of[unit] = rule
    out += [f"{u}: in the code, not in the table" for u in sorted(set(graph) - set(rule_of))]
    out += [f"{u}: in the table, not in the code" for u in sorted(set(rule_of) - set(graph))]
    for unit in sorted(set(graph) & set(rule_of)):
        rule = rule_of[unit]
        forbidden = rule.forbidden | (set(graph) - rule.imports - rule.units if rule.anything_else_forbidden else set())
        actual = graph[unit] - rule.units
        for target in sorted(actual & forbidden):
            out.append(f"{unit} imports {target}, which design.md says it must not import")
        for target in sorted(actual - rule.imports - forbidden):
            out.append(f"{unit} imports {target}, which design.md does not list for it")
    for rule in rules:
        used = set().union(*(graph.get(u, set()) for u in rule.units)) - rule.units
        names = ", ".join(sorted(rule.units))
        for target in sorted(rule.imports - used):
            out.append(f"design.md lists {target} for {names}, which none of them imports")
        for target in sorted(rule.imports & rule.forbidden):
            out.append(f"design.md both lists {target} for {names} and forbids it")
    return out


def layers(graph: dict[str, set[str]]) -> list[list[str]]:
    """Units by layer: each sits one above the highest unit it imports (layer 0 imports nothing of llmload)."""
    depth: dict[str, int] = {}

    def level(u: str) -> int:
        if u not in depth:
            depth[u] = -1  # on the path: a cycle, reported by the cycle test
            depth[u] = 1 + max((level(v) for v in graph.get(u, ()) if depth.get(v) != -1), default=-1)
        return depth[u]

    for u in graph:
        level(u)
    rows: dict[int, list[str]] = defaultdict(list)
    for u, d in depth.items():
        rows[d].append(u)
    return [sorted(rows[d]) for d in sorted(rows)]


def picture(graph: dict[str, set[str]]) -> str:
    lines = ["```", "layer  units (each imports only units in the layers below it)"]
    for d, row in reversed(list(enumerate(layers(graph)))):
        text = "  ".join(row)
        lines.append(f"{d:>5}  {text}")
    lines.append("```")
    return "\n".join(lines)


# -- the tests ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def found() -> list[Import]:
    return code_imports()


@pytest.fixture(scope="module")
def graph(found: list[Import]) -> dict[str, set[str]]:
    return unit_graph(found)


def test_the_imports_are_the_ones_design_md_lists(graph: dict[str, set[str]]) -> None:
    problems = violations(graph, read_rules(DESIGN.read_text(encoding="utf-8")))
    assert not problems, "\n".join(problems)


def test_units_import_one_another_without_a_cycle(graph: dict[str, set[str]]) -> None:
    assert not cycles(graph)


def module_graph(found: list[Import]) -> dict[str, set[str]]:
    """Module -> the modules it imports (a package's ``__init__`` is the package's name)."""
    modules: dict[str, set[str]] = defaultdict(set)
    for i in found:
        if i.target != i.module:
            modules[i.module].add(i.target)
    return modules


def loose_modules(paths: list[Path]) -> list[str]:
    """The modules directly in llmload/ that are not :data:`TOP_MODULES`."""
    return sorted(p.stem for p in paths if p.parent == PACKAGE and p.suffix == ".py" and p.stem not in TOP_MODULES)


def test_modules_import_one_another_without_a_cycle(found: list[Import]) -> None:
    assert not cycles(module_graph(found))


def test_no_module_lies_loose_beside_the_packages() -> None:
    assert not loose_modules(list(PACKAGE.glob("*.py")))


def test_the_checks_find_a_loose_module_and_a_loop_through_a_package_init() -> None:
    """They can fail: a new loose module, and a module that imports its own package's ``__init__`` (here in the
    types only) while the ``__init__`` imports it."""
    assert loose_modules([PACKAGE / "cli.py", PACKAGE / "helpers.py", PACKAGE / "core" / "run.py"]) == ["helpers"]
    modules = {"llmload.pkg", "llmload.pkg.build", "llmload.pkg.table"}
    init = imports_in("llmload.pkg", "from llmload.pkg.build import add\n", modules, is_package=True)
    build = imports_in("llmload.pkg.build", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                       "    from llmload.pkg import Table\n", modules)
    assert cycles(module_graph(init + build)) == [["llmload.pkg", "llmload.pkg.build"]]


def test_no_module_imports_another_s_private_names(found: list[Import]) -> None:
    private = [f"{i.module}:{i.line} imports {n} from {i.target}" for i in found for n in i.names
               if n.startswith("_") and not n.startswith("__")]
    assert not private, "\n".join(private)


def test_the_layer_picture_is_the_graph_s(graph: dict[str, set[str]]) -> None:
    text = DESIGN.read_text(encoding="utf-8")
    assert PICTURE_START in text and PICTURE_END in text
    shown = text.split(PICTURE_START, 1)[1].split(PICTURE_END, 1)[0].strip()
    assert shown == picture(graph), "redraw it: python tests/unit/test_layers.py"


def test_the_check_fails_on_a_forbidden_import(graph: dict[str, set[str]]) -> None:
    """The rule test can fail: the core importing a way in (a lazy import inside a function counts)."""
    rules = read_rules(DESIGN.read_text(encoding="utf-8"))
    source = "def f():\n    from llmload.plugin.run import LocustRun\n    return LocustRun\n"
    added = imports_in("llmload.core.extra", source, set(all_modules()))
    assert [unit_of(resolve(i.target, set(all_modules()))) for i in added] == ["plugin"]
    grown = {u: set(v) for u, v in graph.items()}
    grown["core"].add("plugin")
    assert "core imports plugin, which design.md says it must not import" in violations(grown, rules)
    # and an import under TYPE_CHECKING counts as well: a dependency in the types is one in the design
    typing_only = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from llmload.plugin import run\n"
    assert {unit_of(i.target) for i in imports_in("llmload.core.extra", typing_only, set(all_modules()))} == {
        "plugin"}


def test_the_check_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


if __name__ == "__main__":
    g = unit_graph(code_imports())
    for unit in sorted(g):
        print(f"{unit:<18} {' '.join(sorted(g[unit])) or '-'}")
    print()
    print(picture(g))
    problems = violations(g, read_rules(DESIGN.read_text(encoding="utf-8")))
    print("\n".join(problems) or "the table matches the code", file=sys.stderr)
