"""Helpers for tests that grade files with the real grader."""

from __future__ import annotations

from pathlib import Path

import pytest

from drill import authoring, catalog
from drill.authoring import base_name, expected_failures  # noqa: F401  (shared with drill dev check)
from drill.grader.result import GradeResult
from drill.grader.runner import grade

ROOT = Path(__file__).resolve().parent.parent
PLANTED = ROOT / "tests" / "planted"


def grade_path(path: Path, timeout: float | None = None, only: tuple[str, ...] = ()) -> GradeResult:
    """`only`: just the checks whose names start so (what a planted file claims it fails)."""
    ex = catalog.identify(path)
    assert ex is not None, f"{path} is not recognised as an exercise"
    return grade(ex, path, timeout, only=only)


def planted_files() -> list[Path]:
    return authoring.planted_files(PLANTED)


_solutions: dict[str, GradeResult] = {}


def solution_result(ex, tmp_path_factory) -> GradeResult:
    """The reference solution of `ex`, graded once per worker and shared by the tests that read it."""
    if ex.key not in _solutions:
        folder = tmp_path_factory.mktemp(f"solution-{ex.id}")
        _solutions[ex.key] = authoring.grade_copy(ex, ex.solution_path, folder)
    return _solutions[ex.key]


def by_exercise(exercises):
    """Parameters that keep every test of one exercise on one xdist worker (`--dist loadgroup`)."""
    return [pytest.param(ex, id=ex.key, marks=pytest.mark.xdist_group(f"solution-{ex.topic}-{ex.id}")) for ex in exercises]
