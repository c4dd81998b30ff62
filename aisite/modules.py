"""aisite's own modules as a reader meets them: each one's docstring and the imports between them (every import
counted: at the top, inside a function, under TYPE_CHECKING). docs/reference/modules.md is written from it and
tests/test_imports.py holds its graph free of cycles."""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from aisite.roots import PACKAGE


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    """Dotted name -> file, for every module of the package at `root` (a package by its __init__'s name)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imported(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The known modules `module` imports; `from P import x` is module P.x where that is a module, else P."""
    top = module.split(".", maxsplit=1)[0]
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
        if found.split(".")[0] == top and found != module:
            out.add(found)
    return out


def module_graph(known: dict[str, Path]) -> dict[str, set[str]]:
    return {m: imported(m, p, known) for m, p in known.items()}


def package_of(module: str) -> str:
    """The package a module counts in: aisite.plan.ceph is in aisite.plan; a top-level module is its own."""
    return ".".join(module.split(".")[:2])


def package_graph(graph: dict[str, set[str]], package: Callable[[str], str] = package_of) -> dict[str, set[str]]:
    out: dict[str, set[str]] = defaultdict(set)
    for m, deps in graph.items():
        out[package(m)] |= {package(d) for d in deps} - {package(m)}
    return dict(out)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's), each sorted."""
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


def layers(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's nodes in layers, each importing only from those before it (the graph has no cycle)."""
    placed: dict[str, int] = {}

    def depth(v: str) -> int:
        if v not in placed:
            placed[v] = 1 + max((depth(d) for d in graph.get(v, ()) if d != v), default=-1)
        return placed[v]

    for v in graph:
        depth(v)
    out: list[list[str]] = [[] for _ in range(max(placed.values(), default=-1) + 1)]
    for v, d in sorted(placed.items()):
        out[d].append(v)
    return out


def summary(path: Path) -> str:
    """A module's docstring, its first sentence, on one line."""
    text = " ".join((ast.get_docstring(ast.parse(path.read_text())) or "").split())
    return text.split(". ")[0].rstrip(".") + "." if text else ""
