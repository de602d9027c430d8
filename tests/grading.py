"""Helpers for tests that grade files with the real grader."""

from __future__ import annotations

from pathlib import Path

from drill import catalog
from drill.grader.result import GradeResult
from drill.grader.runner import grade

ROOT = Path(__file__).resolve().parent.parent
PLANTED = ROOT / "tests" / "planted"


def grade_path(path: Path, timeout: float | None = None) -> GradeResult:
    ex = catalog.identify(path)
    assert ex is not None, f"{path} is not recognised as an exercise"
    return grade(ex, path, timeout)


def planted_files() -> list[Path]:
    return sorted(PLANTED.glob("*/*/*.py"))


def expected_failures(path: Path) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()[:30]
    return [line.split(":", 1)[1].strip() for line in lines if line.startswith("# expect-fail:")]


def base_name(check_name: str) -> str:
    return check_name.split(" [", 1)[0]
