"""aisite's imports go one way: no cycle between its modules, nor between its packages (a top-level module counts as
a package of its own). Every import counts: at the top, inside a function, under TYPE_CHECKING; an import hidden
in a function is still an arrow a reader must follow."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from aisite import modules


@functools.cache
def module_graph() -> dict[str, set[str]]:
    return modules.module_graph(modules.modules())


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
    known = modules.modules(pkg)
    graph = {m: modules.imported(m, p, known) for m, p in known.items()}
    assert graph["aisite.inner"] == {"aisite.inner.b"}
    assert graph["aisite.inner.b"] == {"aisite.top"}
    assert graph["aisite.top"] == {"aisite.inner.b"}
    assert modules.cycles(graph) == [["aisite.inner.b", "aisite.top"]]
    assert modules.cycles(modules.package_graph(graph)) == [["aisite.inner", "aisite.top"]]


def test_no_module_imports_itself_round_a_cycle() -> None:
    graph = module_graph()
    assert len(graph) > 150, "the reader found aisite's modules"
    cycles = modules.cycles(graph)
    assert not cycles, "module cycles: " + " | ".join(_arrows(graph, c) for c in cycles)


def test_packages_import_one_way() -> None:
    graph = modules.package_graph(module_graph())
    cycles = modules.cycles(graph)
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
    graph = modules.package_graph(module_graph())
    assert high not in graph.get(low, set()), f"{low} imports {high}, above it"


def test_layers_put_each_package_after_what_it_imports() -> None:
    graph = modules.package_graph(module_graph())
    order = {p: i for i, layer in enumerate(modules.layers(graph)) for p in layer}
    assert set(order) == set(graph)
    assert all(order[d] < order[p] for p, deps in graph.items() for d in deps), "a package before what it imports"
    assert modules.layers({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == [["b"], ["a"], ["c"]]
