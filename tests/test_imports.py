"""aisite's imports go one way: no cycle between its modules, nor between its packages (a top-level module counts as
a package of its own). Every import counts: at the top, inside a function, under TYPE_CHECKING; an import hidden
in a function is still an arrow a reader must follow."""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "aisite"


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imported(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The aisite modules `module` imports; `from P import x` is module P.x where that is a module, else P."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    named: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            named += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            named += [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    out = set()
    for name in named:
        found = name
        while found and found not in known:
            found = found.rpartition(".")[0]
        if found.startswith("aisite") and found != module:
            out.add(found)
    return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one node, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _package(module: str) -> str:
    return ".".join(module.split(".")[:2])


@functools.cache
def module_graph() -> dict[str, set[str]]:
    known = _modules()
    return {m: _imported(m, p, known) for m, p in known.items()}


def package_graph(modules: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = defaultdict(set)
    for m, deps in modules.items():
        out[_package(m)] |= {_package(d) for d in deps} - {_package(m)}
    return dict(out)


def _arrows(graph: dict[str, set[str]], cycle: list[str]) -> str:
    return "; ".join(f"{a} -> {b}" for a in cycle for b in sorted(graph[a]) if b in cycle)


def test_the_graph_sees_every_kind_of_import(tmp_path: Path) -> None:
    """The reader itself: a function's import, a TYPE_CHECKING one and a relative one are arrows too (a test that
    read only top-level imports would pass the cycles the issue found)."""
    pkg = tmp_path / "aisite"
    (pkg / "inner").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "inner" / "__init__.py").write_text("from . import b\n")
    (pkg / "inner" / "b.py").write_text("def f():\n    from aisite import top\n")
    (pkg / "top.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from aisite.inner import b\n")
    known = {"aisite": pkg / "__init__.py", "aisite.inner": pkg / "inner/__init__.py"}
    known |= {"aisite.inner.b": pkg / "inner/b.py", "aisite.top": pkg / "top.py"}
    graph = {m: _imported(m, p, known) for m, p in known.items()}
    assert graph["aisite.inner"] == {"aisite.inner.b"}
    assert graph["aisite.inner.b"] == {"aisite.top"}
    assert graph["aisite.top"] == {"aisite.inner.b"}
    assert _cycles(graph) == [["aisite.inner.b", "aisite.top"]]
    assert _cycles(package_graph(graph)) == [["aisite.inner", "aisite.top"]]


def test_no_module_imports_itself_round_a_cycle() -> None:
    graph = module_graph()
    assert len(graph) > 150, "the reader found aisite's modules"
    cycles = _cycles(graph)
    assert not cycles, "module cycles: " + " | ".join(_arrows(graph, c) for c in cycles)


def test_packages_import_one_way() -> None:
    graph = package_graph(module_graph())
    cycles = _cycles(graph)
    assert not cycles, "package cycles: " + " | ".join(_arrows(graph, c) for c in cycles)


@pytest.mark.parametrize(
    ("low", "high"),
    [
        # The arrows the issue found pointing up, each kept down: the lab builds on serving, serving's checks are
        # checks, health and provisioning read the member store, and the platform names the taint from the plan.
        ("aisite.serving", "aisite.lab"),
        ("aisite.checks", "aisite.serving"),
        ("aisite.members", "aisite.health"),
        ("aisite.members", "aisite.maintenance"),
        ("aisite.platform", "aisite.health"),
        ("aisite.plan", "aisite.checks"),
        ("aisite.model", "aisite.plan"),
    ],
)
def test_lower_layers_do_not_reach_up(low: str, high: str) -> None:
    graph = package_graph(module_graph())
    assert high not in graph.get(low, set()), f"{low} imports {high}, above it"
