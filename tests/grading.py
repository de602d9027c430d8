"""Helpers for tests that grade files with the real grader."""

from __future__ import annotations

from pathlib import Path

from drill import authoring, catalog
from drill.authoring import base_name, expected_failures  # noqa: F401  (shared with drill dev check)
from drill.grader.result import GradeResult
from drill.grader.runner import grade

ROOT = Path(__file__).resolve().parent.parent
PLANTED = ROOT / "tests" / "planted"


def grade_path(path: Path, timeout: float | None = None) -> GradeResult:
    ex = catalog.identify(path)
    assert ex is not None, f"{path} is not recognised as an exercise"
    return grade(ex, path, timeout)


def planted_files() -> list[Path]:
    return authoring.planted_files(PLANTED)
