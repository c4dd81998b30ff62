"""Isolating what makes a group fail, as NVIDIA's Cluster Readiness Engine does: split the group, re-test the
halves, recurse into a half that fails. Pure: the test is a callable, so the search is property-tested."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Isolated(Generic[T]):
    members: tuple[T, ...]  # the members each found failing alone (a singleton test), or in a smallest failing group
    between: tuple[tuple[tuple[T, ...], tuple[T, ...]], ...]  # halves that pass alone but fail together
    tests: int  # how many tests the search ran


def isolate(group: Sequence[T], test: Callable[[Sequence[T]], bool]) -> Isolated[T]:
    """The members of a failing `group` that make it fail. `test(g)` is True when g passes; a one-member test
    must be meaningful (a node's own links). Halves that both pass while their union failed are reported as a
    fault between them (a path, not a member)."""
    tests = 0

    def passes(g: Sequence[T]) -> bool:
        nonlocal tests
        tests += 1
        return test(g)

    members: list[T] = []
    between: list[tuple[tuple[T, ...], tuple[T, ...]]] = []

    def search(g: Sequence[T]) -> None:
        if len(g) == 1:
            members.append(g[0])
            return
        mid = len(g) // 2
        left, right = g[:mid], g[mid:]
        bad = [h for h in (left, right) if not passes(h)]
        for h in bad:
            search(h)
        if not bad:
            between.append((tuple(left), tuple(right)))

    search(list(group))
    return Isolated(tuple(members), tuple(between), tests)
