"""CI's rotation of the costliest lab scenario groups (tests/conftest.py): each group runs one day in every
len(ROTATION_GROUPS), every day runs exactly one, and a skipped test says which group runs and when its own does."""

from __future__ import annotations

import datetime as dt

import pytest

from tests.conftest import ROTATION_GROUPS, rotation_due, rotation_skip


def test_every_group_takes_its_turn_and_each_day_runs_one() -> None:
    start = dt.date(2026, 11, 28)
    days = [start + dt.timedelta(days=k) for k in range(len(ROTATION_GROUPS))]
    assert sorted(rotation_due(d) for d in days) == sorted(ROTATION_GROUPS)
    for day in days:
        due = [g for g in ROTATION_GROUPS if rotation_skip(g, day) is None]
        assert due == [rotation_due(day)]
    why = rotation_skip("three-tier", dt.date(2026, 11, 28))
    assert why is not None and "'faults' runs today" in why and "'three-tier' next on 2026-12-01" in why, why
    for day in (dt.date(2026, 11, 29), dt.date(2026, 11, 30), dt.date(2026, 12, 1)):
        assert "'reconcile' next on 2026-12-02" in (rotation_skip("reconcile", day) or "")
    assert rotation_skip("reconcile", dt.date(2026, 12, 2)) is None
    assert "'reconcile' next on 2026-12-09" in (rotation_skip("reconcile", dt.date(2026, 12, 3)) or "")
    with pytest.raises(AssertionError, match="unknown rotating group"):
        rotation_skip("pul", start)


def test_the_lab_files_are_one_xdist_unit_and_every_other_file_its_own() -> None:
    """Under `--dist loadfile` (scripts/test.sh), tests/lab/'s files go to one worker, in order: they share one lab."""
    from tests.conftest import _LabInOneScope, pytest_xdist_make_scheduler

    class Config:
        def __init__(self, dist: str) -> None:
            self.dist = dist

        def getoption(self, name: str) -> str:
            assert name == "dist"
            return self.dist

    assert pytest_xdist_make_scheduler(Config("load"), None) is None  # type: ignore[arg-type]
    scheduler = _LabInOneScope.__new__(_LabInOneScope)
    scopes = {
        scheduler._split_scope(nodeid)
        for nodeid in ("tests/lab/test_00_up.py::test_a", "tests/lab/test_95_three_tier.py::test_b[x]")
    }
    assert scopes == {"tests/lab/"}
    assert scheduler._split_scope("tests/test_cli.py::test_c") == "tests/test_cli.py"
    assert scheduler._split_scope("tests/test_labels.py::test_d") == "tests/test_labels.py"
